use super::*;
use crate::model_config::pbtxt::parse_config;

fn cfg(text: &str) -> ModelConfig {
    let mut c = parse_config(text, "config.pbtxt").unwrap();
    c.name = "m".into();
    c
}

const IO: &str = r#"
    input [{ name: "IN" data_type: TYPE_FP32 dims: [4] }]
    output [{ name: "OUT" data_type: TYPE_FP32 dims: [4] }]
"#;

fn refused(text: &str, field: &str) {
    let e = check(&cfg(&format!("{IO}\n{text}")), DEFAULT_MAX_TENSOR_BYTES).unwrap_err();
    assert!(e.message.contains(field) && e.message.contains("limit"), "{text}: {}", e.message);
}

#[test]
fn ordinary_configs_pass() {
    let text = format!(
        "{IO} max_batch_size: 8 instance_group [{{ count: 4 }}]
         model_warmup [{{ name: \"w\" batch_size: 8 inputs {{ key: \"IN\" value: {{ data_type: TYPE_FP32 dims: [4] zero_data: true }} }} }}]
         dynamic_batching {{ priority_levels: 3 }}"
    );
    check(&cfg(&text), DEFAULT_MAX_TENSOR_BYTES).unwrap();
}

#[test]
fn sizes_over_their_limits_are_refused_naming_the_field() {
    refused(
        r#"model_warmup [{ name: "w" inputs { key: "IN" value: { data_type: TYPE_FP32 dims: [1099511627776] zero_data: true } } }]"#,
        "model_warmup[0].inputs[\"IN\"].dims",
    );
    refused(
        r#"model_warmup [{ name: "w" inputs { key: "IN" value: { data_type: TYPE_STRING dims: [9223372036854775807, 4] random_data: true } } }]"#,
        "model_warmup[0].inputs[\"IN\"].dims",
    );
    refused("instance_group [{ count: 2147483647 }]", "instance_group[0].count");
    refused("instance_group [{ count: 200 }, { count: 200 }]", "instance_group[1].count");
    refused("instance_group [{ count: 100 kind: KIND_GPU gpus: [0, 1, 2] }]", "instance_group[0].count");
    refused("max_batch_size: 2147483647", "max_batch_size");
    refused("max_batch_size: 60000 sequence_batching {} instance_group [{ count: 2 }]", "max_batch_size");
    refused(
        "sequence_batching { oldest { max_candidate_sequences: 2147483647 } }",
        "sequence_batching.oldest.max_candidate_sequences",
    );
    refused("dynamic_batching { priority_levels: 18446744073709551615 }", "dynamic_batching.priority_levels");
    refused(
        r#"sequence_batching { state [{ input_name: "S" output_name: "S_OUT" data_type: TYPE_FP32 dims: [1099511627776] }] }"#,
        "sequence_batching.state[0].dims",
    );
    refused(
        r#"sequence_batching { state [{ input_name: "S" output_name: "S_OUT" data_type: TYPE_FP32 dims: [-1]
            initial_state [{ name: "i" data_type: TYPE_FP32 dims: [1099511627776] zero_data: true }] }] }"#,
        "initial_state[0].dims",
    );
}

#[test]
fn dims_whose_product_overflows_are_refused() {
    let c = cfg(r#"input [{ name: "IN" data_type: TYPE_FP32 dims: [4294967296, 4294967296] }]
                   output [{ name: "OUT" data_type: TYPE_FP32 dims: [4] }]"#);
    let e = check(&c, DEFAULT_MAX_TENSOR_BYTES).unwrap_err();
    assert!(e.message.contains("input[0].dims"), "{}", e.message);
}

#[test]
fn the_tensor_limit_follows_the_request_limit() {
    let text = format!(
        "{IO} model_warmup [{{ name: \"w\" inputs {{ key: \"IN\" value: {{ data_type: TYPE_FP32 dims: [1048576] zero_data: true }} }} }}]"
    );
    // 4 MiB: over a 1 MiB request limit, within the default.
    assert!(check(&cfg(&text), 1 << 20).is_err());
    check(&cfg(&text), DEFAULT_MAX_TENSOR_BYTES).unwrap();
}

#[test]
fn bounded_reads_refuse_or_cut_long_files() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("f");
    std::fs::write(&p, b"0123456789").unwrap();
    assert_eq!(read_file_bounded(&p, 10, false, "f").unwrap(), b"0123456789");
    assert!(read_file_bounded(&p, 9, false, "f").unwrap_err().message.contains("over the limit"));
    assert_eq!(read_file_bounded(&p, 4, true, "f").unwrap(), b"0123");
}

#[test]
fn impossible_allocations_are_errors() {
    assert!(zeroed(usize::MAX / 2, "x").is_err());
    assert_eq!(zeroed(3, "x").unwrap(), vec![0, 0, 0]);
}
