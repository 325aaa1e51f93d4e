//! Unit tests of `backend/agents/checksum.rs`.

use super::*;

fn params(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn good_tampered_and_missing_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("1")).unwrap();
    std::fs::write(dir.path().join("1/model.onnx"), b"hello").unwrap();
    let md5 = "5d41402abc4b2a76b9719d911017c592";
    let sha = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
    let good = params(&[("MD5:1/model.onnx", md5), ("SHA256:1/model.onnx", &sha.to_uppercase())]);
    let mut m = Checksum.model("m", dir.path(), &good, "{}").unwrap();
    m.action(AgentAction::Load).unwrap();
    assert_eq!(m.location(), dir.path());

    std::fs::write(dir.path().join("1/model.onnx"), b"hellO").unwrap();
    let e = m.action(AgentAction::Load).unwrap_err();
    assert!(e.message.contains("1/model.onnx") && e.message.contains(md5), "{}", e.message);

    let missing = params(&[("MD5:2/model.onnx", md5)]);
    let e = Checksum.model("m", dir.path(), &missing, "{}").unwrap().action(AgentAction::Load).unwrap_err();
    assert!(e.message.contains("cannot read '2/model.onnx'"), "{}", e.message);
}

#[test]
fn parameters_are_checked_before_any_file_is_read() {
    let dir = tempfile::tempdir().unwrap();
    for bad in [
        params(&[("model.onnx", "00")]),
        params(&[("CRC32:model.onnx", "00")]),
        params(&[("MD5:model.onnx", "xyz")]),
        params(&[("SHA256:model.onnx", "5d41402abc4b2a76b9719d911017c592")]),
    ] {
        assert!(Checksum.model("m", dir.path(), &bad, "{}").is_err(), "{bad:?}");
    }
    let outside = params(&[("MD5:../x", "5d41402abc4b2a76b9719d911017c592")]);
    let e = Checksum.model("m", dir.path(), &outside, "{}").unwrap().action(AgentAction::Load).unwrap_err();
    assert!(e.message.contains(".."), "{}", e.message);
}
