//! Unit tests of cancellation through the core API (`core/server/inference.rs` and `stream.rs`): a
//! caller that drops the future or the stream it waits on cancels its request, whatever transport it
//! is, so a front-end only has to drop what it holds when its client goes away.

use crate::core::server::{Server, ServerOptions};
use crate::core::stats::FailureReason;
use crate::error::Result;
use crate::model_api::types::{DataType, InferRequest, Tensor};
use crate::model_api::{
    Backend, BackendFactory, BackendRegistry, DecoupledResponse, ExecRequest, ExecResult, InstanceSpec, ModelContext,
    ModelInstance,
};
use futures_util::StreamExt;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the instances saw, as "cancelled ID" or "finished ID".
type Seen = Arc<Mutex<Vec<String>>>;

/// A backend whose instances run until their request is cancelled (at most 5 s); a decoupled one sends
/// one response first.
struct Waiter(Seen);

impl Backend for Waiter {
    fn name(&self) -> &'static str {
        "waiter"
    }
    fn create_instance(&self, _: &ModelContext, _: &InstanceSpec) -> Result<Box<dyn ModelInstance>> {
        Ok(Box::new(WaitInstance(self.0.clone())))
    }
}

struct WaitInstance(Seen);

impl ModelInstance for WaitInstance {
    fn execute(&mut self, req: &ExecRequest) -> Result<ExecResult> {
        if let Some(r) = &req.responder {
            r.send(Ok(DecoupledResponse { outputs: vec![out()], ..Default::default() }));
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while !req.meta.signals.is_cancelled() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let what = if req.meta.signals.is_cancelled() { "cancelled" } else { "finished" };
        self.0.lock().push(format!("{what} {}", req.meta.id));
        if let Some(r) = &req.responder {
            r.send(Ok(DecoupledResponse { is_final: true, empty: true, ..Default::default() }));
        }
        Ok(ExecResult { outputs: vec![out()], ..Default::default() })
    }
}

fn out() -> Tensor {
    Tensor::new("OUT", DataType::Fp32, vec![1], bytes::Bytes::from(vec![0u8; 4]))
}

const CONFIG: &str = r#"backend: "waiter"
max_batch_size: 0
input [{ name: "IN" data_type: TYPE_FP32 dims: [1] }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [1] }]
instance_group [{ count: 1 kind: KIND_CPU }]
"#;

/// A server with `wait` and the decoupled `wait_stream`, both loaded.
async fn server(seen: &Seen) -> (Server, tempfile::TempDir) {
    let repo = tempfile::tempdir().unwrap();
    for (name, extra) in [("wait", ""), ("wait_stream", "model_transaction_policy { decoupled: true }\n")] {
        std::fs::create_dir_all(repo.path().join(name).join("1")).unwrap();
        std::fs::write(repo.path().join(name).join("config.pbtxt"), format!("{CONFIG}{extra}")).unwrap();
    }
    let seen = seen.clone();
    let backends = BackendFactory(Arc::new(move |_, _| {
        let mut r = BackendRegistry::default();
        r.insert(Arc::new(Waiter(seen.clone())));
        r
    }));
    let mut options = ServerOptions::explicit(vec![repo.path().to_path_buf()]);
    options.backends = backends;
    let server = Server::new(options);
    server.startup().await.unwrap();
    for name in ["wait", "wait_stream"] {
        server.load_model(name, Default::default()).await.unwrap();
    }
    (server, repo)
}

fn request(model: &str, id: &str) -> InferRequest {
    let input = Tensor::new("IN", DataType::Fp32, vec![1], bytes::Bytes::from(vec![0u8; 4]));
    InferRequest { model_name: model.into(), id: id.into(), inputs: vec![input], ..Default::default() }
}

async fn until_seen(seen: &Seen, line: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !seen.lock().iter().any(|l| l == line) {
        assert!(Instant::now() < deadline, "the instance never saw '{line}': {:?}", seen.lock());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn canceled(server: &Server, model: &str) -> u64 {
    let stats = server.statistics(Some(model), "").unwrap();
    stats[0].failures.iter().find(|(r, _)| *r == FailureReason::Canceled).map_or(0, |(_, n)| *n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_future_or_the_stream_cancels_the_request() {
    let seen = Seen::default();
    let (server, _repo) = server(&seen).await;
    // A request whose caller stops waiting (a client that hung up), running and then one still queued.
    let running = tokio::spawn({
        let server = server.clone();
        async move { server.infer(request("wait", "running")).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let queued = tokio::time::timeout(Duration::from_millis(100), server.infer(request("wait", "queued"))).await;
    assert!(queued.is_err(), "the queued request waits behind the running one");
    assert_eq!(server.statistics(Some("wait"), "").unwrap()[0].pending, 0, "it left the queue at once");
    running.abort();
    until_seen(&seen, "cancelled running").await;
    assert_eq!(canceled(&server, "wait"), 2);
    // A streamed request whose caller drops the stream after the first response.
    let mut stream = server.infer_stream(request("wait_stream", "streamed")).await.unwrap();
    assert!(stream.next().await.unwrap().is_ok());
    drop(stream);
    until_seen(&seen, "cancelled streamed").await;
    assert_eq!(canceled(&server, "wait_stream"), 1);
    assert!(!seen.lock().iter().any(|l| l.ends_with(" queued")), "the queued request never ran: {:?}", seen.lock());
}
