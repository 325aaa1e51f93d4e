//! Unit tests of `tune/results.rs`.

use super::*;

fn p(throughput: f64, p99_ms: f64) -> Point {
    Point { throughput, p99_ms, memory_mb: 100.0, cpu_percent: 50.0, ..Default::default() }
}

#[test]
fn constraints_rule_points_out() {
    let c = Constraints { max_p99_ms: Some(10.0), ..Default::default() };
    assert!(c.satisfied_by(&p(100.0, 9.0)));
    assert!(!c.satisfied_by(&p(100.0, 11.0)));
    let power = Constraints { max_power_w: Some(5.0), ..Default::default() };
    assert!(!power.satisfied_by(&p(1.0, 1.0)), "no reading does not meet a power limit");
    assert!(power.satisfied_by(&Point { power_w: Some(4.0), ..p(1.0, 1.0) }));
    let mem = Constraints { max_memory_mb: Some(150.0), ..Default::default() };
    assert!(!mem.satisfied_by(&Point { gpu_memory_mb: Some(60.0), ..p(1.0, 1.0) }));
}

#[test]
fn the_best_point_and_variant_follow_the_objective_within_the_constraints() {
    let variant = |name: &str, points: Vec<Point>| VariantResult {
        model: "m".into(),
        name: name.into(),
        candidate: Candidate::default(),
        config_pbtxt: String::new(),
        points,
        error: None,
        best: None,
    };
    let c = Constraints { max_p99_ms: Some(10.0), ..Default::default() };
    let mut a = variant("a", vec![p(100.0, 5.0), p(300.0, 20.0)]);
    let mut b = variant("b", vec![p(200.0, 8.0)]);
    a.rank(Objective::Throughput, &c);
    b.rank(Objective::Throughput, &c);
    assert_eq!(a.best, Some(0));
    let report = TuneReport { variants: vec![a.clone(), b.clone()], ..Default::default() };
    assert_eq!(report.best_of("m"), Some(1));
    a.rank(Objective::Latency, &c);
    assert_eq!(a.best_point().unwrap().p99_ms, 5.0);
    // CPU efficiency: throughput per CPU-second.
    assert_eq!(p(100.0, 1.0).efficiency(), Some(200.0));
    assert_eq!(Point { power_w: Some(4.0), ..p(100.0, 1.0) }.efficiency(), Some(25.0));
}
