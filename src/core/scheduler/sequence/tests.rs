use super::policy::*;
use super::slots::*;
use super::*;
use crate::model_api::types::DataType;
use crate::model_api::SequenceId;
use crate::proto::inference::model_sequence_batching::control::Kind;
use crate::proto::inference::model_sequence_batching::{
    initial_state::StateData, Control, ControlInput, InitialState as ProtoInitial, State as ProtoState, StrategyChoice,
    StrategyDirect, StrategyOldest,
};
use crate::proto::inference::ModelSequenceBatching;
use std::time::Duration;

// ---- the slot table ----------------------------------------------------------------------------

fn u(v: u64) -> Option<SequenceId> {
    Some(SequenceId::U64(v))
}

fn direct(instances: usize, slots: usize) -> SlotTable<u32> {
    table(instances, slots, Strategy::Direct { max_queue_delay: Duration::ZERO, minimum_slot_utilization: 0.0 })
}

fn table(instances: usize, slots: usize, strategy: Strategy) -> SlotTable<u32> {
    SlotTable::new(SlotPolicy {
        model: "m".into(),
        instances,
        slots_per_instance: slots,
        max_idle: Duration::from_millis(100),
        strategy,
        max_batch_size: slots as u32,
        max_queue: 100,
    })
}

fn any(_: &u32, _: &u32) -> bool {
    true
}

/// The rows of a batch as (slot, job) with `None` jobs for padding rows.
fn rows(n: Next<Row<u32>>) -> Vec<(usize, Option<u32>)> {
    match n {
        Next::Batch(rows) => rows
            .into_iter()
            .map(|r| match r {
                Row::Request { job, slot, .. } => (slot, Some(job)),
                Row::Empty { slot } => (slot, None),
            })
            .collect(),
        other => panic!("expected a batch, got {other:?}"),
    }
}

fn ok(t: &mut SlotTable<u32>, job: u32, id: u64, start: bool, end: bool, now: Instant) {
    t.submit(job, u(id), start, end, 1, now).unwrap_or_else(|(_, e)| panic!("{}", e.message));
}

fn err(t: &mut SlotTable<u32>, id: Option<SequenceId>, start: bool, batch: u32, now: Instant) -> Error {
    t.submit(0, id, start, false, batch, now).map(|_| ()).unwrap_err().1
}

#[test]
fn new_sequences_spread_over_instances_then_fill_slots() {
    let t0 = Instant::now();
    let mut t = direct(2, 2);
    for id in 1..=4 {
        ok(&mut t, id as u32, id, true, false, t0);
    }
    let at = |t: &SlotTable<u32>, id| t.slot_of(&SequenceId::U64(id)).unwrap();
    assert_eq!((at(&t, 1).instance, at(&t, 1).slot), (0, 0));
    assert_eq!((at(&t, 2).instance, at(&t, 2).slot), (1, 0));
    assert_eq!((at(&t, 3).instance, at(&t, 3).slot), (0, 1));
    assert_eq!((at(&t, 4).instance, at(&t, 4).slot), (1, 1));
    // Later requests follow their sequence.
    ok(&mut t, 10, 3, false, false, t0);
    assert_eq!(rows(t.next_batch(0, t0, any)), vec![(0, Some(1)), (1, Some(3))]);
}

#[test]
fn a_request_without_id_or_start_or_with_a_batch_is_refused_in_tritons_words() {
    let t0 = Instant::now();
    let mut t = direct(1, 2);
    let e = err(&mut t, None, true, 1, t0);
    assert_eq!(e.kind, crate::error::ErrorKind::InvalidArgument);
    assert_eq!(e.message, "inference request to model 'm' must specify a non-zero or non-empty correlation ID");
    let e = err(&mut t, u(7), false, 1, t0);
    assert_eq!(
        e.message,
        "inference request for sequence 7 to model 'm' must specify the START flag on the first request of the sequence"
    );
    let e = err(&mut t, Some(SequenceId::Str("abc".into())), false, 1, t0);
    assert!(e.message.starts_with("inference request for sequence abc to model 'm'"), "{}", e.message);
    let e = err(&mut t, u(7), true, 2, t0);
    assert_eq!(
        e.message,
        "inference request to model 'm' must specify batch-size 1 due to requirements of sequence batcher"
    );
    assert_eq!(t.queued(), 0);
}

#[test]
fn an_ended_sequence_is_unknown_and_its_slot_is_reused() {
    let t0 = Instant::now();
    let mut t = direct(1, 1);
    ok(&mut t, 1, 5, true, false, t0);
    ok(&mut t, 2, 5, false, true, t0);
    // The END is queued: the id is forgotten at once, as in Triton.
    assert!(t.slot_of(&SequenceId::U64(5)).is_none());
    assert!(err(&mut t, u(5), false, 1, t0).message.contains("START flag"));
    // A new sequence waits for the slot, which frees when the END leaves.
    ok(&mut t, 3, 6, true, false, t0);
    assert!(t.in_backlog(&SequenceId::U64(6)));
    assert_eq!(rows(t.next_batch(0, t0, any)), vec![(0, Some(1))]);
    t.complete(0, t0);
    assert_eq!(rows(t.next_batch(0, t0, any)), vec![(0, Some(2))]);
    // Taking the END freed the slot and handed it to the backlogged sequence.
    assert_eq!(t.slot_of(&SequenceId::U64(6)).map(|s| s.slot), Some(0));
    t.complete(0, t0);
    assert_eq!(rows(t.next_batch(0, t0, any)), vec![(0, Some(3))]);
}

#[test]
fn backlogged_sequences_collect_their_requests_and_get_slots_in_order() {
    let t0 = Instant::now();
    let mut t = direct(1, 1);
    ok(&mut t, 1, 1, true, true, t0); // a one-request sequence holds the slot until it runs
    ok(&mut t, 2, 2, true, false, t0);
    ok(&mut t, 3, 3, true, false, t0);
    ok(&mut t, 4, 2, false, false, t0);
    ok(&mut t, 5, 2, false, true, t0);
    ok(&mut t, 6, 3, false, false, t0);
    assert_eq!(t.backlog_len(), 2);
    assert_eq!(t.queued(), 6);
    let mut order = Vec::new();
    while let Next::Batch(_) = {
        let n = t.next_batch(0, t0, any);
        if let Next::Batch(r) = &n {
            order.extend(r.iter().filter_map(|r| match r {
                Row::Request { job, .. } => Some(*job),
                Row::Empty { .. } => None,
            }));
        }
        n
    } {
        t.complete(0, t0);
    }
    // Sequence 2 runs to its END before sequence 3 gets the slot.
    assert_eq!(order, vec![1, 2, 4, 5, 3, 6]);
    assert_eq!(t.slot_of(&SequenceId::U64(3)).map(|s| s.slot), Some(0));
    assert_eq!(t.queued(), 0);
}

#[test]
fn direct_batches_pad_idle_slots_below_the_last_ready_one() {
    let t0 = Instant::now();
    let mut t = direct(1, 4);
    for id in 1..=3 {
        ok(&mut t, id as u32, id, true, false, t0);
    }
    assert_eq!(rows(t.next_batch(0, t0, any)), vec![(0, Some(1)), (1, Some(2)), (2, Some(3))]);
    assert!(!t.is_idle(0));
    // Busy: nothing more until the batch completes.
    ok(&mut t, 13, 3, false, false, t0);
    assert!(matches!(t.next_batch(0, t0, any), Next::Idle));
    t.complete(0, t0);
    // Only slot 2 has a request: slots 0 and 1 are padding so it stays in row 2.
    assert_eq!(rows(t.next_batch(0, t0, any)), vec![(0, None), (1, None), (2, Some(13))]);
}

#[test]
fn direct_waits_for_slot_utilization_up_to_the_queue_delay() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let mut t = table(1, 4, Strategy::Direct { max_queue_delay: ms(10), minimum_slot_utilization: 0.5 });
    ok(&mut t, 1, 1, true, false, t0);
    match t.next_batch(0, t0, any) {
        Next::WaitUntil(due) => assert_eq!(due, t0 + ms(10)),
        other => panic!("expected to wait, got {other:?}"),
    }
    // Two of four slots ready reaches the 0.5 utilization: leave at once.
    ok(&mut t, 2, 2, true, false, t0 + ms(1));
    assert_eq!(rows(t.next_batch(0, t0 + ms(1), any)), vec![(0, Some(1)), (1, Some(2))]);
    t.complete(0, t0 + ms(2));
    ok(&mut t, 3, 1, false, false, t0 + ms(2));
    assert!(matches!(t.next_batch(0, t0 + ms(5), any), Next::WaitUntil(_)));
    assert_eq!(rows(t.next_batch(0, t0 + ms(12), any)), vec![(0, Some(3))]);
}

#[test]
fn direct_leaves_an_incompatible_request_for_a_later_batch() {
    let t0 = Instant::now();
    let mut t = direct(1, 3);
    ok(&mut t, 10, 1, true, false, t0);
    ok(&mut t, 20, 2, true, false, t0);
    ok(&mut t, 11, 3, true, false, t0);
    let same_decade = |a: &u32, b: &u32| a / 10 == b / 10;
    assert_eq!(rows(t.next_batch(0, t0, same_decade)), vec![(0, Some(10)), (1, None), (2, Some(11))]);
    t.complete(0, t0);
    assert_eq!(rows(t.next_batch(0, t0, same_decade)), vec![(0, None), (1, Some(20))]);
}

#[test]
fn idle_sequences_are_released_and_then_explained() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let mut t = direct(1, 1);
    ok(&mut t, 1, 1, true, false, t0);
    assert_eq!(t.next_deadline(), Some(t0 + ms(100)));
    ok(&mut t, 2, 2, true, false, t0 + ms(10)); // backlogged
    assert_eq!(rows(t.next_batch(0, t0, any)), vec![(0, Some(1))]);
    t.complete(0, t0 + ms(1));
    // A request refreshes the idle clock.
    ok(&mut t, 3, 1, false, false, t0 + ms(50));
    t.expire_idle(t0 + ms(120));
    assert!(t.slot_of(&SequenceId::U64(1)).is_some());
    assert_eq!(rows(t.next_batch(0, t0 + ms(120), any)), vec![(0, Some(3))]);
    t.complete(0, t0 + ms(121));
    t.expire_idle(t0 + ms(150));
    // Released: the backlogged sequence takes the slot, with a fresh idle clock.
    assert!(t.slot_of(&SequenceId::U64(1)).is_none());
    assert_eq!(t.slot_of(&SequenceId::U64(2)).map(|s| s.slot), Some(0));
    assert_eq!(t.next_deadline(), Some(t0 + ms(250)));
    let e = err(&mut t, u(1), false, 1, t0 + ms(151));
    assert!(e.message.contains("must specify the START flag"), "{}", e.message);
    assert!(e.message.contains("max_sequence_idle_microseconds"), "{}", e.message);
    // A new START with the same id is a new sequence.
    ok(&mut t, 4, 1, true, false, t0 + ms(152));
    assert!(t.in_backlog(&SequenceId::U64(1)));
}

#[test]
fn an_expired_sequence_runs_its_queued_requests_before_the_slot_is_freed() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let mut t = direct(1, 1);
    ok(&mut t, 1, 1, true, false, t0);
    ok(&mut t, 2, 1, false, false, t0);
    ok(&mut t, 3, 9, true, false, t0);
    t.expire_idle(t0 + ms(200));
    assert!(t.slot_of(&SequenceId::U64(1)).is_none());
    assert_eq!(rows(t.next_batch(0, t0 + ms(200), any)), vec![(0, Some(1))]);
    t.complete(0, t0 + ms(200));
    assert_eq!(rows(t.next_batch(0, t0 + ms(200), any)), vec![(0, Some(2))]);
    t.complete(0, t0 + ms(200));
    assert_eq!(rows(t.next_batch(0, t0 + ms(200), any)), vec![(0, Some(3))]);
}

#[test]
fn a_restart_stays_in_its_slot() {
    let t0 = Instant::now();
    let mut t = direct(1, 2);
    ok(&mut t, 1, 1, true, false, t0);
    let before = t.slot_of(&SequenceId::U64(1));
    ok(&mut t, 2, 1, true, false, t0);
    assert_eq!(t.slot_of(&SequenceId::U64(1)), before);
    assert_eq!(t.backlog_len(), 0);
}

#[test]
fn the_queue_bound_is_explicit_back_pressure() {
    let t0 = Instant::now();
    let mut t = SlotTable::new(SlotPolicy {
        model: "m".into(),
        instances: 1,
        slots_per_instance: 1,
        max_idle: Duration::from_secs(1),
        strategy: Strategy::Direct { max_queue_delay: Duration::ZERO, minimum_slot_utilization: 0.0 },
        max_batch_size: 1,
        max_queue: 2,
    });
    ok(&mut t, 1, 1, true, false, t0);
    ok(&mut t, 2, 1, false, false, t0);
    let e = err(&mut t, u(1), false, 1, t0);
    assert_eq!(e.kind, crate::error::ErrorKind::Unavailable);
    assert!(e.message.contains("maximum queue size"), "{}", e.message);
}

fn oldest(instances: usize, candidates: usize, max_batch: u32, preferred: &[u32], delay_ms: u64) -> SlotTable<u32> {
    SlotTable::new(SlotPolicy {
        model: "m".into(),
        instances,
        slots_per_instance: candidates,
        max_idle: Duration::from_secs(1),
        strategy: Strategy::Oldest { preferred: preferred.to_vec(), max_queue_delay: Duration::from_millis(delay_ms) },
        max_batch_size: max_batch,
        max_queue: 100,
    })
}

#[test]
fn oldest_batches_one_request_per_sequence_oldest_first() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let mut t = oldest(1, 4, 2, &[], 0);
    ok(&mut t, 10, 1, true, false, t0);
    ok(&mut t, 11, 1, false, false, t0 + ms(1));
    ok(&mut t, 20, 2, true, false, t0 + ms(2));
    ok(&mut t, 30, 3, true, false, t0 + ms(3));
    // At most max_batch_size (2) requests, never two of one sequence; no padding rows.
    assert_eq!(rows(t.next_batch(0, t0 + ms(4), any)), vec![(0, Some(10)), (1, Some(20))]);
    t.complete(0, t0 + ms(5));
    // Sequence 3 was issued before sequence 1's second request, so it goes first.
    assert_eq!(rows(t.next_batch(0, t0 + ms(5), any)), vec![(2, Some(30)), (0, Some(11))]);
}

#[test]
fn oldest_waits_for_a_preferred_size_up_to_the_delay() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let mut t = oldest(1, 4, 4, &[2], 10);
    ok(&mut t, 1, 1, true, false, t0);
    assert!(matches!(t.next_batch(0, t0, any), Next::WaitUntil(d) if d == t0 + ms(10)));
    ok(&mut t, 2, 2, true, false, t0 + ms(1));
    assert_eq!(rows(t.next_batch(0, t0 + ms(1), any)), vec![(0, Some(1)), (1, Some(2))]);
    t.complete(0, t0 + ms(2));
    ok(&mut t, 3, 1, false, false, t0 + ms(2));
    assert_eq!(rows(t.next_batch(0, t0 + ms(12), any)), vec![(0, Some(3))]);
}

#[test]
fn oldest_hands_an_ended_candidate_to_the_backlog_after_its_last_request() {
    let t0 = Instant::now();
    let mut t = oldest(1, 1, 4, &[], 0);
    ok(&mut t, 1, 1, true, true, t0);
    ok(&mut t, 2, 2, true, false, t0);
    assert_eq!(t.backlog_len(), 1);
    assert_eq!(rows(t.next_batch(0, t0, any)), vec![(0, Some(1))]);
    // The slot went to sequence 2 when the END was issued...
    assert_eq!(t.slot_of(&SequenceId::U64(2)).map(|s| s.slot), Some(0));
    t.complete(0, t0);
    // ...but its first request runs only after the END completed.
    assert_eq!(rows(t.next_batch(0, t0, any)), vec![(0, Some(2))]);
}

#[test]
fn oldest_frees_a_candidate_that_expired_while_running() {
    let t0 = Instant::now();
    let mut t = oldest(1, 1, 4, &[], 0);
    ok(&mut t, 1, 1, true, false, t0);
    assert_eq!(rows(t.next_batch(0, t0, any)), vec![(0, Some(1))]);
    ok(&mut t, 2, 2, true, false, t0);
    t.expire_idle(t0 + Duration::from_secs(2));
    // Still running: the slot is not given away yet.
    assert!(t.slot_of(&SequenceId::U64(2)).is_none());
    t.complete(0, t0 + Duration::from_secs(2));
    assert_eq!(t.slot_of(&SequenceId::U64(2)).map(|s| s.slot), Some(0));
    assert_eq!(rows(t.next_batch(0, t0 + Duration::from_secs(2), any)), vec![(0, Some(2))]);
}

#[test]
fn drain_returns_every_queued_request() {
    let t0 = Instant::now();
    let mut t = oldest(1, 1, 4, &[2], 1000);
    ok(&mut t, 1, 1, true, false, t0);
    ok(&mut t, 2, 1, false, false, t0);
    ok(&mut t, 3, 2, true, false, t0);
    assert!(matches!(t.next_batch(0, t0, any), Next::WaitUntil(_)));
    let mut all = t.drain_all();
    all.sort_unstable();
    assert_eq!(all, vec![1, 2, 3]);
    assert_eq!(t.queued(), 0);
}

#[test]
fn ending_a_sequence_after_its_request_ran_frees_its_slot_for_the_backlog() {
    // An iterative sequence: its request runs, is rescheduled (submitted again without START), runs,
    // and ends once its model releases it; the backlogged sequence then gets the slot.
    for mut t in [direct(1, 1), oldest(1, 1, 1, &[], 0)] {
        let t0 = Instant::now();
        ok(&mut t, 1, 1, true, false, t0);
        ok(&mut t, 2, 2, true, false, t0);
        assert_eq!(t.backlog_len(), 1);
        assert_eq!(rows(t.next_batch(0, t0, any)), vec![(0, Some(1))]);
        ok(&mut t, 1, 1, false, false, t0);
        t.complete(0, t0);
        assert_eq!(rows(t.next_batch(0, t0, any)), vec![(0, Some(1))]);
        t.end(&SequenceId::U64(1), t0);
        t.complete(0, t0);
        assert_eq!(t.slot_of(&SequenceId::U64(2)).map(|s| s.slot), Some(0));
        assert_eq!(rows(t.next_batch(0, t0, any)), vec![(0, Some(2))]);
        assert!(err(&mut t, u(1), false, 1, t0).message.contains("must specify the START flag"));
    }
}

#[test]
fn iterative_sequences_are_read_from_the_configuration() {
    let cfg = ModelConfig { name: "m".into(), max_batch_size: 4, ..Default::default() };
    let s = ModelSequenceBatching { iterative_sequence: true, ..Default::default() };
    let p = SequencePolicy::from_config(&cfg, &s, Path::new("/nonexistent")).unwrap();
    assert!(p.iterative);
    assert_eq!(p.slots_per_instance, 4);
}

// ---- the configuration and the tensors it produces ---------------------------------------------

fn flag(kind: Kind, int32: &[i32], fp32: &[f32]) -> Control {
    Control {
        kind: kind as i32,
        int32_false_true: int32.to_vec(),
        fp32_false_true: fp32.to_vec(),
        ..Default::default()
    }
}

fn control(name: &str, c: Control) -> ControlInput {
    ControlInput { name: name.into(), control: vec![c] }
}

fn model(max_batch_size: i32, s: ModelSequenceBatching) -> ModelConfig {
    ModelConfig {
        name: "m".into(),
        max_batch_size,
        scheduling_choice: Some(SchedulingChoice::SequenceBatching(s.clone())),
        ..Default::default()
    }
}

use crate::proto::inference::model_config::SchedulingChoice;

fn read(cfg: &ModelConfig) -> Result<SequencePolicy> {
    let Some(SchedulingChoice::SequenceBatching(s)) = &cfg.scheduling_choice else { unreachable!() };
    SequencePolicy::from_config(cfg, s, Path::new("/nonexistent"))
}

use std::path::Path;

fn controls_config() -> ModelSequenceBatching {
    ModelSequenceBatching {
        control_input: vec![
            control("S", flag(Kind::ControlSequenceStart, &[0, 1], &[])),
            control("E", flag(Kind::ControlSequenceEnd, &[], &[-1.0, 2.5])),
            control(
                "R",
                Control {
                    kind: Kind::ControlSequenceReady as i32,
                    bool_false_true: vec![false, true],
                    ..Default::default()
                },
            ),
            control(
                "C",
                Control {
                    kind: Kind::ControlSequenceCorrid as i32,
                    data_type: DataType::Uint64.to_config(),
                    ..Default::default()
                },
            ),
        ],
        ..Default::default()
    }
}

fn values(t: &Tensor) -> Vec<u8> {
    t.data.to_host().unwrap().to_vec()
}

#[test]
fn defaults_follow_triton() {
    let p = read(&model(4, ModelSequenceBatching::default())).unwrap();
    assert_eq!(p.max_idle, Duration::from_secs(1));
    assert_eq!(p.slots_per_instance, 4);
    assert!(matches!(p.strategy, Strategy::Direct { .. }));
    let p = read(&model(0, ModelSequenceBatching::default())).unwrap();
    assert_eq!(p.slots_per_instance, 1);
    let s = ModelSequenceBatching {
        max_sequence_idle_microseconds: 250,
        strategy_choice: Some(StrategyChoice::Oldest(StrategyOldest {
            max_candidate_sequences: 6,
            preferred_batch_size: vec![4, 2, 4],
            max_queue_delay_microseconds: 70,
            ..Default::default()
        })),
        ..Default::default()
    };
    let p = read(&model(4, s)).unwrap();
    assert_eq!(p.max_idle, Duration::from_micros(250));
    assert_eq!(p.slots_per_instance, 6);
    assert_eq!(p.strategy, Strategy::Oldest { preferred: vec![2, 4], max_queue_delay: Duration::from_micros(70) });
    let s = ModelSequenceBatching {
        strategy_choice: Some(StrategyChoice::Direct(StrategyDirect {
            max_queue_delay_microseconds: 5,
            minimum_slot_utilization: 0.5,
        })),
        ..Default::default()
    };
    assert_eq!(
        read(&model(2, s)).unwrap().strategy,
        Strategy::Direct { max_queue_delay: Duration::from_micros(5), minimum_slot_utilization: 0.5 }
    );
}

#[test]
fn control_values_take_the_configured_types_and_shapes() {
    let p = read(&model(4, controls_config())).unwrap();
    let id = SequenceId::U64(0x0102_0304_0506_0708);
    let t = p.row_controls(RowSignals { ready: true, start: true, end: false, corrid: Some(&id) });
    let names: Vec<&str> = t.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["S", "E", "R", "C"]);
    assert!(t.iter().all(|t| t.shape == vec![1, 1]));
    assert_eq!((t[0].datatype, values(&t[0])), (DataType::Int32, 1i32.to_le_bytes().to_vec()));
    assert_eq!((t[1].datatype, values(&t[1])), (DataType::Fp32, (-1.0f32).to_le_bytes().to_vec()));
    assert_eq!((t[2].datatype, values(&t[2])), (DataType::Bool, vec![1]));
    assert_eq!((t[3].datatype, values(&t[3])), (DataType::Uint64, 0x0102_0304_0506_0708u64.to_le_bytes().to_vec()));
    // A padding row: not ready, and CORRID 0.
    let t = p.row_controls(RowSignals { ready: false, start: false, end: false, corrid: None });
    assert_eq!(values(&t[0]), 0i32.to_le_bytes().to_vec());
    assert_eq!(values(&t[1]), (-1.0f32).to_le_bytes().to_vec());
    assert_eq!(values(&t[2]), vec![0]);
    assert_eq!(values(&t[3]), vec![0; 8]);
    // END true with fp32 values; no batch dimension without batching.
    let p = read(&model(0, controls_config())).unwrap();
    let t = p.row_controls(RowSignals { ready: true, start: false, end: true, corrid: Some(&id) });
    assert_eq!(t[1].shape, vec![1]);
    assert_eq!(values(&t[1]), 2.5f32.to_le_bytes().to_vec());
}

#[test]
fn corrid_types_and_string_ids() {
    let with_corrid = |dt: DataType| {
        let mut s = ModelSequenceBatching::default();
        s.control_input.push(control(
            "C",
            Control { kind: Kind::ControlSequenceCorrid as i32, data_type: dt.to_config(), ..Default::default() },
        ));
        read(&model(1, s))
    };
    let p = with_corrid(DataType::Bytes).unwrap();
    let text = SequenceId::Str("abc".into());
    let t = p.row_controls(RowSignals { ready: true, start: false, end: false, corrid: Some(&text) });
    assert_eq!(values(&t[0]), serialize_bytes(["abc"]).to_vec());
    let t = p.row_controls(RowSignals { ready: true, start: false, end: false, corrid: Some(&SequenceId::U64(42)) });
    assert_eq!(values(&t[0]), serialize_bytes(["42"]).to_vec());
    assert!(p.check_corrid("m", &text).is_ok());
    let p = with_corrid(DataType::Int32).unwrap();
    let t = p.row_controls(RowSignals { ready: true, start: false, end: false, corrid: Some(&SequenceId::U64(7)) });
    assert_eq!(values(&t[0]), 7i32.to_le_bytes().to_vec());
    let e = p.check_corrid("m", &text).unwrap_err();
    assert!(e.message.contains("'abc' is a string") && e.message.contains("'C'"), "{}", e.message);
    let e = with_corrid(DataType::Fp32).unwrap_err();
    assert!(e.message.starts_with("unexpected control data type, expected TYPE_UINT64"), "{}", e.message);
}

use crate::model_api::types::serialize_bytes;

#[test]
fn bad_controls_are_refused_in_tritons_words() {
    let check = |c: Vec<ControlInput>, expected: &str| {
        let e = read(&model(4, ModelSequenceBatching { control_input: c, ..Default::default() })).unwrap_err();
        assert_eq!(e.message, expected);
    };
    check(
        vec![control("S", flag(Kind::ControlSequenceStart, &[], &[]))],
        "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for \
         CONTROL_SEQUENCE_START for m",
    );
    check(
        vec![control("S", flag(Kind::ControlSequenceStart, &[0, 1], &[0.0, 1.0]))],
        "sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' and \
         'bool_false_true' for CONTROL_SEQUENCE_START for m",
    );
    check(
        vec![control("S", flag(Kind::ControlSequenceEnd, &[0, 1, 2], &[]))],
        "sequence batching control 'int32_false_true' must have exactly 2 entries for CONTROL_SEQUENCE_END for m",
    );
    check(
        vec![
            control("A", flag(Kind::ControlSequenceReady, &[0, 1], &[])),
            control("B", flag(Kind::ControlSequenceReady, &[0, 1], &[])),
        ],
        "sequence batching specifies multiple CONTROL_SEQUENCE_READY tensors for m",
    );
    check(
        vec![
            control("A", flag(Kind::ControlSequenceReady, &[0, 1], &[])),
            control("A", flag(Kind::ControlSequenceStart, &[0, 1], &[])),
        ],
        "sequence batching control tensor 'A' is specified for multiple control kinds for m",
    );
    check(
        vec![control("", flag(Kind::ControlSequenceReady, &[0, 1], &[]))],
        "sequence batching control tensor must have a name for m",
    );
}

fn state(initial: Option<ProtoInitial>) -> ProtoState {
    ProtoState {
        input_name: "IN".into(),
        output_name: "OUT".into(),
        data_type: DataType::Int32.to_config(),
        dims: vec![-1, 2],
        initial_state: initial.into_iter().collect(),
        ..Default::default()
    }
}

fn initial(dims: &[i64], data: StateData) -> ProtoInitial {
    ProtoInitial {
        data_type: DataType::Int32.to_config(),
        dims: dims.to_vec(),
        state_data: Some(data),
        name: "init".into(),
    }
}

#[test]
fn initial_state_from_zeros_or_a_file() {
    let p = read(&model(4, ModelSequenceBatching { state: vec![state(None)], ..Default::default() })).unwrap();
    // Without initial_state: zeros, variable dimensions 1, plus the batch dimension.
    let t = p.states[0].initial_tensor(true);
    assert_eq!((t.name.as_str(), t.shape.clone(), values(&t)), ("IN", vec![1, 1, 2], vec![0; 8]));

    let s = state(Some(initial(&[3, 2], StateData::ZeroData(true))));
    let p = read(&model(0, ModelSequenceBatching { state: vec![s], ..Default::default() })).unwrap();
    let t = p.states[0].initial_tensor(false);
    assert_eq!((t.shape.clone(), values(&t)), (vec![3, 2], vec![0; 24]));

    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("initial_state")).unwrap();
    let data: Vec<u8> = [1i32, 2, 3, 4, 99].iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(dir.path().join("initial_state/init.bin"), &data).unwrap();
    let s = state(Some(initial(&[2, 2], StateData::DataFile("init.bin".into()))));
    let cfg = model(4, ModelSequenceBatching { state: vec![s], ..Default::default() });
    let p = SequencePolicy::from_model(&cfg, dir.path()).unwrap().unwrap();
    let t = p.states[0].initial_tensor(true);
    // Only the bytes the dims need are used.
    assert_eq!((t.shape.clone(), values(&t)), (vec![1, 2, 2], data[..16].to_vec()));

    // A file that is too short, or missing.
    let s = state(Some(initial(&[3, 2], StateData::DataFile("init.bin".into()))));
    let cfg = model(4, ModelSequenceBatching { state: vec![s], ..Default::default() });
    let e = SequencePolicy::from_model(&cfg, dir.path()).unwrap_err();
    assert_eq!(
        e.message,
        "initial_state setting expects 24 bytes, but the data provided from init.bin only has 20 bytes."
    );
    let s = state(Some(initial(&[2, 2], StateData::DataFile("nope.bin".into()))));
    let cfg = model(4, ModelSequenceBatching { state: vec![s], ..Default::default() });
    assert!(SequencePolicy::from_model(&cfg, dir.path()).unwrap_err().message.contains("nope.bin"));
    let s = state(Some(initial(&[2, 2], StateData::DataFile("../escape".into()))));
    let cfg = model(4, ModelSequenceBatching { state: vec![s], ..Default::default() });
    assert!(SequencePolicy::from_model(&cfg, dir.path()).is_err());
}

#[test]
fn bad_initial_states_are_refused_in_tritons_words() {
    let check = |s: ProtoState, expected: &str| {
        let e = read(&model(4, ModelSequenceBatching { state: vec![s], ..Default::default() })).unwrap_err();
        assert_eq!(e.message, expected);
    };
    let mut s = state(Some(initial(&[1, 2], StateData::ZeroData(true))));
    s.initial_state[0].data_type = DataType::Fp32.to_config();
    check(s, "The data type used for 'initial_state' field of state 'IN' does not match the state data type.");
    let mut s = state(Some(initial(&[1, 2], StateData::ZeroData(true))));
    s.initial_state[0].name.clear();
    check(s, "Field 'name' must be set when using initial_state for state input 'IN'.");
    check(
        state(Some(initial(&[2], StateData::ZeroData(true)))),
        "Number of dimensions in 'initial_state' doesn't match the size of 'state' dimensions for state input 'IN'. \
         1 != 2",
    );
    check(
        state(Some(initial(&[-1, 2], StateData::ZeroData(true)))),
        "'initial_state' field for state input name 'IN' contains variable dimensions.",
    );
    check(
        state(Some(initial(&[1, 3], StateData::ZeroData(true)))),
        "'initial_state' dim for input name 'IN' doesn't match 'state' dim description. 3 != 2",
    );
    let mut s = state(Some(initial(&[1, 2], StateData::ZeroData(true))));
    s.initial_state[0].state_data = None;
    check(s, "initial_state setting expects state'IN' to have state_data set");
    let mut s = state(None);
    s.initial_state = vec![initial(&[1, 2], StateData::ZeroData(true)); 2];
    check(s, "initial_state field for state input 'IN' must contain exactly one or zero element. Found '2' elements.");
    let e = read(&model(4, ModelSequenceBatching { state: vec![state(None), state(None)], ..Default::default() }))
        .unwrap_err();
    assert_eq!(e.message, "State input name 'IN' specified more than once.");
}

#[test]
fn hidden_tensors_list_controls_and_state() {
    let mut s = controls_config();
    s.state.push(state(None));
    let hidden = hidden_tensors(&model(4, s));
    assert!(hidden.is_input("IN") && hidden.is_input("S") && !hidden.is_input("OUT") && hidden.is_output("OUT"));
    assert_eq!(
        hidden.inputs,
        vec![
            ("S".to_string(), DataType::Int32),
            ("E".to_string(), DataType::Fp32),
            ("R".to_string(), DataType::Bool),
            ("C".to_string(), DataType::Uint64),
            ("IN".to_string(), DataType::Int32),
        ]
    );
    assert_eq!(hidden.outputs, vec![("OUT".to_string(), DataType::Int32)]);
    assert_eq!(hidden_tensors(&ModelConfig::default()), HiddenTensors::default());
}

// ---- the driver's row helpers --------------------------------------------------------------------

#[test]
fn padding_rows_copy_the_template_with_ready_false_and_zero_state() {
    let mut s = controls_config();
    s.state.push(state(None));
    let p = read(&model(4, s)).unwrap();
    let id = SequenceId::U64(3);
    let mut inputs = vec![Tensor::new("X", DataType::Int32, vec![1, 1], 5i32.to_le_bytes().to_vec())];
    inputs.extend(p.row_controls(RowSignals { ready: true, start: true, end: false, corrid: Some(&id) }));
    inputs.push(Tensor::new("IN", DataType::Int32, vec![1, 1, 2], [7i32, 8].map(i32::to_le_bytes).concat()));
    let template = ExecRequest { inputs, outputs: vec!["Y".into(), "OUT".into()], ..Default::default() };
    let pad = padding(&p, &template);
    let get = |n: &str| pad.inputs.iter().find(|t| t.name == n).unwrap();
    assert_eq!(values(get("X")), 5i32.to_le_bytes().to_vec());
    assert_eq!(values(get("S")), 0i32.to_le_bytes().to_vec());
    assert_eq!(values(get("R")), vec![0]);
    assert_eq!(values(get("C")), vec![0; 8]);
    assert_eq!((get("IN").shape.clone(), values(get("IN"))), (vec![1, 1, 2], vec![0; 8]));
    assert_eq!(pad.outputs, template.outputs);
}

#[test]
fn state_outputs_are_kept_and_hidden_unless_asked_for() {
    let p = read(&model(4, ModelSequenceBatching { state: vec![state(None)], ..Default::default() })).unwrap();
    let part = ExecResult {
        outputs: vec![
            Tensor::new("Y", DataType::Int32, vec![1, 1], 1i32.to_le_bytes().to_vec()),
            Tensor::new("OUT", DataType::Int32, vec![1, 1, 2], [3i32, 4].map(i32::to_le_bytes).concat()),
        ],
        timings: Default::default(),
        parameters: Default::default(),
    };
    let (client, kept) = split_state(&p, &["Y".to_string()], part.clone());
    assert_eq!(client.outputs.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["Y"]);
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].name, "IN");
    let (client, _) = split_state(&p, &["OUT".to_string(), "Y".to_string()], part);
    // Listed as an output and asked for: the client gets it too (split already ordered the outputs).
    assert_eq!(client.outputs.len(), 2);
}

#[test]
fn a_second_sequence_waits_in_the_backlog_while_the_first_holds_the_only_slot() {
    let t0 = Instant::now();
    let mut t = direct(1, 1);
    ok(&mut t, 1, 7, true, false, t0);
    assert_eq!(rows(t.next_batch(0, t0, any)), vec![(0, Some(1))]);
    t.complete(0, t0);
    ok(&mut t, 2, 8, true, false, t0);
    assert!(matches!(t.next_batch(0, t0, any), Next::Idle), "sequence 8 waits for the slot");
    ok(&mut t, 3, 7, false, false, t0);
    assert_eq!(rows(t.next_batch(0, t0, any)), vec![(0, Some(3))]);
}
