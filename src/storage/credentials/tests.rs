//! Unit tests of `storage/credentials.rs`.

use super::*;

#[test]
fn longest_prefix_wins() {
    let f: CredentialFile = serde_json::from_str(
        r#"{"s3": {"": {"key_id": "A"}, "s3://b2": {"key_id": "B"}, "s3://b2/deeper": {"key_id": "C"}},
                "gs": {"": "/default.json"}, "as": {"as://acct/c": {"account_str": "acct", "account_key": "k"}}}"#,
    )
    .unwrap();
    assert_eq!(pick(&f.s3, "s3://b1/m").unwrap().key_id, "A");
    assert_eq!(pick(&f.s3, "s3://b2/m").unwrap().key_id, "B");
    assert_eq!(pick(&f.s3, "s3://b2/deeper/m").unwrap().key_id, "C");
    assert_eq!(pick(&f.gs, "gs://x").map(String::as_str), Some("/default.json"));
    assert!(pick(&f.azure, "as://other/c").is_none());
    assert!(CredentialFile::load(Path::new("/nonexistent/creds.json")).unwrap_err().message.contains("cannot read"));
}

#[test]
fn reads_aws_profiles() {
    let dir = tempfile::tempdir().unwrap();
    let creds = dir.path().join("credentials");
    let config = dir.path().join("config");
    std::fs::write(&creds, "[default]\naws_access_key_id = K1\naws_secret_access_key = S1\n\n[edge]\naws_access_key_id=K2\naws_secret_access_key=S2\naws_session_token=T2\n").unwrap();
    std::fs::write(&config, "[default]\nregion = eu-west-1\n[profile edge]\nregion=ap-south-1\n").unwrap();
    let d = aws_profile("default", Some(&creds), Some(&config));
    assert_eq!(
        (d.key_id.as_deref(), d.secret_key.as_deref(), d.region.as_deref()),
        (Some("K1"), Some("S1"), Some("eu-west-1"))
    );
    let e = aws_profile("edge", Some(&creds), Some(&config));
    assert_eq!((e.session_token.as_deref(), e.region.as_deref()), (Some("T2"), Some("ap-south-1")));
    assert_eq!(aws_profile("missing", Some(&creds), None), AwsProfile::default());
}

#[test]
fn builds_clients_without_contacting_anything() {
    let f = CredentialFile::default();
    for url in ["s3://bucket/m", "s3://127.0.0.1:9/b/m", "gs://bucket/m"] {
        let u = super::super::url::parse(url).unwrap();
        if let Err(e) = build_store(&u, &f, &Skipped::default()) {
            // GCS without any credentials may refuse to build; the message must name the URL.
            assert!(e.message.contains(url), "{e}");
        }
    }
}
