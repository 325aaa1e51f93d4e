use super::*;

/// A policy with one level and no timeouts.
fn policy(max: u32, preferred: &[u32], delay_us: u64) -> BatchPolicy {
    BatchPolicy {
        max_batch_size: max,
        preferred: preferred.to_vec(),
        max_queue_delay: Duration::from_micros(delay_us),
        levels: vec![LevelPolicy::from_proto(None)],
        default_level: 1,
    }
}

fn any(_: &u32, _: &u32) -> bool {
    true
}

fn batch(n: Next<u32>) -> Vec<u32> {
    match n {
        Next::Batch(b) => b,
        other => panic!("expected a batch, got {other:?}"),
    }
}

#[test]
fn without_delay_everything_queued_leaves_at_once() {
    let t = Instant::now();
    let mut q = BatchQueue::new(policy(8, &[], 0));
    assert!(matches!(q.next_batch(t, any), Next::Idle));
    for i in 0..3 {
        q.push(i, 1, 0, None, t).unwrap();
    }
    assert_eq!(batch(q.next_batch(t, any)), vec![0, 1, 2]);
    assert!(q.is_empty());
}

#[test]
fn batches_never_exceed_max_batch_size() {
    let t = Instant::now();
    let mut q = BatchQueue::new(policy(4, &[], 0));
    for (i, size) in [2u32, 1, 2, 3].into_iter().enumerate() {
        q.push(i as u32, size, 0, None, t).unwrap();
    }
    // 2 + 1 fit, the next 2 would make 5: the batch leaves with 3 inferences.
    assert_eq!(batch(q.next_batch(t, any)), vec![0, 1]);
    assert_eq!(batch(q.next_batch(t, any)), vec![2]);
    assert_eq!(batch(q.next_batch(t, any)), vec![3]);
}

#[test]
fn a_delay_holds_a_small_batch_until_it_is_due() {
    let t = Instant::now();
    let mut q = BatchQueue::new(policy(8, &[4], 1000));
    q.push(0, 1, 0, None, t).unwrap();
    q.push(1, 1, 0, None, t).unwrap();
    match q.next_batch(t, any) {
        Next::WaitUntil(due) => assert_eq!(due, t + Duration::from_micros(1000)),
        other => panic!("expected to wait, got {other:?}"),
    }
    assert_eq!(batch(q.next_batch(t + Duration::from_micros(1000), any)), vec![0, 1]);
}

#[test]
fn a_preferred_size_leaves_without_waiting() {
    let t = Instant::now();
    let mut q = BatchQueue::new(policy(8, &[2, 4], 1_000_000));
    for i in 0..4 {
        q.push(i, 1, 0, None, t).unwrap();
    }
    assert_eq!(batch(q.next_batch(t, any)), vec![0, 1, 2, 3]);
    for i in 0..3 {
        q.push(i, 1, 0, None, t).unwrap();
    }
    // 3 is not preferred: wait for more or for the delay.
    assert!(matches!(q.next_batch(t, any), Next::WaitUntil(_)));
}

#[test]
fn a_blocked_batch_is_cut_at_the_largest_preferred_size() {
    let t = Instant::now();
    let mut q = BatchQueue::new(policy(4, &[2], 1_000_000));
    for (i, size) in [1u32, 1, 1, 2].into_iter().enumerate() {
        q.push(i as u32, size, 0, None, t).unwrap();
    }
    // 1+1+1 = 3 and the next (2) does not fit: send the preferred prefix of 2.
    assert_eq!(batch(q.next_batch(t, any)), vec![0, 1]);
}

#[test]
fn incompatible_requests_are_not_batched_together() {
    let t = Instant::now();
    let mut q = BatchQueue::new(policy(8, &[], 0));
    for i in [10, 11, 20, 12] {
        q.push(i, 1, 0, None, t).unwrap();
    }
    let same_decade = |a: &u32, b: &u32| a / 10 == b / 10;
    assert_eq!(batch(q.next_batch(t, same_decade)), vec![10, 11]);
    assert_eq!(batch(q.next_batch(t, same_decade)), vec![20]);
    assert_eq!(batch(q.next_batch(t, same_decade)), vec![12]);
}

#[test]
fn higher_priority_levels_go_first_and_unknown_priorities_take_the_default() {
    let t = Instant::now();
    let mut p = policy(2, &[], 0);
    p.levels = vec![LevelPolicy::from_proto(None); 3];
    p.default_level = 3;
    let mut q = BatchQueue::new(p);
    q.push(30, 1, 0, None, t).unwrap(); // default -> level 3
    q.push(31, 1, 9, None, t).unwrap(); // out of range -> level 3
    q.push(20, 1, 2, None, t).unwrap();
    q.push(10, 1, 1, None, t).unwrap();
    assert_eq!(batch(q.next_batch(t, any)), vec![10, 20]);
    assert_eq!(batch(q.next_batch(t, any)), vec![30, 31]);
}

#[test]
fn a_full_level_rejects() {
    let t = Instant::now();
    let mut p = policy(8, &[], 0);
    p.levels[0].max_queue_size = 2;
    let mut q = BatchQueue::new(p);
    q.push(0, 1, 0, None, t).unwrap();
    q.push(1, 1, 0, None, t).unwrap();
    let (back, msg) = q.push(2, 1, 0, None, t).unwrap_err();
    assert_eq!(back, 2);
    assert!(msg.contains("maximum queue size"), "{msg}");
}

#[test]
fn timeouts_reject_or_delay_as_configured() {
    let t = Instant::now();
    let ms = Duration::from_millis;
    let mut p = policy(8, &[], 0);
    p.levels[0].default_timeout = Some(ms(10));
    let mut q = BatchQueue::new(p.clone());
    q.push(0, 1, 0, None, t).unwrap();
    // Without allow_timeout_override the request's own timeout is ignored.
    q.push(1, 1, 0, Some(ms(1)), t).unwrap();
    assert_eq!(q.next_deadline(), Some(t + ms(10)));
    assert!(q.take_expired(t + ms(5)).is_empty());
    assert_eq!(q.take_expired(t + ms(10)), vec![0, 1]);

    p.levels[0].allow_timeout_override = true;
    p.levels[0].reject_on_timeout = false;
    let mut q = BatchQueue::new(p);
    q.push(0, 1, 0, Some(ms(1)), t).unwrap();
    q.push(1, 1, 0, None, t).unwrap();
    // DELAY: the expired request moves behind the others instead of failing.
    assert!(q.take_expired(t + ms(2)).is_empty());
    assert_eq!(q.len(), 2);
    assert_eq!(batch(q.next_batch(t + ms(2), any)), vec![1, 0]);
}

#[test]
fn policy_reads_the_config() {
    let d = ModelDynamicBatching {
        preferred_batch_size: vec![8, 4, 4],
        max_queue_delay_microseconds: 100,
        priority_levels: 2,
        default_priority_level: 1,
        default_queue_policy: Some(ModelQueuePolicy {
            timeout_action: TimeoutAction::Delay as i32,
            default_timeout_microseconds: 50,
            allow_timeout_override: true,
            max_queue_size: 3,
        }),
        priority_queue_policy: [(2, ModelQueuePolicy { max_queue_size: 1, ..Default::default() })].into(),
        ..Default::default()
    };
    let p = BatchPolicy::from_config(16, &d);
    assert_eq!(p.preferred, vec![4, 8]);
    assert_eq!(p.max_queue_delay, Duration::from_micros(100));
    assert_eq!(p.levels.len(), 2);
    assert!(!p.levels[0].reject_on_timeout);
    assert_eq!(p.levels[0].max_queue_size, 3);
    assert_eq!(p.levels[1].max_queue_size, 1);
    assert!(p.levels[1].reject_on_timeout);
    assert_eq!(p.level(0), 1);
    assert_eq!(p.level(2), 2);
}

#[test]
fn a_removed_request_leaves_whichever_queue_it_waits_in() {
    let mut p = policy(4, &[], 0);
    p.levels[0].default_timeout = Some(Duration::from_millis(1));
    p.levels[0].reject_on_timeout = false;
    let mut q: BatchQueue<u32> = BatchQueue::new(p);
    let t0 = Instant::now();
    q.push(1, 1, 0, None, t0).unwrap();
    q.push(2, 1, 0, None, t0).unwrap();
    // Both time out into the delayed queue; a third waits in the ready one.
    assert!(q.take_expired(t0 + Duration::from_millis(2)).is_empty());
    q.push(3, 1, 0, None, t0 + Duration::from_millis(2)).unwrap();
    assert_eq!(q.remove(|&j| j == 2), Some(2));
    assert_eq!(q.remove(|&j| j == 3), Some(3));
    assert_eq!(q.remove(|&j| j == 3), None);
    assert_eq!(q.len(), 1);
    assert_eq!(batch(q.next_batch(t0 + Duration::from_millis(3), any)), vec![1]);
}
