//! Unit tests of `tune/measure.rs`.

use super::*;

fn w(n: usize, us: u64, ms: u64) -> Window {
    Window { latencies_us: vec![us; n], elapsed: Duration::from_millis(ms), ..Default::default() }
}

#[test]
fn three_agreeing_windows_are_stable() {
    assert!(stable(&[w(100, 1000, 1000), w(102, 1010, 1000), w(98, 990, 1000)], 1, 10.0));
    assert!(!stable(&[w(100, 1000, 1000), w(150, 1000, 1000), w(98, 990, 1000)], 1, 10.0));
    assert!(!stable(&[w(100, 1000, 1000), w(100, 2000, 1000), w(100, 1000, 1000)], 1, 10.0));
    assert!(!stable(&[w(100, 1000, 1000), w(100, 1000, 1000)], 1, 10.0));
    assert!(!stable(&[w(0, 0, 1000), w(0, 0, 1000), w(0, 0, 1000)], 1, 10.0));
}

#[test]
fn percentiles_are_nearest_rank() {
    let v: Vec<u64> = (1..=100).collect();
    assert_eq!(percentile(&v, 50.0), 50.0);
    assert_eq!(percentile(&v, 99.0), 99.0);
    assert_eq!(percentile(&v, 100.0), 100.0);
    assert_eq!(percentile(&[7], 99.0), 7.0);
    assert_eq!(percentile(&[], 99.0), 0.0);
}
