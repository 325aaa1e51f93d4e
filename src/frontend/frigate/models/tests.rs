//! Unit tests of `frontend/frigate/models.rs`.

use super::*;
use crate::model_config::autocomplete::IoInfo;

fn io(outputs: &[&str]) -> ModelIoInfo {
    let t = |n: &str| IoInfo { name: n.into(), data_type: 11, dims: vec![1] };
    ModelIoInfo { inputs: vec![t("images")], outputs: outputs.iter().map(|n| t(n)).collect() }
}

#[test]
fn decoders_follow_the_outputs() {
    assert_eq!(decoder(&io(&["output0"])).unwrap(), "yolo");
    assert_eq!(
        decoder(&io(&["detection_classes", "num_detections", "detection_boxes", "detection_scores"])).unwrap(),
        "efficient_nms"
    );
    assert_eq!(decoder(&io(&["boxes", "classes", "scores", "count"])).unwrap(), "ssd");
    assert!(decoder(&io(&["a", "b"])).unwrap_err().message.contains("fit no detection decoder"));
}

#[test]
fn refuses_bad_names_sizes_and_files() {
    let dir = tempfile::tempdir().unwrap();
    for bad in ["", "../x", ".hidden", "a/b", "a b"] {
        assert!(save(dir.path(), bad, b"x", 10).is_err(), "{bad}");
    }
    assert!(save(dir.path(), "m", &[0u8; 11], 10).unwrap_err().message.contains("more than"));
    assert!(save(dir.path(), "m", b"not onnx at all", 100).is_err());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing is left behind");
}
