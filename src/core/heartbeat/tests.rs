//! Unit tests of `core/heartbeat.rs`.

use super::*;

#[test]
fn a_thread_working_too_long_without_progress_is_stalled() {
    let beat = register("inst-heartbeat-test");
    assert!(beat.stuck_for().is_none());
    beat.working();
    std::thread::sleep(Duration::from_millis(30));
    let (name, d) = stalled(Duration::from_millis(20)).expect("stalled");
    assert!(name == "inst-heartbeat-test" || d >= Duration::from_millis(30));
    // Progress (a job finished) resets it; idle is never stalled.
    beat.working();
    assert!(beat.stuck_for().is_some_and(|d| d < Duration::from_millis(20)));
    beat.idle();
    assert!(beat.stuck_for().is_none());
    drop(beat);
    assert!(stalled(Duration::ZERO).is_none_or(|(n, _)| n != "inst-heartbeat-test"));
}
