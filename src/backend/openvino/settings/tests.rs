//! Unit tests of reading the openvino backend's parameters.

use super::*;
use crate::proto::inference::{ModelInstanceGroup, ModelParameter};
use std::sync::Arc;

fn ctx(params: &[(&str, &str)], counts: &[i32]) -> ModelContext {
    let config = ModelConfig {
        name: "m".into(),
        parameters: params
            .iter()
            .map(|(k, v)| (k.to_string(), ModelParameter { string_value: v.to_string() }))
            .collect(),
        instance_group: counts.iter().map(|&count| ModelInstanceGroup { count, ..Default::default() }).collect(),
        ..Default::default()
    };
    ModelContext {
        name: "m".into(),
        version: 1,
        config: Arc::new(config),
        model_dir: std::env::temp_dir(),
        version_dir: std::env::temp_dir(),
    }
}

#[test]
fn several_instances_get_a_stream_each_unless_the_model_chooses() {
    assert!(Settings::read(&ctx(&[], &[1])).unwrap().properties.is_empty());
    assert_eq!(Settings::read(&ctx(&[], &[2, 1])).unwrap().properties, [("NUM_STREAMS", "3".to_string())]);
    let chosen = Settings::read(&ctx(&[("NUM_STREAMS", "1")], &[2])).unwrap();
    assert_eq!(chosen.properties, [("NUM_STREAMS", "1".to_string())]);
    let hinted = Settings::read(&ctx(&[("PERFORMANCE_HINT", "throughput")], &[4])).unwrap();
    assert_eq!(hinted.properties, [("PERFORMANCE_HINT", "THROUGHPUT".to_string())]);
    let gpu = Settings::read(&ctx(&[("TARGET_DEVICE", "gpu")], &[2])).unwrap();
    assert!(gpu.properties.is_empty() && gpu.device == "GPU", "{gpu:?}");
}

#[test]
fn bad_values_name_the_parameter_and_what_it_accepts() {
    for (k, v, accepted) in [
        ("PERFORMANCE_HINT", "FASTEST", "LATENCY"),
        ("NUM_STREAMS", "0", "AUTO"),
        ("INFERENCE_NUM_THREADS", "-3", "threads"),
        ("HINT_BF16", "maybe", "YES or NO"),
        ("ENABLE_BATCH_PADDING", "sure", "YES or NO"),
        ("TARGET_DEVICE", "GPU; rm", "device"),
    ] {
        let e = Settings::read(&ctx(&[(k, v)], &[1])).unwrap_err();
        assert!(e.message.contains(k) && e.message.contains(accepted), "{}", e.message);
    }
    let e = Settings::read(&ctx(&[("CPU_EXTENSION_PATH", "/no/such/libext.so")], &[1])).unwrap_err();
    assert!(e.message.contains("/no/such/libext.so"), "{}", e.message);
}

#[test]
fn devices_are_checked_against_what_openvino_finds() {
    let found = ["CPU".to_string(), "GPU.0".to_string(), "GPU.1".to_string()];
    for ok in ["CPU", "GPU", "GPU.1", "AUTO", "AUTO:GPU,CPU", "MULTI:GPU.0,CPU"] {
        assert!(check_device(ok, &found).is_ok(), "{ok}");
    }
    let e = check_device("NPU", &found).unwrap_err();
    assert!(e.message.contains("NPU") && e.message.contains("CPU, GPU.0, GPU.1"), "{}", e.message);
    let e = check_device("AUTO:NPU,CPU", &found).unwrap_err();
    assert!(e.message.contains("NPU device"), "{}", e.message);
    assert!(check_device("CPU", &[]).is_err());
}
