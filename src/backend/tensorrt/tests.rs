//! The backend over the mock TensorRT: loading, profile choice, batched execution and errors.

use super::mock::MockRuntime;
use super::*;
use crate::model_api::types::DataType;
use crate::model_api::{ExecRequest, InstanceKind, InstanceSpec, ModelContext};
use crate::proto::inference::{ModelConfig, ModelInput, ModelOutput};

const PLAN: &str = r#"{
  "io": [
    {"name": "INPUT0", "input": true, "dtype": 0, "dims": [-1, 4]},
    {"name": "INPUT1", "input": true, "dtype": 0, "dims": [-1, 4]},
    {"name": "OUTPUT0", "input": false, "dtype": 0, "dims": [-1, 4]}
  ],
  "profiles": [
    {"INPUT0": [[1, 4], [2, 4], [4, 4]], "INPUT1": [[1, 4], [2, 4], [4, 4]]},
    {"INPUT0": [[5, 4], [8, 4], [16, 4]], "INPUT1": [[5, 4], [8, 4], [16, 4]]}
  ]
}"#;

struct Model {
    _dir: tempfile::TempDir,
    ctx: ModelContext,
}

fn model(plan: &[u8], max_batch_size: i32) -> Model {
    let dir = tempfile::tempdir().unwrap();
    let version_dir = dir.path().join("1");
    std::fs::create_dir_all(&version_dir).unwrap();
    std::fs::write(version_dir.join("model.plan"), plan).unwrap();
    let t = |n: &str| ModelInput {
        name: n.into(),
        data_type: DataType::Fp32.to_config(),
        dims: vec![4],
        ..Default::default()
    };
    let config = ModelConfig {
        name: "trt".into(),
        platform: "tensorrt_plan".into(),
        backend: "tensorrt".into(),
        max_batch_size,
        input: vec![t("INPUT0"), t("INPUT1")],
        output: vec![ModelOutput {
            name: "OUTPUT0".into(),
            data_type: DataType::Fp32.to_config(),
            dims: vec![4],
            ..Default::default()
        }],
        ..Default::default()
    };
    let ctx = ModelContext {
        name: "trt".into(),
        version: 1,
        config: Arc::new(config),
        model_dir: dir.path().to_path_buf(),
        version_dir,
    };
    Model { _dir: dir, ctx }
}

/// A backend over a fresh mock TensorRT, and the mock (for its recorded runs and devices).
fn mock_backend() -> (Arc<MockRuntime>, TensorRtBackend) {
    let mock = Arc::new(MockRuntime::default());
    let backend = TensorRtBackend::with_runtime(Arc::new(mock.clone()));
    (mock, backend)
}

fn gpu_spec(profiles: &[&str]) -> InstanceSpec {
    InstanceSpec {
        name: "trt_0".into(),
        kind: InstanceKind::Gpu { device_id: 0 },
        profiles: profiles.iter().map(|p| p.to_string()).collect(),
        dla_core: None,
    }
}

fn fp32(name: &str, batch: i64, v: f32) -> Tensor {
    let bytes: Vec<u8> = std::iter::repeat_n(v, (batch * 4) as usize).flat_map(f32::to_le_bytes).collect();
    Tensor::new(name, DataType::Fp32, vec![batch, 4], bytes)
}

fn request(batch: i64) -> ExecRequest {
    ExecRequest {
        inputs: vec![fp32("INPUT0", batch, 1.5), fp32("INPUT1", batch, 2.0)],
        outputs: vec!["OUTPUT0".into()],
        ..Default::default()
    }
}

fn values(t: &Tensor) -> Vec<f32> {
    t.data.to_host().unwrap().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

#[test]
fn batches_run_on_the_profile_that_fits_them() {
    let (mock, backend) = mock_backend();
    let m = model(PLAN.as_bytes(), 16);
    let mut inst = backend.create_instance(&m.ctx, &gpu_spec(&[])).expect("loads");
    // A batch of 3 (as the dynamic batcher merges requests) runs on profile 0, 12 on profile 1.
    let out = inst.execute(&request(3)).expect("runs");
    assert_eq!(out.outputs.len(), 1);
    assert_eq!(out.outputs[0].name, "OUTPUT0");
    assert_eq!(out.outputs[0].shape, vec![3, 4]);
    assert_eq!(values(&out.outputs[0]), vec![3.5; 12]);
    inst.execute(&request(12)).expect("runs");
    let runs = mock.runs.lock().clone();
    assert_eq!(runs, vec![(0, vec![vec![3, 4], vec![3, 4]]), (1, vec![vec![12, 4], vec![12, 4]])]);
    // Beyond every profile: a client error naming the input and the ranges, and the instance goes on.
    let e = inst.execute(&request(17)).unwrap_err();
    assert_eq!(e.kind, crate::error::ErrorKind::InvalidArgument, "{}", e.message);
    assert!(e.message.contains("[17, 4]") && e.message.contains("profile 1: [5, 4] to [16, 4]"), "{}", e.message);
    inst.execute(&request(1)).expect("still serving");
}

#[test]
fn an_instance_group_profile_list_is_honoured() {
    let (mock, backend) = mock_backend();
    // Limited to profile 1, max_batch_size 16 fits, and a batch of 2 (only profile 0's range) is refused.
    let m = model(PLAN.as_bytes(), 16);
    let mut inst = backend.create_instance(&m.ctx, &gpu_spec(&["1"])).expect("loads");
    inst.execute(&request(8)).expect("profile 1");
    assert!(inst.execute(&request(2)).is_err());
    assert_eq!(mock.runs.lock().iter().map(|r| r.0).collect::<Vec<_>>(), vec![1]);
    // Limited to profile 0, max_batch_size 16 is more than it takes.
    let e = backend.create_instance(&m.ctx, &gpu_spec(&["0"])).err().expect("refused");
    assert!(e.message.contains("max_batch_size 16 is larger than the 4"), "{}", e.message);
    let e = backend.create_instance(&m.ctx, &gpu_spec(&["7"])).err().expect("refused");
    assert!(e.message.contains("profile '7' does not exist"), "{}", e.message);
}

#[test]
fn instances_share_one_engine_per_gpu() {
    let (mock, backend) = mock_backend();
    let m = model(PLAN.as_bytes(), 16);
    let a = backend.create_instance(&m.ctx, &gpu_spec(&[])).unwrap();
    let b = backend.create_instance(&m.ctx, &gpu_spec(&[])).unwrap();
    let mut other = gpu_spec(&[]);
    other.kind = InstanceKind::Gpu { device_id: 1 };
    let c = backend.create_instance(&m.ctx, &other).unwrap();
    assert_eq!(*mock.devices.lock(), vec![0, 1]);
    drop((a, b, c));
}

#[test]
fn corrupt_and_empty_plans_are_refused_cleanly() {
    let (_, backend) = mock_backend();
    let m = model(b"\x00\x01not an engine", 16);
    let e = backend.create_instance(&m.ctx, &gpu_spec(&[])).err().expect("refused");
    assert!(e.message.contains("cannot deserialize the engine") && e.message.contains("model.plan"), "{}", e.message);
    let m = model(b"", 16);
    let e = backend.create_instance(&m.ctx, &gpu_spec(&[])).err().expect("refused");
    assert!(e.message.contains("is empty"), "{}", e.message);
}

#[test]
fn engines_and_configurations_must_agree() {
    let (_, backend) = mock_backend();
    let mut m = model(PLAN.as_bytes(), 16);
    let mut cfg = (*m.ctx.config).clone();
    cfg.input[1].name = "NOPE".into();
    m.ctx.config = Arc::new(cfg);
    assert!(backend.create_instance(&m.ctx, &gpu_spec(&[])).is_err());
}

#[test]
fn tensorrt_runs_on_gpus_only() {
    let (_, backend) = mock_backend();
    let m = model(PLAN.as_bytes(), 16);
    let mut spec = gpu_spec(&[]);
    spec.kind = InstanceKind::Cpu;
    let e = backend.create_instance(&m.ctx, &spec).err().expect("refused");
    assert!(e.message.contains("KIND_CPU") && e.message.contains("run on a GPU"), "{}", e.message);
}

#[test]
fn without_libnvinfer_models_are_unavailable_with_the_reason() {
    let config = BackendConfig::parse(&["tensorrt,library=/nonexistent/libnvinfer.so.10".into()]).unwrap();
    let backend = TensorRtBackend::new(&config, None);
    let m = model(PLAN.as_bytes(), 16);
    let e = backend.create_instance(&m.ctx, &gpu_spec(&[])).err().expect("refused");
    assert_eq!(e.kind, crate::error::ErrorKind::Unavailable);
    assert!(e.message.contains("TensorRT is not installed"), "{}", e.message);
}

#[test]
fn plugins_are_listed_with_semicolons() {
    let config = BackendConfig::parse(&["tensorrt,plugins=/a/libone.so; /b/libtwo.so".into()]).unwrap();
    let backend = TensorRtBackend::new(&config, None);
    assert_eq!(backend.opts.plugins, vec![PathBuf::from("/a/libone.so"), PathBuf::from("/b/libtwo.so")]);
    // A plugin that cannot be loaded fails TensorRT's loading (here libnvinfer is missing first).
    let config =
        BackendConfig::parse(&["tensorrt,library=/nonexistent/libnvinfer.so".into(), "tensorrt,plugins=/x.so".into()])
            .unwrap();
    assert!(TensorRtBackend::new(&config, None).runtime().is_err());
}

#[test]
fn a_changed_plan_is_deserialized_again() {
    let (mock, backend) = mock_backend();
    let m = model(PLAN.as_bytes(), 16);
    let old = backend.create_instance(&m.ctx, &gpu_spec(&[])).unwrap();
    // A new model.plan (as a reload brings) while the old instance still serves: a new engine.
    let file = m.ctx.version_dir.join("model.plan");
    std::fs::write(&file, format!("{PLAN}\n")).unwrap();
    let new = backend.create_instance(&m.ctx, &gpu_spec(&[])).unwrap();
    assert_eq!(mock.devices.lock().len(), 2);
    drop((old, new));
}

/// Two profiles with the same ranges (batch 1 to 8), as built for two instances; enqueue takes 3 ms.
const TWIN_PLAN: &str = r#"{
  "io": [
    {"name": "INPUT0", "input": true, "dtype": 0, "dims": [-1, 4]},
    {"name": "INPUT1", "input": true, "dtype": 0, "dims": [-1, 4]},
    {"name": "OUTPUT0", "input": false, "dtype": 0, "dims": [-1, 4]}
  ],
  "profiles": [
    {"INPUT0": [[1, 4], [2, 4], [8, 4]], "INPUT1": [[1, 4], [2, 4], [8, 4]]},
    {"INPUT0": [[1, 4], [2, 4], [8, 4]], "INPUT1": [[1, 4], [2, 4], [8, 4]]}
  ],
  "enqueue_ms": 3
}"#;

fn named(name: &str) -> InstanceSpec {
    InstanceSpec { name: name.into(), ..gpu_spec(&[]) }
}

/// The profile of each run so far, then forgets them.
fn profiles_run(mock: &MockRuntime) -> Vec<usize> {
    std::mem::take(&mut *mock.runs.lock()).into_iter().map(|r| r.0).collect()
}

#[test]
fn instances_get_their_own_profile_where_the_engine_has_one_each() {
    let (mock, backend) = mock_backend();
    let m = model(TWIN_PLAN.as_bytes(), 8);
    let mut a = backend.create_instance(&m.ctx, &named("trt_0")).unwrap();
    let mut b = backend.create_instance(&m.ctx, &named("trt_1")).unwrap();
    a.execute(&request(2)).unwrap();
    b.execute(&request(2)).unwrap();
    assert_eq!(profiles_run(&mock), vec![0, 1]);
    // A third instance has no free profile left: it shares the least held one (0).
    let mut c = backend.create_instance(&m.ctx, &named("trt_2")).unwrap();
    c.execute(&request(2)).unwrap();
    assert_eq!(profiles_run(&mock), vec![0]);
    // Unloaded instances give their profiles back.
    drop((a, c));
    let mut d = backend.create_instance(&m.ctx, &named("trt_3")).unwrap();
    d.execute(&request(2)).unwrap();
    assert_eq!(profiles_run(&mock), vec![0]);
    drop((b, d));
}

#[test]
fn instances_on_distinct_profiles_run_side_by_side_and_sharers_take_turns() {
    for (plan, max_batch, instances) in [(TWIN_PLAN, 8, 2), (TWIN_PLAN, 8, 4), (PLAN, 16, 3)] {
        let (mock, backend) = mock_backend();
        // PLAN's two profiles serve different batch sizes, so every instance holds both and shares them.
        let plan = if plan.contains("enqueue_ms") {
            plan.to_string()
        } else {
            plan.replace("\"profiles\"", "\"enqueue_ms\": 3, \"profiles\"")
        };
        let m = model(plan.as_bytes(), max_batch);
        let insts: Vec<_> =
            (0..instances).map(|i| backend.create_instance(&m.ctx, &named(&format!("trt_{i}"))).unwrap()).collect();
        // Every instance runs 15 batches at once with the others; the mock fails a run that overlaps
        // another on the same profile, as TensorRT requires.
        let threads: Vec<_> = insts
            .into_iter()
            .map(|mut inst| {
                std::thread::spawn(move || {
                    for _ in 0..15 {
                        let out = inst.execute(&request(3)).expect("no two contexts run one profile at once");
                        assert_eq!(values(&out.outputs[0]), vec![3.5; 12]);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(mock.runs.lock().len(), 15 * instances);
    }
}

#[test]
fn a_dla_secondary_device_sets_the_runtime_dla_core() {
    let (mock, backend) = mock_backend();
    let m = model(PLAN.as_bytes(), 16);
    let dla = InstanceSpec { dla_core: Some(1), ..gpu_spec(&[]) };
    let a = backend.create_instance(&m.ctx, &dla).unwrap();
    // An instance without one gets the GPU engine, deserialized on its own.
    let b = backend.create_instance(&m.ctx, &gpu_spec(&[])).unwrap();
    assert_eq!(*mock.dla_cores.lock(), vec![(0, 1)]);
    assert_eq!(*mock.devices.lock(), vec![0, 0]);
    drop((a, b));
}
