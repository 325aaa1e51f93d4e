//! Unit tests of `platform/mod.rs`.

use super::*;

#[test]
fn reading_reports_memory() {
    let m = CpuMonitor::start(Duration::from_millis(200)).unwrap();
    let r = m.reading();
    assert!(r.memory_total_bytes > 0);
    assert!(r.memory_used_bytes <= r.memory_total_bytes);
    assert!((0.0..=1.0).contains(&r.utilization));
}
