//! What one thread hand-off costs on this machine: the time from sending a message to the moment a
//! thread parked waiting for it has it. A request makes two: from an io thread to its instance thread
//! (the schedulers' queue, `core::scheduler::queue`; a crossbeam channel, what they used before, beside it)
//! and back to the io runtime (a tokio oneshot awaited by a task). Each is measured with both threads pinned to one core and to two cores, after a
//! 1 ms pause, so the receiver has parked (and, in a virtual machine, its idle vCPU has halted) as at
//! concurrency 1. The two-core rows are the floor under a served request's own time that no change to
//! the request path removes (see benches/large_tensor.py's `own` column). Run: `cargo bench --bench handoff`.

use criterion::{criterion_group, criterion_main, Criterion};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tritonrs::platform::affinity::pin_current_thread;

/// Between messages: long enough for the receiver to park.
const PAUSE: Duration = Duration::from_millis(1);

fn pin(core: usize) {
    if let Err(e) = pin_current_thread(&[core]) {
        panic!("{e}");
    }
}

/// A message to a thread blocked in `recv` on `core` (this thread on core 0), through a queue whose
/// receiving side gives `None` once the sending side is dropped.
fn to_parked_thread<T: Send + 'static, R: Send + 'static>(
    iters: u64,
    core: usize,
    (tx, rx): (T, R),
    send: impl Fn(&T, Instant),
    recv: fn(&R) -> Option<Instant>,
) -> Duration {
    let (back, arrived) = mpsc::channel::<Duration>();
    let receiver = std::thread::spawn(move || {
        pin(core);
        while let Some(sent) = recv(&rx) {
            let _ = back.send(sent.elapsed());
        }
    });
    pin(0);
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        std::thread::sleep(PAUSE);
        send(&tx, Instant::now());
        total += arrived.recv().expect("the receiver answers");
    }
    drop(tx);
    let _ = receiver.join();
    total
}

/// The schedulers' queue.
fn queue(iters: u64, core: usize) -> Duration {
    let pair = tritonrs::core::scheduler::queue::queue::<Instant>();
    to_parked_thread(
        iters,
        core,
        pair,
        |tx, t| {
            let _ = tx.send(t);
        },
        |rx| rx.recv(),
    )
}

/// A crossbeam channel, what the schedulers used before.
fn channel(iters: u64, core: usize) -> Duration {
    let pair = crossbeam_channel::unbounded::<Instant>();
    to_parked_thread(
        iters,
        core,
        pair,
        |tx, t| {
            let _ = tx.send(t);
        },
        |rx| rx.recv().ok(),
    )
}

/// A tokio oneshot awaited by a task on a one-worker runtime pinned to `core`; this thread on core 0.
fn oneshot(iters: u64, core: usize) -> Duration {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .on_thread_start(move || pin(core))
        .enable_all()
        .build()
        .expect("a runtime");
    pin(0);
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let (tx, rx) = tokio::sync::oneshot::channel::<Instant>();
        let (back, arrived) = mpsc::channel::<Duration>();
        runtime.spawn(async move {
            if let Ok(sent) = rx.await {
                let _ = back.send(sent.elapsed());
            }
        });
        std::thread::sleep(PAUSE);
        let _ = tx.send(Instant::now());
        total += arrived.recv().expect("the task answers");
    }
    total
}

fn bench(c: &mut Criterion) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut g = c.benchmark_group("handoff");
    g.sample_size(20).measurement_time(Duration::from_secs(4));
    for (name, core) in [("same core", 0), ("other core", 1)] {
        if core >= cores {
            continue;
        }
        g.bench_function(format!("queue to a parked thread, {name}"), |b| b.iter_custom(|n| queue(n, core)));
        g.bench_function(format!("crossbeam to a parked thread, {name}"), |b| b.iter_custom(|n| channel(n, core)));
        g.bench_function(format!("oneshot to a parked tokio task, {name}"), |b| b.iter_custom(|n| oneshot(n, core)));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
