use super::*;
use crate::error::ErrorKind;
use crate::model_api::types::DataType;
use crate::model_api::ExecRequest;
use crate::model_config::pbtxt::parse_config;
use crate::proto::inference::ModelConfig;
use bytes::Bytes;
use parking_lot::Mutex;
use std::time::Duration;
use tokio::sync::oneshot;

/// pre: IN → x (doubles); left: x → l (+1); right: x → r (+2); join: (l, r) → OUT (sum); side: IN → SIDE.
const DIAMOND: &str = r#"
name: "d" platform: "ensemble" max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] }, { name: "SIDE" data_type: TYPE_FP32 dims: [ 2 ] } ]
ensemble_scheduling { step [
  { model_name: "pre" model_version: -1 input_map { key: "I" value: "IN" } output_map { key: "O" value: "x" } },
  { model_name: "left" model_version: -1 input_map { key: "I" value: "x" } output_map { key: "O" value: "l" } },
  { model_name: "right" model_version: 2 input_map { key: "I" value: "x" } output_map { key: "O" value: "r" } },
  { model_name: "join" model_version: -1 input_map [ { key: "A" value: "l" }, { key: "B" value: "r" } ]
    output_map { key: "O" value: "OUT" } },
  { model_name: "side" model_version: -1 input_map { key: "I" value: "IN" } output_map { key: "O" value: "SIDE" } }
] }
"#;

fn floats(t: &Tensor) -> Vec<f32> {
    t.data.as_host().unwrap().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn tensor(name: &str, shape: Vec<i64>, v: &[f32]) -> Tensor {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    Tensor::new(name, DataType::Fp32, shape, Bytes::from(bytes))
}

/// One input of one step request, as the fake runner saw it.
struct Read {
    /// The composing model.
    model: String,
    /// The version asked for.
    version: Option<i64>,
    /// The input's name.
    input: String,
    /// Where the input's bytes are.
    ptr: usize,
}

/// What the fake runner saw: each step request, with the address of each input's bytes.
#[derive(Default)]
struct Seen {
    /// Every input of every request, in arrival order.
    inputs: Vec<Read>,
    /// (model, output pointer) per produced output.
    outputs: Vec<(String, usize)>,
    /// Parameters of each request.
    parameters: Vec<Parameters>,
    /// Callers of each request.
    callers: Vec<crate::model_api::types::CallChain>,
}

/// Computes the diamond's models in memory. `left` and `right` wait for each other on a barrier, so the
/// request only finishes when they run concurrently; `fail` makes that model fail.
struct Fake {
    seen: Mutex<Seen>,
    barrier: tokio::sync::Barrier,
    fail: Option<(&'static str, ErrorKind)>,
}

impl Fake {
    fn new(fail: Option<(&'static str, ErrorKind)>) -> Arc<Fake> {
        Arc::new(Fake { seen: Mutex::new(Seen::default()), barrier: tokio::sync::Barrier::new(2), fail })
    }
}

struct Runner(Arc<Fake>);

impl StepRunner for Runner {
    fn run(&self, req: InferRequest) -> BoxFuture<'static, Result<ExecResult>> {
        let fake = self.0.clone();
        Box::pin(async move {
            {
                let mut seen = fake.seen.lock();
                for t in &req.inputs {
                    let ptr = t.data.as_host().unwrap().as_ptr() as usize;
                    let (model, version, input) = (req.model_name.clone(), req.model_version, t.name.clone());
                    seen.inputs.push(Read { model, version, input, ptr });
                }
                seen.parameters.push(req.parameters.clone());
                seen.callers.push(req.callers.clone());
            }
            if matches!(req.model_name.as_str(), "left" | "right") {
                fake.barrier.wait().await;
            }
            if let Some((model, kind)) = fake.fail {
                if model == req.model_name {
                    return Err(Error::new(kind, format!("model '{model}' refused the request")));
                }
            }
            let input = |name: &str| req.inputs.iter().find(|t| t.name == name).map(floats).unwrap();
            let shape = req.inputs[0].shape.clone();
            let out: Vec<f32> = match req.model_name.as_str() {
                "pre" => input("I").iter().map(|v| v * 2.0).collect(),
                "left" => input("I").iter().map(|v| v + 1.0).collect(),
                "right" => input("I").iter().map(|v| v + 2.0).collect(),
                "join" => input("A").iter().zip(input("B")).map(|(a, b)| a + b).collect(),
                "side" => input("I").iter().map(|v| -v).collect(),
                other => panic!("unexpected model {other}"),
            };
            assert_eq!(req.outputs.len(), 1);
            let t = tensor(&req.outputs[0].name, shape, &out);
            fake.seen.lock().outputs.push((req.model_name.clone(), t.data.as_host().unwrap().as_ptr() as usize));
            let timings =
                ExecTimings { compute_input_ns: 1, compute_infer_ns: 10, compute_output_ns: 100, started: None };
            Ok(ExecResult { outputs: vec![t], timings, parameters: Default::default() })
        })
    }
}

fn scheduler(fake: &Arc<Fake>) -> (EnsembleScheduler, Arc<ModelStats>) {
    let cfg: ModelConfig = parse_config(DIAMOND, "config.pbtxt").unwrap();
    let graph = graph::EnsembleGraph::from_config(&cfg).unwrap();
    let models = graph
        .steps()
        .iter()
        .map(|s| StepModel { batching: true, input_dims: s.inputs.iter().map(|(i, _)| (i.clone(), vec![2])).collect() })
        .collect();
    let stats = Arc::new(ModelStats::new(cfg.max_batch_size));
    (EnsembleScheduler::start(&cfg, 1, graph, models, Arc::new(Runner(fake.clone())), stats.clone()).unwrap(), stats)
}

async fn infer(s: &EnsembleScheduler, outputs: &[&str], control: RequestControl) -> Result<ExecResult> {
    let (tx, rx) = oneshot::channel();
    let job = Job {
        exec: ExecRequest {
            inputs: vec![tensor("IN", vec![2, 2], &[1.0, 2.0, 3.0, 4.0])],
            outputs: outputs.iter().map(|o| o.to_string()).collect(),
            ..Default::default()
        },
        batch_size: 2,
        enqueued: Instant::now(),
        control,
        reply: tx,
        span: tracing::Span::none(),
    };
    s.submit(job).unwrap();
    tokio::time::timeout(Duration::from_secs(10), rx).await.expect("the ensemble answered in time").unwrap()
}

#[tokio::test]
async fn a_request_flows_through_every_step() {
    let fake = Fake::new(None);
    let (s, stats) = scheduler(&fake);
    let r = infer(&s, &["OUT", "SIDE"], RequestControl::default()).await.unwrap();
    assert_eq!(r.outputs.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), vec!["OUT", "SIDE"]);
    // x = 2 * IN; OUT = (x + 1) + (x + 2).
    assert_eq!(floats(&r.outputs[0]), vec![7.0, 11.0, 15.0, 19.0]);
    assert_eq!(r.outputs[0].shape, vec![2, 2]);
    assert_eq!(floats(&r.outputs[1]), vec![-1.0, -2.0, -3.0, -4.0]);
    // The ensemble's compute times are the sums over its five steps, recorded as one execution.
    assert_eq!(r.timings.compute_infer_ns, 50);
    let snap = stats.snapshot();
    assert_eq!((snap.execution_count, snap.inference_count), (1, 2));
    assert_eq!(snap.compute_output.ns, 500);
    assert_eq!(snap.queue.count, 1);
    assert_eq!(snap.batches[0].batch_size, 2);
    assert_eq!(stats.pending.load(Ordering::Relaxed), 0);
    assert_eq!(s.running().load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn intermediate_tensors_are_passed_without_copies() {
    let fake = Fake::new(None);
    let (s, _) = scheduler(&fake);
    infer(&s, &["OUT"], RequestControl::default()).await.unwrap();
    let seen = fake.seen.lock();
    let pre_out = seen.outputs.iter().find(|(m, _)| m == "pre").unwrap().1;
    let reads: Vec<_> = seen.inputs.iter().filter(|i| i.model == "left" || i.model == "right").collect();
    assert_eq!(reads.len(), 2);
    assert!(reads.iter().all(|i| i.ptr == pre_out), "left and right read pre's buffer itself");
    // Each step sees its own input names; versions pass through (-1 is the latest).
    assert!(reads.iter().all(|i| i.input == "I"));
    assert_eq!(reads.iter().map(|i| i.version).collect::<std::collections::BTreeSet<_>>(), [None, Some(2)].into());
}

#[tokio::test]
async fn only_the_steps_for_requested_outputs_run() {
    let fake = Fake::new(None);
    let (s, stats) = scheduler(&fake);
    let r = infer(&s, &["SIDE"], RequestControl::default()).await.unwrap();
    assert_eq!(r.outputs.len(), 1);
    let models: Vec<String> = fake.seen.lock().inputs.iter().map(|i| i.model.clone()).collect();
    assert_eq!(models, vec!["side"]);
    assert_eq!(r.timings.compute_infer_ns, 10);
    assert_eq!(stats.snapshot().execution_count, 1);
}

#[tokio::test]
async fn a_failing_step_fails_the_request_with_its_kind() {
    let fake = Fake::new(Some(("right", ErrorKind::InvalidArgument)));
    let (s, stats) = scheduler(&fake);
    let e = infer(&s, &["OUT", "SIDE"], RequestControl::default()).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert_eq!(e.message, "in ensemble 'd', model 'right' refused the request");
    // join never ran; the failure is not an execution of the ensemble.
    assert!(!fake.seen.lock().inputs.iter().any(|i| i.model == "join"));
    assert_eq!(stats.snapshot().execution_count, 0);
    assert_eq!(s.running().load(Ordering::SeqCst), 0);

    let fake = Fake::new(Some(("pre", ErrorKind::Unavailable)));
    let (s, _) = scheduler(&fake);
    let e = infer(&s, &["OUT"], RequestControl::default()).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert!(e.message.starts_with("in ensemble 'd', "), "{}", e.message);
}

#[tokio::test]
async fn steps_inherit_priority_timeout_and_sequence_fields() {
    let fake = Fake::new(None);
    let (s, _) = scheduler(&fake);
    let control = RequestControl {
        priority: 2,
        timeout: Some(Duration::from_micros(1500)),
        sequence_id: Some(SequenceId::Str("abc".into())),
        sequence_start: true,
        sequence_end: false,
    };
    infer(&s, &["SIDE"], control.clone()).await.unwrap();
    let params = fake.seen.lock().parameters[0].clone();
    assert_eq!(crate::core::validate::control(&params).unwrap(), control);
}

#[tokio::test]
async fn steps_are_requested_on_behalf_of_the_ensemble_and_its_callers() {
    // A step that calls the ensemble back (BLS) must find it in its call chain, so the server refuses
    // the call instead of deadlocking.
    let fake = Fake::new(None);
    let (s, _) = scheduler(&fake);
    let (tx, rx) = oneshot::channel();
    let meta = crate::model_api::RequestMeta { callers: vec![("outer".to_string(), 3)].into(), ..Default::default() };
    let job = Job {
        exec: ExecRequest {
            inputs: vec![tensor("IN", vec![2, 2], &[1.0, 2.0, 3.0, 4.0])],
            outputs: vec!["SIDE".into()],
            meta: Arc::new(meta),
            ..Default::default()
        },
        batch_size: 2,
        enqueued: Instant::now(),
        control: RequestControl::default(),
        reply: tx,
        span: tracing::Span::none(),
    };
    s.submit(job).unwrap();
    tokio::time::timeout(Duration::from_secs(10), rx).await.unwrap().unwrap().unwrap();
    let callers = fake.seen.lock().callers.clone();
    assert!(!callers.is_empty());
    for c in callers {
        assert_eq!(&*c, &[("outer".to_string(), 3), ("d".to_string(), 1)]);
    }
}
