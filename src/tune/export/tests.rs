//! Unit tests of `tune/export.rs`.

use super::*;
use crate::tune::results::{Candidate, Point, VariantResult};

#[test]
fn export_lays_out_best_and_variants_with_the_model_files() {
    let tmp = tempfile::tempdir().unwrap();
    let model_dir = tmp.path().join("repo/m");
    std::fs::create_dir_all(model_dir.join("1")).unwrap();
    std::fs::write(model_dir.join("1/model.onnx"), b"x").unwrap();
    std::fs::write(model_dir.join("config.pbtxt"), "name: \"m\"\n").unwrap();
    let variant = |name: &str| VariantResult {
        model: "m".into(),
        name: name.into(),
        candidate: Candidate::default(),
        config_pbtxt: "name: \"m\"\nmax_batch_size: 8\ninstance_group {\n  name: \"m\"\n}\n".into(),
        points: vec![Point::default()],
        error: None,
        best: Some(0),
    };
    let report = TuneReport {
        variants: vec![variant("m_config_default"), variant("m_config_0")],
        best: vec![("m".into(), Some(1))],
        ..Default::default()
    };
    let out = tmp.path().join("export");
    let files = export(&report, &out, &[("m".into(), model_dir.clone())]).unwrap();
    assert_eq!(files.len(), 3);
    let text = std::fs::read_to_string(out.join("m_config_0/config.pbtxt")).unwrap();
    assert!(text.starts_with("name: \"m_config_0\"\n"), "{text}");
    assert!(text.contains("  name: \"m\""), "the group's name is left alone: {text}");
    assert!(std::fs::read_to_string(out.join("m/config.pbtxt")).unwrap().starts_with("name: \"m\""));
    assert_eq!(std::fs::read(out.join("m_config_0/1/model.onnx")).unwrap(), b"x");

    let backup = apply(&model_dir, "name: \"m\"\nmax_batch_size: 8\n").unwrap().unwrap();
    assert_eq!(std::fs::read_to_string(backup).unwrap(), "name: \"m\"\n");
    assert!(std::fs::read_to_string(model_dir.join("config.pbtxt")).unwrap().contains("max_batch_size: 8"));
}
