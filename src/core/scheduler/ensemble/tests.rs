use super::*;
use crate::error::ErrorKind;
use crate::model_api::types::DataType;
use crate::model_api::{ExecRequest, ResponseSender};
use crate::model_config::pbtxt::parse_config;
use crate::proto::inference::ModelConfig;
use bytes::Bytes;
use parking_lot::Mutex;
use std::time::Duration;

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
    /// The id of each request.
    ids: Vec<String>,
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
                seen.ids.push(req.id.clone());
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
                ExecTimings { compute_input_ns: 1, compute_infer_ns: 10, compute_output_ns: 100, ..Default::default() };
            Ok(ExecResult { outputs: vec![t], timings, parameters: Default::default() })
        })
    }

    fn run_stream(&self, req: InferRequest) -> BoxFuture<'static, Result<BoxStream<'static, Result<StreamResponse>>>> {
        let model = req.model_name;
        Box::pin(async move { Err(Error::internal(format!("model '{model}' is not decoupled"))) })
    }
}

fn scheduler(fake: &Arc<Fake>) -> (EnsembleScheduler, Arc<ModelStats>) {
    let cfg: ModelConfig = parse_config(DIAMOND, "config.pbtxt").unwrap();
    let graph = graph::EnsembleGraph::from_config(&cfg).unwrap();
    let models = graph
        .steps()
        .iter()
        .map(|s| StepModel {
            batching: true,
            input_dims: s.inputs.iter().map(|(i, _)| (i.clone(), vec![2])).collect(),
            decoupled: false,
        })
        .collect();
    let stats = Arc::new(ModelStats::new(cfg.max_batch_size));
    (EnsembleScheduler::start(&cfg, 1, graph, models, Arc::new(Runner(fake.clone())), stats.clone()).unwrap(), stats)
}

async fn infer(s: &EnsembleScheduler, outputs: &[&str], control: RequestControl) -> Result<ExecResult> {
    let (tx, rx) = crate::core::scheduler::Reply::channel();
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
    let (tx, rx) = crate::core::scheduler::Reply::channel();
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

// ---- decoupled steps -------------------------------------------------------------------------------

/// tok: IN → ids (as is); gen (decoupled): ids → one response per value, `ID` = [value]; det: ID → OUT
/// (times ten).
const STREAMED: &str = r#"
name: "s" platform: "ensemble" max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
ensemble_scheduling { step [
  { model_name: "tok" model_version: -1 input_map { key: "I" value: "IN" } output_map { key: "O" value: "ids" } },
  { model_name: "gen" model_version: -1 input_map { key: "I" value: "ids" } output_map { key: "ID" value: "id" } },
  { model_name: "det" model_version: -1 input_map { key: "ID" value: "id" } output_map { key: "O" value: "OUT" } }
] }
"#;

/// How the fake decoupled `gen` ends its request.
#[derive(Clone, Copy, PartialEq)]
enum GenEnd {
    /// The final flag on the last response.
    WithLast,
    /// The final flag alone, after the last response.
    Alone,
    /// An error response instead of the second value.
    ErrorAtSecond,
}

struct StreamingRunner(GenEnd);

fn stream_response(model: &str, outputs: Vec<Tensor>, is_final: bool, error: Option<Error>) -> Result<StreamResponse> {
    let response = crate::model_api::types::InferResponse {
        model_name: model.to_string(),
        model_version: 1,
        id: String::new(),
        outputs,
        parameters: Parameters::new(),
    };
    Ok(StreamResponse { response, is_final, empty: false, error })
}

impl StepRunner for StreamingRunner {
    fn run(&self, req: InferRequest) -> BoxFuture<'static, Result<ExecResult>> {
        Box::pin(async move {
            let v = floats(&req.inputs[0]);
            let out = match req.model_name.as_str() {
                "tok" => tensor("O", req.inputs[0].shape.clone(), &v),
                "det" => tensor("O", vec![1], &[v[0] * 10.0]),
                other => panic!("unexpected model {other}"),
            };
            Ok(ExecResult { outputs: vec![out], ..Default::default() })
        })
    }

    fn run_stream(&self, req: InferRequest) -> BoxFuture<'static, Result<BoxStream<'static, Result<StreamResponse>>>> {
        let end = self.0;
        Box::pin(async move {
            assert_eq!(req.model_name, "gen");
            let values = floats(&req.inputs[0]);
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            tokio::spawn(async move {
                for (k, v) in values.iter().enumerate() {
                    // Apart, so that `det` has answered each value before the next one comes.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let last = k + 1 == values.len() && end == GenEnd::WithLast;
                    let item = if k == 1 && end == GenEnd::ErrorAtSecond {
                        stream_response("gen", vec![], false, Some(Error::invalid("gen: no second value")))
                    } else {
                        stream_response("gen", vec![tensor("ID", vec![1], &[*v])], last, None)
                    };
                    let _ = tx.send(item);
                }
                if end != GenEnd::WithLast || values.is_empty() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    let mut empty = stream_response("gen", vec![], true, None);
                    if let Ok(r) = empty.as_mut() {
                        r.empty = true;
                    }
                    let _ = tx.send(empty);
                }
            });
            Ok(tokio_stream_of(rx))
        })
    }
}

fn tokio_stream_of(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Result<StreamResponse>>,
) -> BoxStream<'static, Result<StreamResponse>> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed()
}

fn streaming_scheduler(end: GenEnd) -> (EnsembleScheduler, Arc<ModelStats>) {
    let cfg: ModelConfig = parse_config(STREAMED, "config.pbtxt").unwrap();
    let graph = graph::EnsembleGraph::from_config(&cfg).unwrap();
    let models =
        graph.steps().iter().map(|s| StepModel { decoupled: s.model == "gen", ..Default::default() }).collect();
    let stats = Arc::new(ModelStats::new(0));
    (EnsembleScheduler::start(&cfg, 1, graph, models, Arc::new(StreamingRunner(end)), stats.clone()).unwrap(), stats)
}

/// What a decoupled ensemble sends for IN = `values`: (OUT values, final) per response, or the error.
async fn streamed(end: GenEnd, values: &[f32]) -> Vec<std::result::Result<(Vec<f32>, bool), String>> {
    let (s, _) = streaming_scheduler(end);
    let (responder, mut responses) = ResponseSender::channel();
    let (tx, rx) = crate::core::scheduler::Reply::channel();
    let job = Job {
        exec: ExecRequest {
            inputs: vec![tensor("IN", vec![values.len() as i64], values)],
            outputs: vec!["OUT".into()],
            responder: Some(responder),
            ..Default::default()
        },
        batch_size: 1,
        enqueued: Instant::now(),
        control: RequestControl::default(),
        reply: tx,
        span: tracing::Span::none(),
    };
    s.submit(job).unwrap();
    tokio::time::timeout(Duration::from_secs(10), rx).await.expect("the ensemble finished in time").unwrap().ok();
    let mut got = Vec::new();
    while let Ok(item) = responses.try_recv() {
        got.push(item.map(|r| (r.outputs.first().map(floats).unwrap_or_default(), r.is_final)).map_err(|e| e.message));
    }
    assert_eq!(s.running().load(Ordering::SeqCst), 0);
    got
}

#[tokio::test]
async fn each_response_of_a_decoupled_step_flows_through_the_rest() {
    assert_eq!(
        streamed(GenEnd::WithLast, &[1.0, 2.0, 3.0]).await,
        vec![Ok((vec![10.0], false)), Ok((vec![20.0], false)), Ok((vec![30.0], true))],
        "the last response is final: nothing runs any more when it goes out"
    );
}

#[tokio::test]
async fn a_final_flag_alone_ends_the_stream_with_an_empty_response() {
    assert_eq!(
        streamed(GenEnd::Alone, &[1.0, 2.0]).await,
        vec![Ok((vec![10.0], false)), Ok((vec![20.0], false)), Ok((vec![], true))]
    );
    assert_eq!(streamed(GenEnd::WithLast, &[]).await, vec![Ok((vec![], true))], "no response at all");
}

#[tokio::test]
async fn an_error_response_of_a_decoupled_step_ends_the_ensemble_request() {
    assert_eq!(
        streamed(GenEnd::ErrorAtSecond, &[1.0, 2.0, 3.0]).await,
        vec![Ok((vec![10.0], false)), Err("in ensemble 's', gen: no second value".to_string())],
        "nothing follows the error"
    );
}

#[tokio::test]
async fn a_decoupled_ensemble_counts_one_request_per_stream() {
    let (s, stats) = streaming_scheduler(GenEnd::WithLast);
    let (responder, _responses) = ResponseSender::channel();
    let (tx, rx) = crate::core::scheduler::Reply::channel();
    let job = Job {
        exec: ExecRequest {
            inputs: vec![tensor("IN", vec![2], &[1.0, 2.0])],
            outputs: vec!["OUT".into()],
            responder: Some(responder),
            ..Default::default()
        },
        batch_size: 1,
        enqueued: Instant::now(),
        control: RequestControl::default(),
        reply: tx,
        span: tracing::Span::none(),
    };
    s.submit(job).unwrap();
    let done = tokio::time::timeout(Duration::from_secs(10), rx).await.unwrap().unwrap().unwrap();
    assert!(done.outputs.is_empty(), "the responses went to the stream");
    assert_eq!(stats.snapshot().execution_count, 1);
}

#[tokio::test]
async fn steps_get_the_ensemble_request_id_and_parameters() {
    let fake = Fake::new(None);
    let (s, _) = scheduler(&fake);
    let (tx, rx) = crate::core::scheduler::Reply::channel();
    let mut parameters = Parameters::new();
    parameters.insert("temperature".into(), ParamValue::String("0.5".into()));
    let meta = crate::model_api::RequestMeta { id: "req-9".into(), parameters, ..Default::default() };
    let job = Job {
        exec: ExecRequest {
            inputs: vec![tensor("IN", vec![2, 2], &[1.0, 2.0, 3.0, 4.0])],
            outputs: vec!["SIDE".into()],
            meta: Arc::new(meta),
            ..Default::default()
        },
        batch_size: 2,
        enqueued: Instant::now(),
        control: RequestControl { priority: 1, ..Default::default() },
        reply: tx,
        span: tracing::Span::none(),
    };
    s.submit(job).unwrap();
    tokio::time::timeout(Duration::from_secs(10), rx).await.unwrap().unwrap().unwrap();
    let seen = fake.seen.lock();
    assert_eq!(seen.ids, vec!["req-9".to_string()]);
    let p = &seen.parameters[0];
    assert_eq!(p.get("temperature"), Some(&ParamValue::String("0.5".into())));
    assert_eq!(p.get("priority"), Some(&ParamValue::Uint(1)));
}
