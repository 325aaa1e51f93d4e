//! Unit tests of `model_api/mod.rs`.

use super::*;

#[test]
fn backend_config_parses_both_forms() {
    let cfg =
        BackendConfig::parse(&["onnxruntime,library=/opt/ort.so".into(), "default-max-batch-size=8".into()]).unwrap();
    assert_eq!(cfg.get("onnxruntime", "library"), Some("/opt/ort.so"));
    assert_eq!(cfg.get("onnxruntime", "default-max-batch-size"), Some("8"));
    assert_eq!(cfg.get("python", "library"), None);
    assert!(BackendConfig::parse(&["onnxruntime,library".into()]).is_err());
}
