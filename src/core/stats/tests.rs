//! Unit tests of `core/stats.rs`.

use super::*;

#[test]
fn executions_are_counted_per_batch_size() {
    let s = ModelStats::new(4);
    s.record_execution(2, 10, 20, 30);
    s.record_execution(2, 1, 2, 3);
    s.record_execution(4, 1, 1, 1);
    s.record_execution(9, 1, 1, 1); // beyond max: counted, but no batch bucket
    let snap = s.snapshot();
    assert_eq!(snap.execution_count, 4);
    assert_eq!(snap.inference_count, 17);
    assert_eq!(snap.batches.len(), 2);
    assert_eq!(snap.batches[0].batch_size, 2);
    assert_eq!(snap.batches[0].compute_infer, DurationSnapshot { count: 2, ns: 22 });
}

#[test]
fn success_sets_last_inference() {
    let s = ModelStats::new(0);
    assert_eq!(s.snapshot().last_inference, 0);
    s.record_success(Duration::from_micros(5));
    let snap = s.snapshot();
    assert_eq!(snap.success, DurationSnapshot { count: 1, ns: 5000 });
    assert!(snap.last_inference > 0);
}

#[test]
fn histogram_counts_whole_milliseconds_per_bucket() {
    let h = super::Histogram::new(&[500.0, 100.0, f64::NAN, 100.0]);
    for ms in [0, 100, 101, 499, 501, 10_000] {
        h.observe(Duration::from_millis(ms));
    }
    h.observe(Duration::from_micros(100_900)); // 100.9 ms is 100 whole milliseconds
    let s = h.snapshot();
    assert_eq!(s.buckets, [(100.0, 3), (500.0, 2)]);
    assert_eq!(s.count, 7);
    assert_eq!(s.sum_ms, 100 + 101 + 499 + 501 + 10_000 + 100);
}

#[test]
fn response_stats_count_per_index_and_cap_the_indices() {
    let r = ResponseStats::default();
    r.record(0, ResponseOutcome::Success { infer_ns: 10, output_ns: 2 });
    r.record(1, ResponseOutcome::Empty { infer_ns: 5 });
    r.record(1, ResponseOutcome::Fail { ns: 7 });
    r.record(3, ResponseOutcome::Cancel { ns: 9 });
    r.record(usize::MAX, ResponseOutcome::Cancel { ns: 1 });
    let s = r.snapshot();
    assert_eq!(s.len(), MAX_RESPONSE_INDICES);
    assert_eq!((s[0].success.count, s[0].success.ns, s[0].compute_infer.ns, s[0].compute_output.ns), (1, 12, 10, 2));
    assert_eq!((s[1].empty_response.ns, s[1].compute_infer.ns, s[1].fail.ns, s[1].success.count), (5, 5, 7, 0));
    assert_eq!((s[2], s[3].cancel.count), (ResponseSnapshot::default(), 1));
    assert_eq!(s[MAX_RESPONSE_INDICES - 1].cancel.count, 1);
}
