//! Unit tests of `storage/url.rs`.

use super::*;

#[test]
fn triton_forms() {
    let u = parse("s3://bucket/path/to/models/").unwrap();
    assert_eq!(
        (u.cloud, u.bucket.as_str(), u.prefix.as_str(), u.endpoint),
        (Cloud::S3, "bucket", "path/to/models", None)
    );
    assert_eq!(u.url, "s3://bucket/path/to/models");
    let u = parse("s3://127.0.0.1:9000/b/m").unwrap();
    assert_eq!(u.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
    assert_eq!((u.bucket.as_str(), u.prefix.as_str()), ("b", "m"));
    let u = parse("s3://https://minio.local:9000/b").unwrap();
    assert_eq!(u.endpoint.as_deref(), Some("https://minio.local:9000"));
    assert_eq!((u.bucket.as_str(), u.prefix.as_str()), ("b", ""));
    let u = parse("s3://http://minio.local/b/x").unwrap();
    assert_eq!(u.endpoint.as_deref(), Some("http://minio.local"));
    let u = parse("gs://bucket").unwrap();
    assert_eq!((u.cloud, u.bucket.as_str(), u.prefix.as_str()), (Cloud::Gcs, "bucket", ""));
    let u = parse("as://acct/container/a/b").unwrap();
    assert_eq!(u.account.as_deref(), Some("acct"));
    assert_eq!((u.cloud, u.bucket.as_str(), u.prefix.as_str()), (Cloud::Azure, "container", "a/b"));
}

#[test]
fn refuses_what_names_no_bucket() {
    for bad in [
        "s3://",
        "s3://host:9000",
        "s3://https:///b",
        "gs:///x",
        "as://acct",
        "as:///c",
        "s3://b/../x",
        "s3://b/a//c",
        "/local",
    ] {
        assert!(parse(bad).is_err(), "{bad}");
    }
    assert!(is_cloud("as://a/b") && !is_cloud("/models") && !is_cloud("s3:/x"));
}
