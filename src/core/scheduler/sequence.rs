//! The sequence batcher (`sequence_batching`) for stateful models: every request of a sequence goes to
//! the same slot of the same instance, the model receives the configured control inputs (START, END,
//! READY, CORRID), and implicit state (`state`) is kept by the server between a sequence's requests.
//!
//! The policy is [`slots::SlotTable`], a pure state struct with explicit time (slot assignment, backlog,
//! idle expiry, batch formation for the direct and oldest strategies); [`policy::SequencePolicy`] reads
//! the configuration and builds the control and state tensors. [`SequenceBatcher`] is the batchers' one
//! thin driver (`driver.rs`) around it: submitters and finishing instances call `dispatch` under one
//! short lock, each instance thread gets its own batches (a slot belongs to one instance) and keeps its
//! slots' implicit state, and one timer thread wakes for queue delays and idle expiry.
//!
//! With `iterative_sequence`, a request without a sequence id starts a sequence of its own (numbered
//! here, from 1, as tritonserver does), and after each execution the model either reschedules it (it
//! goes back to its slot's queue and runs again, in a later batch, with START off) or releases it,
//! which answers it and ends the sequence. Instances that take request lists (Python models) get each
//! row as its own request, with the row's correlation id and START/END flags.

pub mod policy;
pub mod slots;

use super::driver::{Batcher, Batching};
use super::dynamic::Next;
use super::timer::{Clocked, Timed};
use super::workers::{finish_request, serve, unloaded, Work, Workers};
use super::{batch, execute, Job, DEFAULT_MAX_QUEUE_SIZE};
use crate::core::stats::ModelStats;
use crate::error::{Error, Result};
use crate::model_api::types::Tensor;
use crate::model_api::{ExecRequest, ExecResult, ModelInstance, RequestMeta, SequenceId};
use crate::proto::inference::ModelConfig;
use parking_lot::MutexGuard;
use policy::{RowSignals, SequencePolicy};
use slots::{Row, SlotPolicy, SlotTable};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// What an instance thread receives: rows in slot order (direct) or arrival order (oldest).
type Rows = Vec<Row<Job>>;

/// State shared by submitters, instance threads and the timer thread.
pub(super) struct Shared {
    /// Model name, for messages.
    model: String,
    /// The slot table, with the timer's alarm, under one short lock.
    state: Clocked<State>,
    /// One queue per instance: a batch holds slots of exactly one instance.
    work: Vec<super::queue::Sender<Work<Rows>>>,
    /// The model version's statistics.
    stats: Arc<ModelStats>,
    /// Ragged inputs, batch inputs and scattered outputs.
    spec: batch::BatchSpec,
    /// Control inputs and implicit state.
    policy: SequencePolicy,
    /// Set when the instances take a batch as a list of requests (Python models): each row runs as its
    /// own request instead of one merged along the batch dimension.
    lists: bool,
}

pub(super) struct State {
    /// Slots, sequences, backlog and batch formation.
    table: SlotTable<Job>,
    /// Iterative sequences: the id the next request without one gets.
    next_id: u64,
}

/// What happens to an iterative sequence once its request has run.
pub(super) enum Follow {
    /// The model rescheduled the request: it runs again.
    Again(Job, SequenceId),
    /// The request was answered (or failed, or was cancelled): the sequence is over.
    End(SequenceId),
}

/// The sequence batcher of one model version.
pub(super) type SequenceBatcher = Batcher<Shared>;

impl SequenceBatcher {
    /// Starts one thread per instance and the timer thread. `policy` is the model's checked
    /// `sequence_batching`.
    pub fn start(
        name: &str,
        cfg: &ModelConfig,
        policy: SequencePolicy,
        instances: Vec<(String, Box<dyn ModelInstance>)>,
        stats: Arc<ModelStats>,
    ) -> Result<Self> {
        if instances.is_empty() {
            return Err(Error::internal(format!("model '{name}' has no instances for the sequence batcher")));
        }
        let table = SlotTable::new(SlotPolicy::new(name, instances.len(), &policy, DEFAULT_MAX_QUEUE_SIZE));
        let mut senders = Vec::with_capacity(instances.len());
        let mut receivers = Vec::with_capacity(instances.len());
        for _ in &instances {
            let (tx, rx) = super::queue::queue::<Work<Rows>>();
            senders.push(tx);
            receivers.push(rx);
        }
        let shared = Arc::new(Shared {
            model: name.to_string(),
            state: Clocked::new(State { table, next_id: 1 }),
            work: senders,
            stats,
            spec: batch::BatchSpec::from_config(cfg),
            policy,
            lists: instances.iter().all(|(_, i)| i.takes_request_lists()),
        });
        let workers = Workers::new(name);
        let mut started = Ok(());
        for (index, ((inst_name, instance), rx)) in instances.into_iter().zip(receivers).enumerate() {
            let shared = shared.clone();
            started = workers.instance(&inst_name, instance, move |instance, beat| {
                // This instance's slots' implicit state: one tensor per configured state, or none before
                // the slot's first request.
                let mut states: Vec<Option<Vec<Tensor>>> = vec![None; shared.policy.slots_per_instance.max(1)];
                serve(&rx, beat, |rows| {
                    let jobs =
                        rows.iter().filter_map(|r| if let Row::Request { job, .. } = r { Some(job) } else { None });
                    let follows = super::execution_span(&shared.model, jobs)
                        .in_scope(|| run_batch(&shared, instance, &mut states, rows));
                    shared.instance_free(index, follows);
                })
            });
            if started.is_err() {
                break;
            }
        }
        let timer_shared = shared.clone();
        let started = started.and_then(|()| workers.timer(format!("seq-{name}"), move || timer_shared.timer_loop()));
        if let Err(e) = started {
            // The threads already started are stopped; nothing was queued yet.
            shared.state.close();
            shared.stop_instances();
            return Err(e);
        }
        Ok(Batcher::new(shared, workers))
    }
}

impl Batching for Shared {
    type State = State;
    fn parts(&self) -> (&str, &Clocked<State>, &ModelStats) {
        (&self.model, &self.state, &self.stats)
    }
    /// Refuses a request whose correlation id does not fit the model's CORRID control.
    fn check(&self, job: &Job) -> Result<()> {
        match &job.control.sequence_id {
            Some(id) => self.policy.check_corrid(&self.model, id),
            None => Ok(()),
        }
    }
    /// Routes the request to its sequence's slot (or the backlog), or refuses it with Triton's message:
    /// no sequence id, a batch of more than one, or no START on an unknown (ended, expired) sequence.
    fn push(&self, st: &mut State, job: Job, now: Instant) -> Result<()> {
        let (mut id, mut start, end, size) =
            (job.control.sequence_id.clone(), job.control.sequence_start, job.control.sequence_end, job.batch_size);
        if self.policy.iterative && id.is_none() {
            // An iterative sequence is one request: it starts a sequence with an id of its own.
            id = Some(SequenceId::U64(st.next_id));
            st.next_id += 1;
            start = true;
        }
        st.table.submit(job, id, start, end, size, now).map_err(|(_, e)| e)
    }
    fn dispatch(&self, st: MutexGuard<'_, Timed<State>>, now: Instant) {
        Shared::dispatch(self, st, now)
    }
}

impl Shared {
    /// Releases idle sequences, forms a batch for every idle instance that has work, and re-arms the
    /// timer. Takes the state lock guard so batches are handed over after the lock is released.
    fn dispatch(&self, mut st: MutexGuard<'_, Timed<State>>, now: Instant) {
        st.table.expire_idle(now);
        let mut batches = Vec::new();
        let mut wait: Option<Instant> = None;
        let spec = &self.spec;
        for i in 0..self.work.len() {
            if !st.table.is_idle(i) {
                continue;
            }
            match st.table.next_batch(i, now, |a, b| batch::compatible(&a.exec, &b.exec, spec)) {
                Next::Batch(rows) => batches.push((i, rows)),
                Next::WaitUntil(t) => wait = Some(wait.map_or(t, |w| w.min(t))),
                Next::Idle => {}
            }
        }
        let wake = [wait, st.table.next_deadline()].into_iter().flatten().min();
        self.state.rearm(st, wake);
        let taken: usize = batches.iter().map(|(_, rows)| rows.iter().filter(|r| r.is_request()).count()).sum();
        self.stats.pending.fetch_sub(taken as i64, Ordering::Relaxed);
        for (i, rows) in batches {
            // Cannot fail: each instance thread holds its receiver until the batcher is gone.
            let _ = self.work[i].send(Work::Batch(rows));
        }
    }

    /// An instance finished its batch: it is idle again, its sequences may continue, and its iterative
    /// sequences run again (`follows`) or end.
    fn instance_free(&self, instance: usize, follows: Vec<Follow>) {
        let now = Instant::now();
        let mut st = self.state.lock();
        let mut refused = Vec::new();
        for follow in follows {
            match follow {
                Follow::End(id) => st.table.end(&id, now),
                Follow::Again(job, id) if job.exec.meta.signals.is_cancelled() => {
                    st.table.end(&id, now);
                    refused.push((job, super::default::cancelled_error(&self.model)));
                }
                Follow::Again(mut job, id) => {
                    // Queue time counts again from here, for the next execution.
                    job.enqueued = now;
                    match st.table.submit(job, Some(id.clone()), false, false, 1, now) {
                        Ok(()) => {
                            self.stats.pending.fetch_add(1, Ordering::Relaxed);
                        }
                        // Its sequence expired meanwhile (max_sequence_idle_microseconds), or the
                        // queue is full: the request fails with the reason.
                        Err((job, e)) => {
                            st.table.end(&id, now);
                            refused.push((job, e));
                        }
                    }
                }
            }
        }
        st.table.complete(instance, now);
        self.dispatch(st, now);
        for (job, e) in refused {
            let _ = job.reply.send(Err(e));
        }
    }

    /// Wakes when a queue delay ends or a sequence may have gone idle. When the batcher is dropped,
    /// answers whatever is still queued (only requests whose clients went away: a request in flight
    /// keeps its model alive) and stops the instance threads after their current batch.
    fn timer_loop(&self) {
        let mut st = self.state.run(|st, now| self.dispatch(st, now));
        let leftovers = st.table.drain_all();
        drop(st);
        self.stats.pending.fetch_sub(leftovers.len() as i64, Ordering::Relaxed);
        for job in leftovers {
            let _ = job.reply.send(Err(unloaded(&self.model)));
        }
        self.stop_instances();
    }

    fn stop_instances(&self) {
        for tx in &self.work {
            let _ = tx.send(Work::Stop);
        }
    }
}

/// Builds the execution request of every row (the client's inputs plus control and state inputs, and the
/// state outputs), runs them as one batch, keeps each sequence's new state and answers every request.
/// Returns what becomes of its iterative sequences.
fn run_batch(
    shared: &Shared,
    instance: &mut dyn ModelInstance,
    states: &mut [Option<Vec<Tensor>>],
    rows: Vec<Row<Job>>,
) -> Vec<Follow> {
    let (rows, mut follows) = drop_cancelled(shared, rows);
    if !rows.iter().any(Row::is_request) {
        return follows;
    }
    let start = Instant::now();
    let Some(ordered) = row_execs(&shared.policy, states, &rows) else {
        // Only padding rows: a bug in the table, but nothing to answer either.
        tracing::error!("model '{}': a sequence batch without requests was formed; this is a bug", shared.model);
        return follows;
    };
    let parts = execute_rows(shared, instance, &rows, &ordered);
    follows.extend(answer_rows(shared, states, rows, parts, start));
    follows
}

/// Answers the requests cancelled while they waited (their clients went away) instead of running them:
/// under the direct strategy their rows become padding, so the other rows keep their slots; under the
/// oldest strategy they leave the batch.
fn drop_cancelled(shared: &Shared, rows: Vec<Row<Job>>) -> (Vec<Row<Job>>, Vec<Follow>) {
    let direct = matches!(shared.policy.strategy, policy::Strategy::Direct { .. });
    let mut kept = Vec::with_capacity(rows.len());
    let mut ended = Vec::new();
    for row in rows {
        match row {
            Row::Request { job, slot, id, .. } if job.exec.meta.signals.is_cancelled() => {
                let _ = job.reply.send(Err(super::default::cancelled_error(&shared.model)));
                if shared.policy.iterative {
                    ended.push(Follow::End(id));
                }
                if direct {
                    kept.push(Row::Empty { slot });
                }
            }
            row => kept.push(row),
        }
    }
    (kept, ended)
}

/// The execution request of every row, in row order: each request with its control inputs, its
/// sequence's state (initial state at START) and the state outputs, and each padding row a copy of the
/// first request (the template) with READY false and zero state. `None` when no row is a request.
fn row_execs(policy: &SequencePolicy, states: &[Option<Vec<Tensor>>], rows: &[Row<Job>]) -> Option<Vec<ExecRequest>> {
    let mut execs: Vec<ExecRequest> = Vec::with_capacity(rows.len());
    // The request that padding rows copy their inputs and state shapes from.
    let mut template: Option<ExecRequest> = None;
    for row in rows {
        let Some(exec) = request_exec(policy, states, row) else { continue };
        if template.is_none() {
            template = Some(exec.clone());
        }
        execs.push(exec);
    }
    let template = template?;
    // Rebuild in row order, padding rows as copies of the template with READY false and zero state.
    let mut real = execs.into_iter();
    let mut ordered: Vec<ExecRequest> = Vec::with_capacity(rows.len());
    for row in rows {
        match row {
            Row::Request { .. } => {
                if let Some(e) = real.next() {
                    ordered.push(e);
                }
            }
            Row::Empty { .. } => ordered.push(padding(policy, &template)),
        }
    }
    Some(ordered)
}

/// The execution request of a request row: the client's request plus its control inputs, its sequence's
/// stored state (the initial state at START or when none is stored) and the state outputs. `None` for a
/// padding row.
fn request_exec(policy: &SequencePolicy, states: &[Option<Vec<Tensor>>], row: &Row<Job>) -> Option<ExecRequest> {
    let Row::Request { job, slot, id, start, end } = row else { return None };
    let batching = policy.batching();
    let mut exec = job.exec.clone();
    if policy.iterative {
        // The model sees the sequence the batcher gave the request, and START on its first run only.
        exec.meta = Arc::new(RequestMeta {
            correlation_id: Some(id.clone()),
            flags: u32::from(*start) | (u32::from(*end) << 1),
            ..(*job.exec.meta).clone()
        });
    }
    exec.inputs.extend(policy.row_controls(RowSignals { ready: true, start: *start, end: *end, corrid: Some(id) }));
    let stored = if *start { None } else { states.get(*slot).and_then(|s| s.as_ref()) };
    match stored {
        Some(tensors) => exec.inputs.extend(tensors.iter().cloned()),
        None => exec.inputs.extend(policy.states.iter().map(|s| s.initial_tensor(batching))),
    }
    for s in &policy.states {
        if !exec.outputs.contains(&s.output_name) {
            exec.outputs.push(s.output_name.clone());
        }
    }
    Some(exec)
}

/// Runs the rows' requests on `instance` (`ordered`: each row's execution request, padding included)
/// and records the execution: merged into one batch, split back into one part per row, or, for instances
/// that take request lists, each request on its own (padding rows skipped). One result per row.
fn execute_rows(
    shared: &Shared,
    instance: &mut dyn ModelInstance,
    rows: &[Row<Job>],
    ordered: &[ExecRequest],
) -> Vec<Result<ExecResult>> {
    let requests = rows.iter().filter(|r| r.is_request()).count() as u32;
    let record = |t: &crate::model_api::ExecTimings, rows: u32| {
        shared.stats.record_padded_execution(
            requests,
            rows,
            t.compute_input_ns,
            t.compute_infer_ns,
            t.compute_output_ns,
        )
    };
    if shared.lists {
        let real: Vec<&ExecRequest> =
            rows.iter().zip(ordered).filter(|(r, _)| r.is_request()).map(|(_, e)| e).collect();
        let mut results = super::execute_list(instance, &real).into_iter();
        if let Some(t) = results.as_slice().iter().find_map(|r| r.as_ref().ok()).map(|r| r.timings) {
            record(&t, requests);
        }
        let missing = || Err(Error::internal("the backend returned too few results; this is a bug"));
        return rows
            .iter()
            .map(|r| if r.is_request() { results.next().unwrap_or_else(missing) } else { Ok(ExecResult::default()) })
            .collect();
    }
    let refs: Vec<&ExecRequest> = ordered.iter().collect();
    let merged = if refs.iter().all(|r| batch::compatible(refs[0], r, &shared.spec)) {
        batch::merge(&refs, &shared.spec)
    } else {
        Err(Error::invalid(format!(
            "model '{}': the implicit states of the sequences in one batch have different shapes",
            shared.model
        )))
    };
    let parts = merged.and_then(|merged| execute(instance, &merged)).and_then(|r| {
        record(&r.timings, rows.len() as u32);
        batch::split(r, &refs, &vec![1; refs.len()], &shared.spec)
    });
    match parts {
        Ok(parts) => parts.into_iter().map(Ok).collect(),
        Err(e) => rows.iter().map(|_| Err(e.clone())).collect(),
    }
}

/// Answers every request row with its part of the result (started at `start`), keeping its sequence's
/// new state in its slot (dropped when the sequence ended). A row whose model rescheduled it (iterative
/// sequences) is not answered but runs again; every other iterative row ends its sequence.
fn answer_rows(
    shared: &Shared,
    states: &mut [Option<Vec<Tensor>>],
    rows: Vec<Row<Job>>,
    parts: Vec<Result<ExecResult>>,
    start: Instant,
) -> Vec<Follow> {
    let policy = &shared.policy;
    let mut follows = Vec::new();
    for (row, part) in rows.into_iter().zip(parts) {
        let Row::Request { job, slot, end, start: first, id } = row else { continue };
        // Taken whatever happened, so a stale flag never reschedules a later execution.
        let again = job.exec.meta.signals.take_reschedule() && policy.iterative;
        let result = match part {
            Ok(part) => {
                let (client, state) = split_state(policy, &job.exec.outputs, part);
                let over = end || (policy.iterative && !again);
                if let Some(s) = states.get_mut(slot) {
                    // An ended sequence's state is dropped; its slot's next owner starts afresh.
                    *s = if over || state.is_empty() { None } else { Some(state) };
                }
                let mut result = Ok(client);
                finish_request(&shared.stats, job.enqueued, start, &mut result);
                result
            }
            Err(e) => {
                // A sequence that failed to start must not continue from its slot's previous owner.
                if let (true, Some(s)) = (first, states.get_mut(slot)) {
                    *s = None;
                }
                Err(e)
            }
        };
        match (again && result.is_ok(), policy.iterative) {
            (true, _) => follows.push(Follow::Again(job, id)),
            (false, iterative) => {
                let _ = job.reply.send(result);
                if iterative {
                    follows.push(Follow::End(id));
                }
            }
        }
    }
    follows
}

/// A padding row: the template's inputs with READY false (START, END false, CORRID 0) and zero state.
fn padding(policy: &SequencePolicy, template: &ExecRequest) -> ExecRequest {
    let controls = policy.row_controls(RowSignals { ready: false, start: false, end: false, corrid: None });
    let inputs = template
        .inputs
        .iter()
        .map(|t| {
            if let Some(c) = controls.iter().find(|c| c.name == t.name) {
                c.clone()
            } else if policy.states.iter().any(|s| s.input_name == t.name) {
                policy::zeros_like(t)
            } else {
                t.clone()
            }
        })
        .collect();
    ExecRequest { inputs, outputs: template.outputs.clone(), ..Default::default() }
}

/// Separates a row's outputs into what the client asked for (in its order) and the next implicit state
/// (renamed to the state inputs, ready to feed back).
fn split_state(policy: &SequencePolicy, asked: &[String], mut part: ExecResult) -> (ExecResult, Vec<Tensor>) {
    let mut state = Vec::with_capacity(policy.states.len());
    for s in &policy.states {
        if let Some(t) = part.outputs.iter().find(|t| t.name == s.output_name) {
            let mut t = t.clone();
            t.name = s.input_name.clone();
            state.push(t);
        }
    }
    if state.len() != policy.states.len() {
        state.clear();
    }
    part.outputs.retain(|t| asked.contains(&t.name));
    (part, state)
}

#[cfg(test)]
mod tests;
