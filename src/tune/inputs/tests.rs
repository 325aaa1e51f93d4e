//! Unit tests of `tune/inputs.rs`.

use super::*;
use crate::proto::inference::{DataType as PbType, ModelInput};

fn cfg() -> ModelConfig {
    ModelConfig {
        name: "m".into(),
        max_batch_size: 8,
        input: vec![
            ModelInput {
                name: "A".into(),
                data_type: PbType::TypeFp32 as i32,
                dims: vec![2, -1],
                ..Default::default()
            },
            ModelInput { name: "S".into(), data_type: PbType::TypeString as i32, dims: vec![1], ..Default::default() },
        ],
        ..Default::default()
    }
}

#[test]
fn random_requests_follow_the_config_and_shapes() {
    let shapes = parse_shapes(&["A:2,3".into()]).unwrap();
    let reqs = random(&cfg(), "m", &shapes).unwrap();
    assert_eq!(reqs.len(), 4);
    assert_eq!(reqs[0].inputs[0].shape, [1, 2, 3]);
    assert_eq!(reqs[0].inputs[0].data.to_host().unwrap().len(), 6 * 4);
    assert_eq!(reqs[0].inputs[1].shape, [1, 1]);
    // Random floats are normal numbers in [0, 1), never subnormals.
    let a = reqs[0].inputs[0].data.to_host().unwrap();
    let floats: Vec<f32> = a.chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    assert!(floats.iter().all(|f| (0.0..1.0).contains(f) && (*f == 0.0 || f.is_normal())), "{floats:?}");
    assert!(floats.iter().any(|f| *f > 0.01), "{floats:?}");
    assert!(parse_shapes(&["A:2,x".into()]).is_err());
    assert!(random(&cfg(), "m", &parse_shapes(&["A:3,3".into()]).unwrap()).is_err());
}

#[test]
fn perf_analyzer_input_data_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("in.json");
    std::fs::write(
        &p,
        r#"{"data": [{"A": {"content": [1, 2, 3, 4], "shape": [2, 2]}, "S": ["hi"]},
                         {"A": [[1, 2], [3, 4]], "S": {"b64": "AgAAAGhp", "shape": [1]}}]}"#,
    )
    .unwrap();
    let shapes = parse_shapes(&["A:2,2".into()]).unwrap();
    let reqs = from_json(&cfg(), "m", &p, &shapes).unwrap();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].inputs[0].shape, [1, 2, 2]);
    let a = reqs[0].inputs[0].data.to_host().unwrap();
    assert_eq!(&a[4..8], &2f32.to_le_bytes());
    assert_eq!(reqs[0].inputs[1].data.to_host().unwrap().as_ref(), b"\x02\x00\x00\x00hi");
    assert_eq!(reqs[1].inputs[1].data.to_host().unwrap().as_ref(), b"\x02\x00\x00\x00hi");
    std::fs::write(&p, r#"{"data": [{"A": [1, 2, 3]}]}"#).unwrap();
    let e = from_json(&cfg(), "m", &p, &shapes).unwrap_err();
    assert!(e.message.contains("missing") || e.message.contains("values"), "{}", e.message);
}
