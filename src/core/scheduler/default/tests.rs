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

fn job() -> (Job, crate::core::scheduler::Answer) {
    let (tx, rx) = crate::core::scheduler::Reply::channel();
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

/// Waits (up to 10 s) until the instance has logged its first request.
fn wait_for_first(log: &parking_lot::Mutex<Vec<String>>) {
    wait_until(|| !log.lock().is_empty());
}

/// Polls `done` until it holds, for up to 10 s.
fn wait_until(done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn job_with_id(id: &str) -> (Job, crate::core::scheduler::Answer) {
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
    wait_for_first(&ran);
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

/// A pipelining instance: takes at most `limit` requests at a time ("not now" beyond), or none at all
/// with a limit of 0 ("never"); each `finish` (and `execute`) waits at the gate, counted in `at_gate` as
/// it starts to. Logs what it was asked to do.
struct Pipe {
    gate: crossbeam_channel::Receiver<()>,
    at_gate: Arc<AtomicUsize>,
    log: Arc<parking_lot::Mutex<Vec<String>>>,
    in_flight: Vec<String>,
    limit: usize,
}

impl ModelInstance for Pipe {
    fn execute(&mut self, req: &ExecRequest) -> Result<ExecResult> {
        self.log.lock().push(format!("execute {}", req.meta.id));
        self.at_gate.fetch_add(1, Ordering::SeqCst);
        let _ = self.gate.recv_timeout(Duration::from_secs(10));
        Ok(ExecResult::default())
    }

    fn begin(&mut self, req: &ExecRequest) -> Option<Result<u64>> {
        if self.in_flight.len() >= self.limit {
            return None;
        }
        self.log.lock().push(format!("begin {}", req.meta.id));
        self.in_flight.push(req.meta.id.clone());
        Some(Ok(self.in_flight.len() as u64))
    }

    fn finish(&mut self, _ticket: u64, req: &ExecRequest) -> Result<ExecResult> {
        self.at_gate.fetch_add(1, Ordering::SeqCst);
        let _ = self.gate.recv_timeout(Duration::from_secs(10));
        assert_eq!(self.in_flight.remove(0), req.meta.id, "finished in the order begun");
        self.log.lock().push(format!("finish {}", req.meta.id));
        Ok(ExecResult::default())
    }
}

/// Starts one `Pipe` instance, holds its first request at the gate (in `finish` or `execute`, so the
/// instance has looked for more and found none) until five more are queued, then lets all go; the log
/// of what the instance did.
fn pipelined(limit: usize) -> Vec<String> {
    let stats = Arc::new(ModelStats::new(0));
    let (open, gate) = crossbeam_channel::unbounded();
    let log = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let at_gate = Arc::new(AtomicUsize::new(0));
    let instance = Box::new(Pipe { gate, at_gate: at_gate.clone(), log: log.clone(), in_flight: Vec::new(), limit });
    let s = DefaultScheduler::start("m", vec![("m_0".into(), instance)], 8, None, stats.clone()).unwrap();
    let (first, first_rx) = job_with_id("1");
    s.submit(first).unwrap();
    // Not just until "begin 1": between its begin and its finish the instance looks for more, and a
    // request queued by then would be sent ahead of the first one's finish (seen under qemu).
    wait_until(|| at_gate.load(Ordering::SeqCst) > 0);
    let rest: Vec<_> = (2..=6)
        .map(|i| {
            let (j, rx) = job_with_id(&i.to_string());
            s.submit(j).unwrap();
            rx
        })
        .collect();
    for _ in 0..6 {
        open.send(()).unwrap();
    }
    assert!(first_rx.blocking_recv().unwrap().is_ok());
    for rx in rest {
        assert!(rx.blocking_recv().unwrap().is_ok(), "every request is answered");
    }
    let out = log.lock().clone();
    out
}

#[test]
fn an_instance_that_says_not_now_gets_the_request_again_after_the_oldest_finishes() {
    // Three at a time: the fourth waits for the first of the three to finish, and is then sent ahead
    // (not run on its own).
    let log = pipelined(3);
    let want = ["begin 1", "finish 1", "begin 2", "begin 3", "begin 4", "finish 2", "begin 5", "finish 3", "begin 6"];
    let want: Vec<String> = want.iter().chain(&["finish 4", "finish 5", "finish 6"]).map(|s| s.to_string()).collect();
    assert_eq!(log, want);
}

#[test]
fn an_instance_that_never_pipelines_runs_each_request_on_its_own() {
    let log = pipelined(0);
    let want: Vec<String> = (1..=6).map(|i| format!("execute {i}")).collect();
    assert_eq!(log, want);
}

#[test]
fn an_instance_sends_up_to_the_pipeline_depth_ahead() {
    // With no limit of its own, the instance has at most PIPELINE_DEPTH requests in flight: all five
    // queued ones go at once.
    let log = pipelined(usize::MAX);
    let want = ["begin 1", "finish 1", "begin 2", "begin 3", "begin 4", "begin 5", "begin 6"];
    let want: Vec<String> = want
        .iter()
        .chain(&["finish 2", "finish 3", "finish 4", "finish 5", "finish 6"])
        .map(|s| s.to_string())
        .collect();
    assert_eq!(log, want);
    const { assert!(PIPELINE_DEPTH >= 5) };
}
