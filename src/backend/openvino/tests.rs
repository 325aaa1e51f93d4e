//! Unit tests of the OpenVINO backend's parts that need no OpenVINO library.

use super::*;

#[test]
fn every_numeric_datatype_maps_to_an_element_type_and_back() {
    for dt in DataType::ALL {
        match to_element_type(dt) {
            Some(e) => assert_eq!(from_element_type(e), Some(dt), "{dt}"),
            None => assert_eq!(dt, DataType::Bytes),
        }
    }
}

fn cfg(default_model_filename: &str) -> ModelConfig {
    ModelConfig {
        name: "m".into(),
        backend: NAME.into(),
        default_model_filename: default_model_filename.into(),
        ..Default::default()
    }
}

#[test]
fn an_ir_without_its_weights_file_is_unavailable_with_the_file_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("model.xml"), "<net/>").unwrap();
    let e = model_files(dir.path(), &cfg("")).unwrap_err();
    assert!(e.message.contains("model.bin") && e.message.contains("missing"), "{}", e.message);
    std::fs::write(dir.path().join("model.bin"), b"").unwrap();
    let (xml, bin) = model_files(dir.path(), &cfg("")).unwrap();
    assert_eq!(
        (xml.file_name().unwrap(), bin.unwrap().file_name().unwrap()),
        ("model.xml".as_ref(), "model.bin".as_ref())
    );
}

#[test]
fn a_missing_model_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let e = model_files(dir.path(), &cfg("other.xml")).unwrap_err();
    assert!(e.message.contains("other.xml") && e.message.contains("not found"), "{}", e.message);
}

#[test]
fn default_max_batch_size_is_read_per_backend_then_globally() {
    let parse = |v: &[&str]| BackendConfig::parse(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    assert_eq!(default_max_batch_size(&parse(&[])), 4);
    assert_eq!(default_max_batch_size(&parse(&["default-max-batch-size=8"])), 8);
    assert_eq!(default_max_batch_size(&parse(&["default-max-batch-size=8", "openvino,default-max-batch-size=2"])), 2);
    assert_eq!(default_max_batch_size(&parse(&["openvino,default-max-batch-size=x"])), 4);
}
