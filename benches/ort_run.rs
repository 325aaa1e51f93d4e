//! One ONNX Runtime execution of the example `simple` model, in process: the floor under the
//! server's per-request cost. Needs the ONNX Runtime library (`source scripts/env.sh` sets
//! ORT_DYLIB_PATH). Run: `cargo bench --bench ort_run`.

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use tritonrs::backend::onnx::OnnxBackend;
use tritonrs::core::repository::{read_model_config, RepoOptions};
use tritonrs::model_api::types::{DataType, Tensor};
use tritonrs::model_api::{Backend, BackendConfig, ExecRequest, InstanceKind, InstanceSpec, ModelContext};

fn bench(c: &mut Criterion) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("model-repos/examples/simple");
    let cfg = Arc::new(read_model_config(&dir, "simple", &RepoOptions::default(), None).expect("example config"));
    let ctx = ModelContext {
        name: "simple".into(),
        version: 1,
        config: cfg,
        model_dir: dir.clone(),
        version_dir: dir.join("1"),
    };
    let backend = OnnxBackend::new(&BackendConfig::default());
    let mut instance = match backend.create_instance(
        &ctx,
        &InstanceSpec { name: "simple_0".into(), kind: InstanceKind::Cpu, profiles: Vec::new(), dla_core: None },
    ) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("skipping ort_run: {e} (source scripts/env.sh first)");
            return;
        }
    };
    let input = |name: &str| {
        Tensor::new(name, DataType::Int32, vec![1, 16], (0..16i32).flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>())
    };
    let req = ExecRequest {
        inputs: vec![input("INPUT0"), input("INPUT1")],
        outputs: vec!["OUTPUT0".into(), "OUTPUT1".into()],
        ..Default::default()
    };
    c.bench_function("ort_run_simple", |b| b.iter(|| instance.execute(black_box(&req)).expect("simple runs")));
}

criterion_group!(benches, bench);
criterion_main!(benches);
