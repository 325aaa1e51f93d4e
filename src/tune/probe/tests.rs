//! Unit tests of `tune/probe.rs`.

use super::*;

#[test]
fn this_process_has_cpu_time_and_memory() {
    let t = cpu_seconds().unwrap();
    assert!(t >= 0.0);
    assert!(memory_mb().unwrap() > 1.0);
}

#[test]
fn a_child_process_counts_toward_memory() {
    let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
    let pid = child.id();
    let found = (0..50).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(10));
        descendants(std::process::id()).contains(&pid)
    });
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(found);
}

#[test]
fn the_input_rail_is_the_board_power() {
    let r = |n: &str, w: f64| (n.to_string(), w);
    assert_eq!(board_watts(&[r("VDD_CPU_GPU_CV", 2.0), r("VDD_IN", 7.5), r("VDD_SOC", 1.5)]), Some(7.5));
    assert_eq!(board_watts(&[r("POM_5V_GPU", 1.0), r("POM_5V_IN", 3.8)]), Some(3.8));
    assert_eq!(board_watts(&[r("CPU", 1.0), r("GPU", 2.0)]), Some(3.0));
    assert_eq!(board_watts(&[]), None);
}
