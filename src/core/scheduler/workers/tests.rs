//! Unit tests of `core/scheduler/workers.rs`.

use super::*;
use crate::model_api::ExecRequest;
use std::time::Duration;

struct Nothing;

impl ModelInstance for Nothing {
    fn execute(&mut self, _: &ExecRequest) -> Result<ExecResult> {
        Ok(ExecResult::default())
    }
}

#[test]
fn threads_count_as_running_until_their_instance_is_dropped() {
    let w = Workers::new("m");
    let (tx, rx) = crate::core::scheduler::queue::queue::<Work<u32>>();
    let seen = Arc::new(AtomicUsize::new(0));
    let s = seen.clone();
    let count = move |n: u32| {
        s.fetch_add(n as usize, Ordering::SeqCst);
    };
    w.instance("m_0", Box::new(Nothing), move |_, beat| serve(&rx, beat, count)).unwrap();
    let (ttx, trx) = crossbeam_channel::bounded::<()>(1);
    w.timer("batch-m".into(), move || {
        let _ = trx.recv();
    })
    .unwrap();
    assert_eq!(w.running().load(Ordering::SeqCst), 2);
    assert!(tx.send(Work::Batch(3)).is_ok());
    assert!(tx.send(Work::Stop).is_ok());
    ttx.send(()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while w.running().load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(w.running().load(Ordering::SeqCst), 0);
    assert_eq!(seen.load(Ordering::SeqCst), 3);
}

#[test]
fn a_finished_request_is_stamped_and_recorded_once() {
    let stats = ModelStats::new(8);
    let enqueued = Instant::now();
    let start = enqueued + Duration::from_millis(2);
    let mut ok: Result<ExecResult> = Ok(ExecResult::default());
    finish_request(&stats, enqueued, start, &mut ok);
    assert_eq!(ok.as_ref().unwrap().timings.started, Some(start));
    let mut failed: Result<ExecResult> = Err(Error::internal("x"));
    finish_request(&stats, enqueued, start, &mut failed);
    let (tx, rx) = crate::core::scheduler::Reply::channel();
    let job = Job {
        exec: ExecRequest::default(),
        batch_size: 4,
        enqueued,
        control: Default::default(),
        reply: tx,
        span: tracing::Span::none(),
    };
    answer_alone(&stats, job, start, Ok(ExecResult::default()));
    assert!(rx.blocking_recv().unwrap().is_ok());
    assert_eq!(stats.execution_count.load(Ordering::Relaxed), 1);
    assert_eq!(stats.inference_count.load(Ordering::Relaxed), 4);
}

#[test]
fn time_a_pipelined_request_waited_in_its_instance_counts_as_queue_time() {
    let stats = ModelStats::new(0);
    let enqueued = Instant::now();
    let start = enqueued + Duration::from_millis(2);
    let timings = crate::model_api::ExecTimings { compute_infer_ns: 5, waited_ns: 3_000_000, ..Default::default() };
    let mut ok: Result<ExecResult> = Ok(ExecResult { timings, ..Default::default() });
    finish_request(&stats, enqueued, start, &mut ok);
    assert_eq!(stats.queue.snapshot().ns, 5_000_000, "2 ms in the queue and 3 ms behind the requests sent before");
    assert_eq!(stats.compute_infer.snapshot().ns, 5);
}

#[test]
fn a_reply_counts_as_on_its_way_until_its_request_takes_it_or_is_gone() {
    use crate::core::scheduler::{replies_on_the_way, Reply};
    // A thousand at once, so that replies of tests running beside this one cannot hide the count.
    let (replies, answers): (Vec<_>, Vec<_>) = (0..1000).map(|_| Reply::channel()).unzip();
    for r in replies {
        r.send(Ok(ExecResult::default())).unwrap();
    }
    assert!(replies_on_the_way() >= 1000);
    let mut answers = answers.into_iter();
    for a in answers.by_ref().take(500) {
        assert!(a.blocking_recv().unwrap().is_ok(), "taken: the result comes through");
    }
    assert!(replies_on_the_way() < 1000);
    drop(answers);
    assert!(replies_on_the_way() < 500, "dropped with their channels");
    // To a request that is gone, the result comes back and is not counted.
    let (reply, answer) = Reply::channel();
    drop(answer);
    assert!(reply.send(Err(Error::internal("x"))).is_err());
}
