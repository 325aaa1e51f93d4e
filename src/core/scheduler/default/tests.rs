//! Unit tests of `core/scheduler/default.rs`.

use super::*;
use crate::error::ErrorKind;
use crate::model_api::{ExecRequest, ExecResult};
use std::time::Duration;

/// An instance that holds each request until the test lets it go.
struct Gate(crossbeam_channel::Receiver<()>);

impl ModelInstance for Gate {
    fn execute(&mut self, _: &ExecRequest) -> Result<ExecResult> {
        let _ = self.0.recv_timeout(Duration::from_secs(10));
        Ok(ExecResult::default())
    }
}

fn job() -> (Job, tokio::sync::oneshot::Receiver<Result<ExecResult>>) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job = Job {
        exec: ExecRequest::default(),
        batch_size: 1,
        enqueued: Instant::now(),
        control: Default::default(),
        reply: tx,
        span: tracing::Span::none(),
    };
    (job, rx)
}

#[test]
fn the_queue_holds_its_capacity_and_refuses_the_next_at_once() {
    let stats = Arc::new(ModelStats::new(0));
    let (open, gate) = crossbeam_channel::unbounded();
    let s = DefaultScheduler::start("m", vec![("m_0".into(), Box::new(Gate(gate)))], 2, None, stats.clone()).unwrap();
    // The first request goes into the instance (which holds it); wait until the queue is empty again.
    let (first, first_rx) = job();
    s.submit(first).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while stats.pending.load(Ordering::Relaxed) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    // Two more fill the queue of 2; the fourth is refused with the queue's bound, and not counted.
    let queued: Vec<_> = (0..2).map(|_| job()).map(|(j, rx)| (s.submit(j), rx)).collect();
    assert!(queued.iter().all(|(r, _)| r.is_ok()));
    let (fourth, _) = job();
    let e = s.submit(fourth).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert_eq!(e.message, "exceeds maximum queue size: model 'm' already has 2 requests queued");
    assert_eq!(stats.pending.load(Ordering::Relaxed), 2);
    // Let all three go: every accepted request is answered, and the queue takes requests again.
    for _ in 0..3 {
        open.send(()).unwrap();
    }
    assert!(first_rx.blocking_recv().unwrap().is_ok());
    for (_, rx) in queued {
        assert!(rx.blocking_recv().unwrap().is_ok());
    }
    assert_eq!(stats.pending.load(Ordering::Relaxed), 0);
    let (again, again_rx) = job();
    s.submit(again).unwrap();
    open.send(()).unwrap();
    assert!(again_rx.blocking_recv().unwrap().is_ok());
}
