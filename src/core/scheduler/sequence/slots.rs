//! The sequence batcher's policy as a pure state struct: which instance slot each sequence owns, the
//! backlog of sequences waiting for a slot, idle expiry, and which requests form an instance's next batch.
//!
//! Nothing here sleeps, spawns or reads the clock: every method takes `now`, so the whole policy is
//! unit-tested without threads or timers. The driver in `sequence.rs` calls it under one lock.

use super::super::dynamic::{BatchPolicy, BatchQueue, LevelPolicy, Next};
use super::policy::{SequencePolicy, Strategy};
use crate::error::Error;
use crate::model_api::SequenceId;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// How long a sequence released for being idle is remembered, to explain a later request on it.
const EXPIRED_MEMORY: Duration = Duration::from_secs(60);
/// At most this many released sequences are remembered (the hint is best effort).
const EXPIRED_MAX: usize = 4096;

/// An instance and one of its slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlotRef {
    /// Index of the instance (its thread and its batches).
    pub instance: usize,
    /// Index of the slot within the instance: the batch row (direct) or candidate place (oldest).
    pub slot: usize,
}

/// A request as the slot table keeps it.
#[derive(Debug)]
struct Entry<J> {
    /// The queued payload.
    job: J,
    /// Its sequence, for CORRID.
    id: SequenceId,
    /// The request starts its sequence.
    start: bool,
    /// The request ends its sequence.
    end: bool,
    /// When it was accepted, for the queue delay and for oldest-first order.
    enqueued: Instant,
}

/// One row of a batch handed to an instance.
#[derive(Debug)]
pub enum Row<J> {
    /// A request of the sequence that owns `slot`.
    Request {
        /// The queued payload.
        job: J,
        /// The slot whose implicit state the request reads and writes.
        slot: usize,
        /// Its sequence, for CORRID.
        id: SequenceId,
        /// START control value.
        start: bool,
        /// END control value.
        end: bool,
    },
    /// Padding for a direct-strategy slot with nothing ready, so later rows stay in their slots. The
    /// model sees READY false; the outputs are dropped.
    Empty {
        /// The idle slot the row stands for.
        slot: usize,
    },
}

impl<J> Row<J> {
    /// Whether the row carries a request.
    pub fn is_request(&self) -> bool {
        matches!(self, Row::Request { .. })
    }
}

/// One batch slot of an instance (a candidate-sequence place under the oldest strategy).
#[derive(Debug)]
struct Slot<J> {
    /// The sequence occupying the slot.
    owner: Option<SequenceId>,
    /// Its requests, oldest first, not yet in a batch.
    queue: VecDeque<Entry<J>>,
    /// The owner will send no more requests (END queued, or idle expiry): the slot is freed once its
    /// queue is drained.
    closing: bool,
    /// Oldest strategy: a request of this slot waits in the instance's batch queue or executes, so the
    /// next one must wait (one request per sequence per batch, in order).
    in_flight: bool,
}

impl<J> Default for Slot<J> {
    fn default() -> Self {
        Slot { owner: None, queue: VecDeque::new(), closing: false, in_flight: false }
    }
}

/// One instance's slots and what it is doing.
struct Instance<J> {
    /// Its slots, by index.
    slots: Vec<Slot<J>>,
    /// A batch was handed out and has not completed.
    busy: bool,
    /// Oldest strategy: requests issued from their slots, batched dynamically as `(slot, entry)`.
    issued: Option<BatchQueue<(usize, Entry<J>)>>,
    /// Oldest strategy: the slots of the running batch, whose next request may go once it completes.
    running: Vec<usize>,
}

/// A sequence that owns a slot.
#[derive(Debug, Clone, Copy)]
struct Active {
    /// The slot it owns.
    at: SlotRef,
    /// Its last request's arrival, for idle expiry.
    last_seen: Instant,
}

/// A sequence waiting for a free slot, with its requests so far.
struct Backlog<J> {
    /// The waiting sequence.
    id: SequenceId,
    /// Its requests so far, oldest first.
    entries: VecDeque<Entry<J>>,
    /// Its END has not arrived: later requests of the sequence join this backlog.
    open: bool,
}

/// The scheduling parameters the table needs, from [`SequencePolicy`].
#[derive(Debug, Clone)]
pub struct SlotPolicy {
    /// Model name, for messages.
    pub model: String,
    /// Number of instances, each with its own slots.
    pub instances: usize,
    /// Batch slots (direct) or candidate sequences (oldest) per instance.
    pub slots_per_instance: usize,
    /// A sequence without requests for this long loses its slot.
    pub max_idle: Duration,
    /// Direct or oldest, with its delay settings.
    pub strategy: Strategy,
    /// `max_batch_size` (0: no batch dimension; batches hold one request).
    pub max_batch_size: u32,
    /// Requests queued over all slots and the backlog before new ones are refused.
    pub max_queue: usize,
}

impl SlotPolicy {
    pub fn new(model: &str, instances: usize, p: &SequencePolicy, max_queue: usize) -> SlotPolicy {
        SlotPolicy {
            model: model.to_string(),
            instances,
            slots_per_instance: p.slots_per_instance.max(1),
            max_idle: p.max_idle,
            strategy: p.strategy.clone(),
            max_batch_size: p.max_batch_size,
            max_queue,
        }
    }
}

/// The sequence batcher's state: slots, sequences, backlog. `J` is the queued payload.
pub struct SlotTable<J> {
    /// What the configuration asks for.
    policy: SlotPolicy,
    /// Every instance's slots and batch state.
    instances: Vec<Instance<J>>,
    /// Sequences that own a slot and may send more requests.
    active: HashMap<SequenceId, Active>,
    /// Sequences waiting for a slot, first come first served.
    backlog: VecDeque<Backlog<J>>,
    /// Sequences recently released for being idle, with when, to explain a later request on them.
    expired: HashMap<SequenceId, Instant>,
    /// Requests accepted and not yet in a batch.
    queued: usize,
}

impl<J> SlotTable<J> {
    pub fn new(policy: SlotPolicy) -> Self {
        let instances = (0..policy.instances.max(1))
            .map(|_| Instance {
                slots: (0..policy.slots_per_instance).map(|_| Slot::default()).collect(),
                busy: false,
                issued: match &policy.strategy {
                    Strategy::Oldest { preferred, max_queue_delay } => Some(BatchQueue::new(BatchPolicy {
                        max_batch_size: policy.max_batch_size.max(1),
                        preferred: preferred.clone(),
                        max_queue_delay: *max_queue_delay,
                        levels: vec![LevelPolicy {
                            reject_on_timeout: true,
                            default_timeout: None,
                            allow_timeout_override: false,
                            max_queue_size: usize::MAX,
                        }],
                        default_level: 1,
                    })),
                    Strategy::Direct { .. } => None,
                },
                running: Vec::new(),
            })
            .collect();
        SlotTable {
            policy,
            instances,
            active: HashMap::new(),
            backlog: VecDeque::new(),
            expired: HashMap::new(),
            queued: 0,
        }
    }

    /// Requests accepted and not yet in a batch.
    pub fn queued(&self) -> usize {
        self.queued
    }

    /// The slot a sequence owns, if it owns one.
    pub fn slot_of(&self, id: &SequenceId) -> Option<SlotRef> {
        self.active.get(id).map(|a| a.at)
    }

    /// Whether a sequence waits in the backlog.
    pub fn in_backlog(&self, id: &SequenceId) -> bool {
        self.backlog.iter().any(|b| b.open && &b.id == id)
    }

    /// Sequences waiting for a slot.
    pub fn backlog_len(&self) -> usize {
        self.backlog.len()
    }

    /// Whether the instance can take a batch.
    pub fn is_idle(&self, instance: usize) -> bool {
        self.instances.get(instance).is_some_and(|i| !i.busy)
    }

    /// Accepts a request of sequence `id` (or gives it back with the reason, in Triton's words): it joins
    /// its sequence's slot, its backlog, or, when it starts a new sequence, a free slot or a new backlog.
    pub fn submit(
        &mut self,
        job: J,
        id: Option<SequenceId>,
        start: bool,
        end: bool,
        batch_size: u32,
        now: Instant,
    ) -> Result<(), (J, Error)> {
        let model = &self.policy.model;
        let Some(id) = id else {
            let msg =
                format!("inference request to model '{model}' must specify a non-zero or non-empty correlation ID");
            return Err((job, Error::invalid(msg)));
        };
        if batch_size > 1 {
            let msg = format!(
                "inference request to model '{model}' must specify batch-size 1 due to requirements of sequence batcher"
            );
            return Err((job, Error::invalid(msg)));
        }
        if self.queued >= self.policy.max_queue {
            let msg = format!(
                "exceeds maximum queue size: model '{model}' already has {} sequence requests queued",
                self.queued
            );
            return Err((job, Error::unavailable(msg)));
        }
        let entry = Entry { job, id: id.clone(), start, end, enqueued: now };
        if let Some(active) = self.active.get_mut(&id) {
            // A START on a running sequence restarts it in its slot (Triton warns and does the same).
            if start {
                tracing::warn!(
                    "Sequence {} of model '{model}' got a new START before its END; the previous sequence ends early.",
                    show(&id)
                );
            }
            active.last_seen = now;
            let at = active.at;
            if end {
                self.active.remove(&id);
            }
            let slot = &mut self.instances[at.instance].slots[at.slot];
            slot.queue.push_back(entry);
            slot.closing |= end;
        } else if let Some(b) = self.backlog.iter_mut().find(|b| b.open && b.id == id) {
            b.entries.push_back(entry);
            b.open = !end;
        } else if !start {
            let mut msg = format!(
                "inference request for sequence {} to model '{model}' must specify the START flag on the first \
                 request of the sequence",
                show(&id)
            );
            if self.expired.contains_key(&id) {
                msg.push_str(&format!(
                    " (the sequence was released after {} us without requests: max_sequence_idle_microseconds)",
                    self.policy.max_idle.as_micros()
                ));
            }
            return Err((entry.job, Error::invalid(msg)));
        } else {
            self.expired.remove(&id);
            match self.free_slot() {
                Some(at) => {
                    let slot = &mut self.instances[at.instance].slots[at.slot];
                    slot.owner = Some(id.clone());
                    slot.closing = end;
                    slot.queue.push_back(entry);
                    if !end {
                        self.active.insert(id, Active { at, last_seen: now });
                    }
                }
                None => self.backlog.push_back(Backlog { id, entries: VecDeque::from([entry]), open: !end }),
            }
        }
        self.queued += 1;
        Ok(())
    }

    /// A slot no sequence owns: the lowest slot index, then the lowest instance, so new sequences spread
    /// over the instances first and direct batches stay packed at the front.
    fn free_slot(&self) -> Option<SlotRef> {
        (0..self.policy.slots_per_instance).find_map(|slot| {
            (0..self.instances.len())
                .find(|&i| self.instances[i].slots[slot].owner.is_none())
                .map(|instance| SlotRef { instance, slot })
        })
    }

    /// Frees a slot whose sequence is over and hands it to the oldest backlogged sequence, if any.
    fn release(&mut self, at: SlotRef, now: Instant) {
        let next = self.backlog.pop_front();
        let slot = &mut self.instances[at.instance].slots[at.slot];
        slot.owner = None;
        slot.closing = false;
        if let Some(b) = next {
            slot.owner = Some(b.id.clone());
            slot.queue = b.entries;
            slot.closing = !b.open;
            if b.open {
                // The wait in the backlog does not count as idle time.
                self.active.insert(b.id, Active { at, last_seen: now });
            }
        }
    }

    /// Releases every sequence that sent nothing for `max_idle`: it loses its slot (after its queued
    /// requests), and a later request on it is an error. Backlogged sequences wait without expiring.
    pub fn expire_idle(&mut self, now: Instant) {
        let idle = self.policy.max_idle;
        let gone: Vec<SequenceId> = self
            .active
            .iter()
            .filter(|(_, a)| now.saturating_duration_since(a.last_seen) >= idle)
            .map(|(id, _)| id.clone())
            .collect();
        if gone.is_empty() {
            return;
        }
        // Pruned only when something expires: this runs on every dispatch.
        self.expired.retain(|_, t| now.saturating_duration_since(*t) < EXPIRED_MEMORY);
        if self.expired.len() + gone.len() > EXPIRED_MAX {
            self.expired.clear();
        }
        for id in gone {
            let Some(a) = self.active.remove(&id) else { continue };
            tracing::debug!(
                "Sequence {} of model '{}' was idle for {idle:?}; releasing its slot.",
                show(&id),
                self.policy.model
            );
            let slot = &mut self.instances[a.at.instance].slots[a.at.slot];
            slot.closing = true;
            if slot.queue.is_empty() && !slot.in_flight {
                self.release(a.at, now);
            }
            self.expired.insert(id, now);
        }
    }

    /// When the next sequence would expire without further requests.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.active.values().map(|a| a.last_seen + self.policy.max_idle).min()
    }

    /// Decides what idle `instance` runs now. `compatible(a, b)` says whether two requests may share a
    /// batch. The rows of a `Batch` are taken from the queues and the instance counts as busy until
    /// [`SlotTable::complete`].
    pub fn next_batch(&mut self, instance: usize, now: Instant, compatible: impl Fn(&J, &J) -> bool) -> Next<Row<J>> {
        if !self.is_idle(instance) {
            return Next::Idle;
        }
        let next = match self.policy.strategy {
            Strategy::Direct { max_queue_delay, minimum_slot_utilization } => {
                self.next_direct(instance, now, max_queue_delay, minimum_slot_utilization, compatible)
            }
            Strategy::Oldest { .. } => self.next_oldest(instance, now, compatible),
        };
        if let Next::Batch(rows) = &next {
            self.queued -= rows.iter().filter(|r| r.is_request()).count();
            self.instances[instance].busy = true;
        }
        next
    }

    /// Direct: row `s` is slot `s`, up to the last slot with a request ready; slots in between without
    /// one are padding. A slot whose next request cannot share the batch (other shapes) waits a turn.
    fn next_direct(
        &mut self,
        instance: usize,
        now: Instant,
        delay: Duration,
        utilization: f32,
        compatible: impl Fn(&J, &J) -> bool,
    ) -> Next<Row<J>> {
        let slots = &self.instances[instance].slots;
        let Some(rep) = slots.iter().position(|s| !s.queue.is_empty()) else {
            return Next::Idle;
        };
        let rep_job = &slots[rep].queue[0].job;
        let ready: Vec<bool> = slots
            .iter()
            .map(|s| s.queue.front().is_some_and(|e| std::ptr::eq(&e.job, rep_job) || compatible(rep_job, &e.job)))
            .collect();
        let count = ready.iter().filter(|&&r| r).count();
        if !delay.is_zero() && utilization > 0.0 {
            let oldest = slots.iter().filter_map(|s| s.queue.front()).map(|e| e.enqueued).min().unwrap_or(now);
            let full_enough = count as f32 / self.policy.max_batch_size.max(1) as f32 >= utilization;
            if !full_enough && now < oldest + delay {
                return Next::WaitUntil(oldest + delay);
            }
        }
        let last = ready.iter().rposition(|&r| r).unwrap_or(rep);
        let mut rows = Vec::with_capacity(last + 1);
        let mut released = Vec::new();
        for (s, &is_ready) in ready.iter().enumerate().take(last + 1) {
            let slot = &mut self.instances[instance].slots[s];
            let taken = if is_ready { slot.queue.pop_front() } else { None };
            match taken {
                Some(e) => {
                    if slot.closing && slot.queue.is_empty() {
                        released.push(s);
                    }
                    rows.push(Row::Request { job: e.job, slot: s, id: e.id, start: e.start, end: e.end });
                }
                None => rows.push(Row::Empty { slot: s }),
            }
        }
        for s in released {
            self.release(SlotRef { instance, slot: s }, now);
        }
        Next::Batch(rows)
    }

    /// Oldest: each slot's next request (one per sequence at a time) joins the instance's dynamic batch
    /// queue in arrival order; the queue forms batches with the preferred sizes and delay.
    fn next_oldest(&mut self, instance: usize, now: Instant, compatible: impl Fn(&J, &J) -> bool) -> Next<Row<J>> {
        let mut issue: Vec<(usize, Entry<J>)> = Vec::new();
        let mut released = Vec::new();
        for (s, slot) in self.instances[instance].slots.iter_mut().enumerate() {
            if slot.in_flight {
                continue;
            }
            if let Some(e) = slot.queue.pop_front() {
                slot.in_flight = true;
                if slot.closing && slot.queue.is_empty() {
                    released.push(s);
                }
                issue.push((s, e));
            }
        }
        issue.sort_by_key(|(_, e)| e.enqueued);
        for s in released {
            // The next owner's requests wait for `in_flight` to clear, so its state follows this one.
            self.release(SlotRef { instance, slot: s }, now);
        }
        let inst = &mut self.instances[instance];
        let Some(queue) = inst.issued.as_mut() else {
            return Next::Idle;
        };
        for (s, e) in issue {
            let enqueued = e.enqueued;
            // The queue has no bound of its own (the table bounds requests), so this cannot fail.
            let _ = queue.push((s, e), 1, 0, None, enqueued);
        }
        match queue.next_batch(now, |a, b| compatible(&a.1.job, &b.1.job)) {
            Next::Batch(taken) => {
                inst.running = taken.iter().map(|(s, _)| *s).collect();
                Next::Batch(
                    taken
                        .into_iter()
                        .map(|(slot, e)| Row::Request { job: e.job, slot, id: e.id, start: e.start, end: e.end })
                        .collect(),
                )
            }
            Next::WaitUntil(t) => Next::WaitUntil(t),
            Next::Idle => Next::Idle,
        }
    }

    /// Ends a sequence after the fact (an iterative sequence whose model released its request): it
    /// loses its slot once nothing of it is queued or running, and a later request on it needs START.
    pub fn end(&mut self, id: &SequenceId, now: Instant) {
        let Some(a) = self.active.remove(id) else { return };
        let slot = &mut self.instances[a.at.instance].slots[a.at.slot];
        slot.closing = true;
        if slot.queue.is_empty() && !slot.in_flight {
            self.release(a.at, now);
        }
    }

    /// The instance finished its batch: it may take the next one, and (oldest) its sequences may send
    /// their next requests.
    pub fn complete(&mut self, instance: usize, now: Instant) {
        let Some(inst) = self.instances.get_mut(instance) else { return };
        inst.busy = false;
        let running = std::mem::take(&mut inst.running);
        for s in running {
            self.instances[instance].slots[s].in_flight = false;
            // Expired while its last request ran: free it now.
            let slot = &self.instances[instance].slots[s];
            if slot.closing && slot.queue.is_empty() && slot.owner.is_some() && !self.owner_active(instance, s) {
                self.release(SlotRef { instance, slot: s }, now);
            }
        }
    }

    /// Whether the owner of a slot is still a running sequence (not ending or expired).
    fn owner_active(&self, instance: usize, slot: usize) -> bool {
        self.instances[instance].slots[slot]
            .owner
            .as_ref()
            .and_then(|id| self.active.get(id))
            .is_some_and(|a| a.at == SlotRef { instance, slot })
    }

    /// Empties every queue (the batcher is stopping); the requests are returned to be answered.
    pub fn drain_all(&mut self) -> Vec<J> {
        let mut out = Vec::with_capacity(self.queued);
        for inst in &mut self.instances {
            for slot in &mut inst.slots {
                out.extend(slot.queue.drain(..).map(|e| e.job));
            }
            if let Some(q) = inst.issued.as_mut() {
                out.extend(q.drain_all().into_iter().map(|(_, e)| e.job));
            }
        }
        for b in self.backlog.drain(..) {
            out.extend(b.entries.into_iter().map(|e| e.job));
        }
        self.active.clear();
        self.queued = 0;
        out
    }
}

/// A sequence id as Triton prints it in messages.
pub fn show(id: &SequenceId) -> String {
    match id {
        SequenceId::U64(v) => v.to_string(),
        SequenceId::Str(s) => s.clone(),
    }
}
