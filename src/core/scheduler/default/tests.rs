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

/// Counts the requests it ran, by id, then waits at the gate like [`Gate`].
struct Recording(crossbeam_channel::Receiver<()>, Arc<parking_lot::Mutex<Vec<String>>>);

impl ModelInstance for Recording {
    fn execute(&mut self, req: &ExecRequest) -> Result<ExecResult> {
        self.1.lock().push(req.meta.id.clone());
        let _ = self.0.recv_timeout(Duration::from_secs(10));
        Ok(ExecResult::default())
    }
}

fn job_with_id(id: &str) -> (Job, tokio::sync::oneshot::Receiver<Result<ExecResult>>) {
    let (mut job, rx) = job();
    job.exec.meta = Arc::new(crate::model_api::RequestMeta { id: id.into(), ..Default::default() });
    (job, rx)
}

#[test]
fn a_cancelled_request_leaves_the_queue_unrun_and_frees_its_place() {
    let stats = Arc::new(ModelStats::new(0));
    let (open, gate) = crossbeam_channel::unbounded();
    let ran = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let instance = Box::new(Recording(gate, ran.clone()));
    let s = DefaultScheduler::start("m", vec![("m_0".into(), instance)], 1, None, stats.clone()).unwrap();
    let (first, first_rx) = job_with_id("first");
    s.submit(first).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while ran.lock().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    // The second request waits in the full queue until its client goes away.
    let (second, second_rx) = job_with_id("second");
    let signals = second.exec.meta.signals.clone();
    s.submit(second).unwrap();
    assert!(s.submit(job_with_id("refused").0).is_err(), "the queue of 1 is full");
    signals.cancel();
    let e = second_rx.blocking_recv().unwrap().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Cancelled);
    assert_eq!(e.message, "the request to model 'm' was cancelled before it ran");
    assert_eq!(stats.pending.load(Ordering::Relaxed), 0);
    // A request cancelled before it is queued is refused; the cancelled one's place is free at once.
    let (gone, _) = job_with_id("gone");
    gone.exec.meta.signals.cancel();
    assert_eq!(s.submit(gone).unwrap_err().kind, ErrorKind::Cancelled);
    assert_eq!(stats.pending.load(Ordering::Relaxed), 0);
    let (third, third_rx) = job_with_id("third");
    s.submit(third).unwrap();
    open.send(()).unwrap();
    open.send(()).unwrap();
    assert!(first_rx.blocking_recv().unwrap().is_ok());
    assert!(third_rx.blocking_recv().unwrap().is_ok());
    assert_eq!(*ran.lock(), vec!["first".to_string(), "third".to_string()], "the cancelled request never ran");
}
