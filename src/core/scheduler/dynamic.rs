//! The dynamic batcher (`dynamic_batching`): queued requests are merged into batches for whichever
//! instance is free, with preferred sizes, a queue delay, priority levels and queue policies.
//!
//! The policy is [`BatchQueue`], a pure state struct with synchronous methods and explicit time, so it
//! is unit-tested without threads or timers. [`DynamicBatcher`] is the batchers' one thin driver
//! (`driver.rs`) around it: submitters and finishing instances call `dispatch` under one short lock,
//! handing formed batches straight to idle instance threads; one timer thread wakes only when a queue
//! delay or a request timeout falls due.

use super::driver::{Batcher, Batching};
use super::timer::{Clocked, Timed};
use super::workers::{finish_request, record_execution, serve, unloaded, Work, Workers};
use super::{batch, execute, execute_list, Job, DEFAULT_MAX_QUEUE_SIZE};
use crate::core::stats::ModelStats;
use crate::error::{Error, Result};
use crate::model_api::{ExecRequest, ExecResult, ModelInstance};
use crate::proto::inference::model_queue_policy::TimeoutAction;
use crate::proto::inference::{ModelConfig, ModelDynamicBatching, ModelQueuePolicy};
use parking_lot::{Mutex, MutexGuard};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The queue policy of one priority level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelPolicy {
    /// What happens to a request whose timeout expires while it waits: rejected, or moved behind the
    /// requests that have not timed out.
    pub reject_on_timeout: bool,
    /// Timeout for requests that set none (or may not set one).
    pub default_timeout: Option<Duration>,
    /// Whether a request's own `timeout` parameter is honoured.
    pub allow_timeout_override: bool,
    /// Most requests this level may hold.
    pub max_queue_size: usize,
}

impl LevelPolicy {
    fn from_proto(p: Option<&ModelQueuePolicy>) -> LevelPolicy {
        let Some(p) = p else {
            return LevelPolicy {
                reject_on_timeout: true,
                default_timeout: None,
                allow_timeout_override: false,
                max_queue_size: DEFAULT_MAX_QUEUE_SIZE,
            };
        };
        LevelPolicy {
            reject_on_timeout: p.timeout_action != TimeoutAction::Delay as i32,
            default_timeout: (p.default_timeout_microseconds > 0)
                .then(|| Duration::from_micros(p.default_timeout_microseconds)),
            allow_timeout_override: p.allow_timeout_override,
            // Triton's 0 means unbounded; a bound keeps memory finite (back-pressure is explicit here).
            max_queue_size: if p.max_queue_size > 0 { p.max_queue_size as usize } else { DEFAULT_MAX_QUEUE_SIZE },
        }
    }
}

/// Everything `dynamic_batching` (with the model's `max_batch_size`) configures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchPolicy {
    pub max_batch_size: u32,
    /// Sorted ascending, duplicates removed.
    pub preferred: Vec<u32>,
    pub max_queue_delay: Duration,
    /// Index `i` is priority level `i + 1` (1 is the highest); at least one level.
    pub levels: Vec<LevelPolicy>,
    /// The level (1-based) of requests that give no priority or an out-of-range one.
    pub default_level: u32,
}

impl BatchPolicy {
    pub fn from_config(max_batch_size: i32, d: &ModelDynamicBatching) -> BatchPolicy {
        let mut preferred: Vec<u32> = d.preferred_batch_size.iter().filter(|&&s| s > 0).map(|&s| s as u32).collect();
        preferred.sort_unstable();
        preferred.dedup();
        let n = d.priority_levels.clamp(1, 1 << 16);
        let levels = (1..=n)
            .map(|l| LevelPolicy::from_proto(d.priority_queue_policy.get(&l).or(d.default_queue_policy.as_ref())))
            .collect();
        let default_level = if (1..=n).contains(&d.default_priority_level) { d.default_priority_level } else { n };
        BatchPolicy {
            max_batch_size: max_batch_size.max(1) as u32,
            preferred,
            max_queue_delay: Duration::from_micros(d.max_queue_delay_microseconds),
            levels,
            default_level: default_level as u32,
        }
    }

    /// The level a request's `priority` parameter selects (0 or out of range: the default level).
    pub fn level(&self, priority: u32) -> u32 {
        if priority >= 1 && priority as usize <= self.levels.len() {
            priority
        } else {
            self.default_level
        }
    }
}

/// A queued request with what the policy needs to know about it.
#[derive(Debug)]
struct Entry<J> {
    job: J,
    batch_size: u32,
    enqueued: Instant,
    /// When the request times out, if it can.
    deadline: Option<Instant>,
}

/// What a free instance should do next.
#[derive(Debug)]
pub enum Next<J> {
    /// Execute these requests as one batch, in this order.
    Batch(Vec<J>),
    /// Nothing to run yet; ask again at this time (a queue delay ends) or when a request arrives.
    WaitUntil(Instant),
    /// The queue is empty.
    Idle,
}

/// The dynamic batcher's queues and policy. `J` is the queued payload; `compatible(a, b)` says whether
/// two payloads may share a batch.
pub struct BatchQueue<J> {
    policy: BatchPolicy,
    /// Per level: requests that have not timed out, oldest first.
    ready: Vec<VecDeque<Entry<J>>>,
    /// Per level: requests whose timeout expired under the DELAY action; served after every `ready` one.
    delayed: Vec<VecDeque<Entry<J>>>,
}

impl<J> BatchQueue<J> {
    pub fn new(policy: BatchPolicy) -> Self {
        let n = policy.levels.len();
        BatchQueue {
            policy,
            ready: (0..n).map(|_| VecDeque::new()).collect(),
            delayed: (0..n).map(|_| VecDeque::new()).collect(),
        }
    }

    pub fn policy(&self) -> &BatchPolicy {
        &self.policy
    }

    /// Requests waiting, over every level.
    pub fn len(&self) -> usize {
        self.ready.iter().chain(self.delayed.iter()).map(VecDeque::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queues a request, or gives it back when its level is full.
    pub fn push(
        &mut self,
        job: J,
        batch_size: u32,
        priority: u32,
        timeout: Option<Duration>,
        now: Instant,
    ) -> std::result::Result<(), (J, String)> {
        let level = self.policy.level(priority) as usize - 1;
        let lp = &self.policy.levels[level];
        let queued = self.ready[level].len() + self.delayed[level].len();
        if queued >= lp.max_queue_size {
            let msg = format!("exceeds maximum queue size: {queued} requests already queued at priority {}", level + 1);
            return Err((job, msg));
        }
        let timeout = if lp.allow_timeout_override { timeout.or(lp.default_timeout) } else { lp.default_timeout };
        let deadline = timeout.map(|t| now + t);
        self.ready[level].push_back(Entry { job, batch_size, enqueued: now, deadline });
        Ok(())
    }

    /// Applies the timeout action to every request whose deadline has passed; returns the rejected ones.
    pub fn take_expired(&mut self, now: Instant) -> Vec<J> {
        let mut rejected = Vec::new();
        for level in 0..self.ready.len() {
            let q = &mut self.ready[level];
            if !q.iter().any(|e| e.deadline.is_some_and(|d| d <= now)) {
                continue;
            }
            let reject = self.policy.levels[level].reject_on_timeout;
            let mut keep = VecDeque::with_capacity(q.len());
            for mut e in q.drain(..) {
                match e.deadline {
                    Some(d) if d <= now && reject => rejected.push(e.job),
                    Some(d) if d <= now => {
                        e.deadline = None;
                        self.delayed[level].push_back(e);
                    }
                    _ => keep.push_back(e),
                }
            }
            *q = keep;
        }
        rejected
    }

    /// The earliest time at which something changes without a new request: a timeout expires.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.ready.iter().flatten().filter_map(|e| e.deadline).min()
    }

    /// Requests in the order batches take them: by level, not-timed-out before delayed, oldest first.
    fn ordered(&self) -> impl Iterator<Item = (usize, bool, &Entry<J>)> {
        (0..self.ready.len()).flat_map(move |l| {
            self.ready[l].iter().map(move |e| (l, false, e)).chain(self.delayed[l].iter().map(move |e| (l, true, e)))
        })
    }

    /// Decides what a free instance runs now. A batch grows from the head of the queue while requests fit
    /// in `max_batch_size` and are compatible with the head. It leaves at once when it cannot grow
    /// (full, or the next request does not fit), when it reaches a preferred size, or when the head has
    /// waited `max_queue_delay`; otherwise the caller waits until the delay ends. A batch that must leave
    /// before it is full is cut at the largest preferred size it passed, if any.
    pub fn next_batch(&mut self, now: Instant, compatible: impl Fn(&J, &J) -> bool) -> Next<J> {
        let max = self.policy.max_batch_size;
        let mut head: Option<(&J, Instant)> = None;
        let mut size = 0u32;
        // The batch size after taking each request in order.
        let mut prefixes: Vec<u32> = Vec::new();
        let mut blocked = false;
        for (_, _, e) in self.ordered() {
            match head {
                None => head = Some((&e.job, e.enqueued)),
                Some((h, _)) => {
                    if size + e.batch_size > max || !compatible(h, &e.job) {
                        blocked = true;
                        break;
                    }
                }
            }
            size += e.batch_size;
            prefixes.push(size);
            if size == max {
                blocked = true;
                break;
            }
        }
        let Some((_, oldest)) = head else {
            return Next::Idle;
        };
        let preferred_cut = prefixes.iter().rposition(|s| self.policy.preferred.contains(s));
        let due = oldest + self.policy.max_queue_delay;
        let take = if blocked {
            // The batch cannot grow: send it, preferring a preferred size when it is not full.
            if size == max {
                prefixes.len()
            } else {
                preferred_cut.map_or(prefixes.len(), |i| i + 1)
            }
        } else if preferred_cut == Some(prefixes.len() - 1) || now >= due {
            // Every queued request is in, and either the size is preferred or the head waited long enough
            // (always true without a queue delay).
            prefixes.len()
        } else {
            return Next::WaitUntil(due);
        };
        Next::Batch(self.take(take))
    }

    /// Takes out the first queued request that `matches` (a cancelled one), wherever it waits.
    pub fn remove(&mut self, matches: impl Fn(&J) -> bool) -> Option<J> {
        for q in self.ready.iter_mut().chain(self.delayed.iter_mut()) {
            if let Some(i) = q.iter().position(|e| matches(&e.job)) {
                return q.remove(i).map(|e| e.job);
            }
        }
        None
    }

    /// Empties every queue (the batcher is stopping).
    pub fn drain_all(&mut self) -> Vec<J> {
        let n = self.len();
        self.take(n)
    }

    /// Removes the first `n` requests in batch order.
    fn take(&mut self, n: usize) -> Vec<J> {
        let mut out = Vec::with_capacity(n);
        for level in 0..self.ready.len() {
            for q in [&mut self.ready, &mut self.delayed] {
                while out.len() < n {
                    match q[level].pop_front() {
                        Some(e) => out.push(e.job),
                        None => break,
                    }
                }
            }
        }
        out
    }
}

/// Gives replies back in submission order when `preserve_ordering` is set.
struct Reorder {
    /// The next sequence number to release.
    next: u64,
    /// Finished replies waiting for earlier ones.
    done: BTreeMap<u64, (super::Reply, Result<ExecResult>)>,
}

/// A queued job with its place in submission order.
struct Queued {
    job: Job,
    seq: u64,
    /// Its cancellation hook (which takes it out of the queue), forgotten once it leaves the queue.
    hook: u64,
}

/// State shared by submitters, instance threads and the timer thread.
pub(super) struct Shared {
    model: String,
    /// Itself, for the cancellation hooks of queued requests.
    me: std::sync::Weak<Shared>,
    /// The queue and idle count, with the timer's alarm.
    state: Clocked<State>,
    /// Batches for idle instances; at most one per idle instance is ever in it.
    work_tx: super::queue::Sender<Work<Vec<Queued>>>,
    /// Number of instance threads, each stopped by one [`Work::Stop`].
    instances: usize,
    stats: Arc<ModelStats>,
    /// Ragged inputs, batch inputs and scattered outputs.
    spec: batch::BatchSpec,
    /// Set when replies must leave in submission order.
    reorder: Option<Mutex<Reorder>>,
    /// Set when the instances take a batch as a list of requests (Python models): requests of any shape
    /// may then share a batch, and each gets its own result.
    lists: bool,
}

pub(super) struct State {
    queue: BatchQueue<Queued>,
    /// Instances waiting for work.
    idle: usize,
    /// The next submission number.
    seq: u64,
}

/// The dynamic batcher of one model version.
pub(super) type DynamicBatcher = Batcher<Shared>;

impl DynamicBatcher {
    pub fn start(
        name: &str,
        cfg: &ModelConfig,
        d: &ModelDynamicBatching,
        instances: Vec<(String, Box<dyn ModelInstance>)>,
        stats: Arc<ModelStats>,
    ) -> Result<Self> {
        let policy = BatchPolicy::from_config(cfg.max_batch_size, d);
        let (work_tx, work_rx) = super::queue::queue::<Work<Vec<Queued>>>();
        let shared = Arc::new_cyclic(|me| Shared {
            me: me.clone(),
            model: name.to_string(),
            state: Clocked::new(State { queue: BatchQueue::new(policy), idle: instances.len(), seq: 0 }),
            work_tx,
            instances: instances.len(),
            stats,
            spec: batch::BatchSpec::from_config(cfg),
            reorder: d.preserve_ordering.then(|| Mutex::new(Reorder { next: 0, done: BTreeMap::new() })),
            lists: !instances.is_empty() && instances.iter().all(|(_, i)| i.takes_request_lists()),
        });
        let workers = Workers::new(name);
        for (inst_name, instance) in instances {
            let (shared, rx) = (shared.clone(), work_rx.clone());
            workers.instance(&inst_name, instance, move |instance, beat| {
                serve(&rx, beat, |batch| {
                    let jobs = batch.iter().map(|q| &q.job);
                    super::execution_span(&shared.model, jobs).in_scope(|| run_batch(&shared, instance, batch));
                    shared.instance_free();
                })
            })?;
        }
        let timer_shared = shared.clone();
        workers.timer(format!("batch-{name}"), move || timer_shared.timer_loop())?;
        Ok(Batcher::new(shared, workers))
    }
}

impl Batching for Shared {
    type State = State;
    fn parts(&self) -> (&str, &Clocked<State>, &ModelStats) {
        (&self.model, &self.state, &self.stats)
    }
    fn push(&self, st: &mut State, job: Job, now: Instant) -> Result<()> {
        let seq = st.seq;
        let (size, priority, timeout) = (job.batch_size, job.control.priority, job.control.timeout);
        let signals = job.exec.meta.signals.clone();
        // Weak: the batcher holds the queue that holds the job, whose metadata holds this hook.
        let shared = self.me.clone();
        let hook = signals
            .on_cancel(move || {
                if let Some(shared) = shared.upgrade() {
                    shared.cancel_queued(seq);
                }
            })
            .ok_or_else(|| super::default::cancelled_error(&self.model))?;
        match st.queue.push(Queued { job, seq, hook }, size, priority, timeout, now) {
            Ok(()) => {
                st.seq += 1;
                Ok(())
            }
            Err((_, msg)) => {
                signals.forget(hook);
                Err(Error::unavailable(format!("model '{}': {msg}", self.model)))
            }
        }
    }
    fn dispatch(&self, st: MutexGuard<'_, Timed<State>>, now: Instant) {
        Shared::dispatch(self, st, now)
    }
}

impl Shared {
    /// Forms batches for idle instances, answers timed-out requests, and re-arms the timer. Takes the
    /// state lock guard so the batches are handed over after the lock is released.
    fn dispatch(&self, mut st: MutexGuard<'_, Timed<State>>, now: Instant) {
        let expired = st.queue.take_expired(now);
        let mut batches = Vec::new();
        let mut wait = None;
        while st.idle > 0 {
            let (spec, lists) = (&self.spec, self.lists);
            match st.queue.next_batch(now, |a, b| lists || batch::compatible(&a.job.exec, &b.job.exec, spec)) {
                Next::Batch(b) => {
                    st.idle -= 1;
                    batches.push(b);
                }
                Next::WaitUntil(t) => {
                    wait = Some(t);
                    break;
                }
                Next::Idle => break,
            }
        }
        let wake = [wait, st.queue.next_deadline()].into_iter().flatten().min();
        self.state.rearm(st, wake);
        let taken = expired.len() + batches.iter().map(Vec::len).sum::<usize>();
        self.stats.pending.fetch_sub(taken as i64, Ordering::Relaxed);
        for q in expired {
            let waited = now.duration_since(q.job.enqueued);
            let err = Error::unavailable(format!(
                "request for model '{}' timed out after waiting {} us in the queue",
                self.model,
                waited.as_micros()
            ));
            self.reply(q.seq, q.job.reply, Err(err));
        }
        for b in batches {
            for q in &b {
                q.job.exec.meta.signals.forget(q.hook);
            }
            // Cannot fail: the instance threads hold the receiver until the batcher is gone.
            let _ = self.work_tx.send(Work::Batch(b));
        }
    }

    /// A queued request was cancelled: it leaves the queue unrun and is answered so.
    fn cancel_queued(&self, seq: u64) {
        let mut st = self.state.lock();
        let Some(q) = st.queue.remove(|q| q.seq == seq) else { return };
        // The head may have changed: batches and the timer are reconsidered.
        self.dispatch(st, Instant::now());
        self.stats.pending.fetch_sub(1, Ordering::Relaxed);
        self.reply(q.seq, q.job.reply, Err(super::default::cancelled_error(&self.model)));
    }

    /// An instance finished its batch: it is idle again, and may take the next one at once.
    fn instance_free(&self) {
        let mut st = self.state.lock();
        st.idle += 1;
        self.dispatch(st, Instant::now());
    }

    /// Wakes when a queue delay or a timeout falls due. When the batcher is dropped, answers whatever is
    /// still queued (only requests whose clients went away: a request in flight keeps its model alive)
    /// and stops the instance threads, which finish their current batch first.
    fn timer_loop(&self) {
        let mut st = self.state.run(|st, now| self.dispatch(st, now));
        let leftovers = st.queue.drain_all();
        drop(st);
        self.stats.pending.fetch_sub(leftovers.len() as i64, Ordering::Relaxed);
        for q in leftovers {
            self.reply(q.seq, q.job.reply, Err(unloaded(&self.model)));
        }
        for _ in 0..self.instances {
            let _ = self.work_tx.send(Work::Stop);
        }
    }

    /// Sends a reply, holding it back until earlier ones are out when ordering is preserved.
    fn reply(&self, seq: u64, tx: super::Reply, result: Result<ExecResult>) {
        let Some(reorder) = &self.reorder else {
            let _ = tx.send(result);
            return;
        };
        let mut r = reorder.lock();
        r.done.insert(seq, (tx, result));
        loop {
            let next = r.next;
            let Some((tx, result)) = r.done.remove(&next) else { break };
            r.next += 1;
            let _ = tx.send(result);
        }
    }
}

/// Executes one batch on an instance and answers every request in it.
fn run_batch(shared: &Shared, instance: &mut dyn ModelInstance, batch: Vec<Queued>) {
    // Requests cancelled since the batch formed are answered, not run.
    let (batch, cancelled): (Vec<Queued>, Vec<Queued>) =
        batch.into_iter().partition(|q| !q.job.exec.meta.signals.is_cancelled());
    for q in cancelled {
        shared.reply(q.seq, q.job.reply, Err(super::default::cancelled_error(&shared.model)));
    }
    if batch.is_empty() {
        return;
    }
    let start = Instant::now();
    let execs: Vec<&ExecRequest> = batch.iter().map(|q| &q.job.exec).collect();
    let sizes: Vec<u32> = batch.iter().map(|q| q.job.batch_size).collect();
    if shared.lists {
        let mut results = execute_list(instance, &execs);
        results
            .resize_with(batch.len(), || Err(Error::internal("the backend returned too few results; this is a bug")));
        if let Some(t) = results.iter().find_map(|r| r.as_ref().ok()).map(|r| r.timings) {
            record_execution(&shared.stats, sizes.iter().sum(), &t);
        }
        for (q, mut result) in batch.into_iter().zip(results) {
            finish_request(&shared.stats, q.job.enqueued, start, &mut result);
            shared.reply(q.seq, q.job.reply, result);
        }
        return;
    }
    let result = batch::merge(&execs, &shared.spec).and_then(|merged| execute(instance, &merged)).and_then(|r| {
        record_execution(&shared.stats, sizes.iter().sum(), &r.timings);
        batch::split(r, &execs, &sizes, &shared.spec)
    });
    match result {
        Ok(parts) => {
            for (q, part) in batch.into_iter().zip(parts) {
                let mut result = Ok(part);
                finish_request(&shared.stats, q.job.enqueued, start, &mut result);
                shared.reply(q.seq, q.job.reply, result);
            }
        }
        Err(e) => {
            for q in batch {
                shared.reply(q.seq, q.job.reply, Err(e.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests;
