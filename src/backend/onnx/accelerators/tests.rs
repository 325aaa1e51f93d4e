//! Unit tests of `backend/onnx/accelerators.rs`.

use super::*;

fn cfg(text: &str) -> ModelConfig {
    crate::model_config::pbtxt::parse_config(text, "config.pbtxt").unwrap()
}

#[test]
fn tensorrt_parameters_map_to_onnx_runtime_options() {
    let c = cfg(r#"name: "m" optimization { execution_accelerators { gpu_execution_accelerator: [ {
            name: "tensorrt"
            parameters { key: "precision_mode" value: "FP16" }
            parameters { key: "max_workspace_size_bytes" value: "1073741824" }
            parameters { key: "trt_engine_cache_enable" value: "false" }
        } ] } }"#);
    let p = plan(&c, Path::new("/var/cache/tritonrs")).unwrap();
    assert!(p.cpu.is_empty());
    let Accel::TensorRt(opts) = &p.gpu[0] else { panic!("{p:?}") };
    assert!(opts.contains(&("trt_fp16_enable".into(), "1".into())), "{opts:?}");
    assert!(opts.contains(&("trt_max_workspace_size".into(), "1073741824".into())), "{opts:?}");
    assert!(opts.contains(&("trt_engine_cache_enable".into(), "0".into())), "{opts:?}");
    assert!(opts.contains(&("trt_engine_cache_path".into(), "/var/cache/tritonrs".into())), "{opts:?}");

    // Without settings: engines cached in the server's cache directory.
    let c = cfg(
        r#"name: "m" optimization { execution_accelerators { gpu_execution_accelerator: [ { name: "tensorrt" } ] } }"#,
    );
    let Accel::TensorRt(opts) = &plan(&c, Path::new("/c")).unwrap().gpu[0] else { panic!() };
    assert_eq!(
        opts,
        &vec![("trt_engine_cache_enable".into(), "1".into()), ("trt_engine_cache_path".into(), "/c".into())]
    );
}

#[test]
fn bad_accelerators_are_clear_errors() {
    for (text, want) in [
        (
            r#"gpu_execution_accelerator: [ { name: "tensorrt" parameters { key: "precision_mode" value: "FP64" } } ]"#,
            "must be FP32, FP16 or INT8",
        ),
        (
            r#"gpu_execution_accelerator: [ { name: "tensorrt" parameters { key: "max_workspace_size_bytes" value: "lots" } } ]"#,
            "must be an integer",
        ),
        (
            r#"gpu_execution_accelerator: [ { name: "tensorrt" parameters { key: "trt_fp99" value: "1" } } ]"#,
            "has no parameter 'trt_fp99'",
        ),
        (r#"gpu_execution_accelerator: [ { name: "rocm" } ]"#, "unknown GPU execution accelerator 'rocm'"),
        (r#"cpu_execution_accelerator: [ { name: "tensorrt" } ]"#, "unknown CPU execution accelerator 'tensorrt'"),
        (
            r#"cpu_execution_accelerator: [ { name: "openvino" parameters { key: "x" value: "1" } } ]"#,
            "'openvino' has no parameter 'x'",
        ),
    ] {
        let c = cfg(&format!(r#"name: "m" optimization {{ execution_accelerators {{ {text} }} }}"#));
        let e = plan(&c, Path::new("/c")).unwrap_err();
        assert!(e.message.contains(want), "{text}: {e}");
        assert!(e.message.starts_with("model 'm': "), "{e}");
    }
    let c = cfg(
        r#"name: "m" optimization { execution_accelerators { cpu_execution_accelerator: [ { name: "openvino" parameters { key: "device_type" value: "CPU" } } ] } }"#,
    );
    assert_eq!(
        plan(&c, Path::new("/c")).unwrap().cpu,
        vec![Accel::OpenVino(vec![("device_type".into(), "CPU".into())])]
    );
}

#[test]
fn the_cache_directory_follows_systemd_then_xdg() {
    // Only reads the environment; the test does not change it (other tests run in parallel).
    let d = default_cache_dir();
    assert!(d.is_absolute() || d.starts_with(std::env::temp_dir()), "{d:?}");
}

#[test]
fn cuda_accelerator_options_are_checked_and_model_parameters_win() {
    let c = cfg(r#"name: "m" optimization { execution_accelerators { gpu_execution_accelerator: [ {
            name: "cuda"
            parameters { key: "cudnn_conv_use_max_workspace" value: "0" }
            parameters { key: "gpu_mem_limit" value: "1000" }
            parameters { key: "use_ep_level_unified_stream" value: "true" }
        } ] } }"#);
    let p = plan(&c, Path::new("/c")).unwrap();
    let params = vec![("gpu_mem_limit".to_string(), "2000".to_string())];
    let opts = cuda_options(&p, &params);
    let want: Vec<(String, String)> =
        [("cudnn_conv_use_max_workspace", "0"), ("use_ep_level_unified_stream", "1"), ("gpu_mem_limit", "2000")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    assert_eq!(opts, want);

    let c = cfg(r#"name: "m" optimization { execution_accelerators { gpu_execution_accelerator: [ {
            name: "cuda" parameters { key: "gpu_mem_limt" value: "1" } } ] } }"#);
    let e = plan(&c, Path::new("/c")).unwrap_err().to_string();
    assert!(e.contains("'cuda' has no parameter 'gpu_mem_limt'"), "{e}");
    let c = cfg(r#"name: "m" optimization { execution_accelerators { gpu_execution_accelerator: [ {
            name: "cuda" parameters { key: "gpu_mem_limit" value: "lots" } } ] } }"#);
    let e = plan(&c, Path::new("/c")).unwrap_err().to_string();
    assert!(e.contains("gpu_mem_limit") && e.contains("lots"), "{e}");
}

#[test]
fn tensorrt_knows_the_2_51_ep_context_and_cache_prefix_parameters() {
    let c = cfg(r#"name: "m" optimization { execution_accelerators { gpu_execution_accelerator: [ {
            name: "tensorrt"
            parameters { key: "trt_engine_cache_prefix" value: "cam" }
            parameters { key: "trt_dump_ep_context_model" value: "true" }
            parameters { key: "trt_ep_context_file_path" value: "/tmp/ctx" }
            parameters { key: "trt_ep_context_embed_mode" value: "1" }
        } ] } }"#);
    let Accel::TensorRt(opts) = &plan(&c, Path::new("/c")).unwrap().gpu[0] else { panic!() };
    for (k, v) in [
        ("trt_engine_cache_prefix", "cam"),
        ("trt_dump_ep_context_model", "1"),
        ("trt_ep_context_file_path", "/tmp/ctx"),
        ("trt_ep_context_embed_mode", "1"),
    ] {
        assert!(opts.contains(&(k.to_string(), v.to_string())), "{k}: {opts:?}");
    }
}
