//! Unit tests of `backend/onnx/options.rs`.

use super::*;

fn cfg(text: &str) -> ModelConfig {
    crate::model_config::pbtxt::parse_config(text, "config.pbtxt").unwrap()
}

fn with_params(pairs: &[(&str, &str)], tail: &str) -> ModelConfig {
    let params: String = pairs
        .iter()
        .map(|(k, v)| format!("parameters {{ key: \"{k}\" value: {{ string_value: \"{v}\" }} }}\n"))
        .collect();
    cfg(&format!("name: \"m\"\n{params}{tail}"))
}

#[test]
fn nothing_set_is_onnx_runtimes_defaults() {
    let s = read(&with_params(&[], "")).unwrap();
    assert_eq!(s.graph_level, GraphLevel::All);
    assert_eq!((s.parallel, s.mem_arena, s.mem_pattern), (None, None, None));
    assert!(s.session_entries.is_empty() && s.run_entries.is_empty() && s.cuda.is_empty() && s.unknown.is_empty());
}

#[test]
fn tritons_parameters_are_read_with_their_values() {
    let s = read(&with_params(
        &[
            ("intra_op_thread_count", "2"),
            ("inter_op_thread_count", "0"),
            ("execution_mode", "1"),
            ("enable_mem_arena", "0"),
            ("enable_mem_pattern", "true"),
            ("memory.enable_memory_arena_shrinkage", "cpu:0;gpu:0"),
            ("session.use_device_allocator_for_initializers", "1"),
            ("image.layout", "NCHW"),
        ],
        "optimization { graph { level: -1 } }",
    ))
    .unwrap();
    assert_eq!((s.intra_op_threads, s.inter_op_threads), (Some(2), Some(0)));
    assert_eq!((s.parallel, s.mem_arena, s.mem_pattern), (Some(true), Some(false), Some(true)));
    assert_eq!(s.graph_level, GraphLevel::Basic);
    assert_eq!(s.run_entries, vec![("memory.enable_memory_arena_shrinkage".into(), "cpu:0;gpu:0".into())]);
    assert_eq!(s.session_entries, vec![("session.use_device_allocator_for_initializers".into(), "1".into())]);
    assert!(s.unknown.is_empty(), "{:?}", s.unknown);
}

#[test]
fn graph_levels_map_as_tritons_backend_maps_them() {
    for (level, want) in
        [(0, GraphLevel::All), (-1, GraphLevel::Basic), (1, GraphLevel::Extended), (2, GraphLevel::Disabled)]
    {
        let s = read(&with_params(&[], &format!("optimization {{ graph {{ level: {level} }} }}"))).unwrap();
        assert_eq!(s.graph_level, want, "level {level}");
    }
    let e = read(&with_params(&[], "optimization { graph { level: 3 } }")).unwrap_err().to_string();
    assert!(e.contains("optimization.graph.level") && e.contains('3'), "{e}");
}

#[test]
fn cuda_parameters_become_onnx_runtimes_options() {
    let s = read(&with_params(
        &[
            ("cudnn_conv_algo_search", "1"),
            ("gpu_mem_limit", "4294967200"),
            ("arena_extend_strategy", "1"),
            ("do_copy_in_default_stream", "false"),
        ],
        "",
    ))
    .unwrap();
    let want: Vec<(String, String)> = [
        ("arena_extend_strategy", "kSameAsRequested"),
        ("cudnn_conv_algo_search", "HEURISTIC"),
        ("do_copy_in_default_stream", "0"),
        ("gpu_mem_limit", "4294967200"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(s.cuda, want);
}

#[test]
fn bad_values_name_the_parameter_and_the_value() {
    for (k, v) in [
        ("execution_mode", "2"),
        ("enable_mem_arena", "maybe"),
        ("enable_mem_pattern", "2"),
        ("intra_op_thread_count", "-1"),
        ("inter_op_thread_count", "100000"),
        ("memory.enable_memory_arena_shrinkage", "disk:0"),
        ("memory.enable_memory_arena_shrinkage", "cpu"),
        ("cudnn_conv_algo_search", "3"),
        ("arena_extend_strategy", "two"),
        ("gpu_mem_limit", "-5"),
        ("do_copy_in_default_stream", "sometimes"),
    ] {
        let e = read(&with_params(&[(k, v)], "")).unwrap_err().to_string();
        assert!(e.contains(k) && e.contains(v), "{k}={v}: {e}");
    }
}

#[test]
fn unknown_parameters_are_collected_for_a_warning() {
    let s = read(&with_params(&[("enable_mem_arenna", "0"), ("session.", "x")], "")).unwrap();
    assert_eq!(s.unknown, vec!["enable_mem_arenna".to_string(), "session.".to_string()]);
}

#[test]
fn bool_values_follow_tritons_parse_bool_value() {
    for v in ["true", "TRUE", "on", "1"] {
        assert_eq!(parse_bool(v), Some(true), "{v}");
    }
    for v in ["false", "Off", "0"] {
        assert_eq!(parse_bool(v), Some(false), "{v}");
    }
    assert_eq!(parse_bool("yes"), None);
}
