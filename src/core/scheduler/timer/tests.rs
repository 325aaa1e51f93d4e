//! Unit tests of `core/scheduler/timer.rs`.

use super::*;
use std::time::Duration;

#[test]
fn rearm_only_moves_the_alarm_earlier() {
    let t = Instant::now();
    let mut a = Alarm::new();
    assert!(!a.rearm(None));
    assert!(a.rearm(Some(t + Duration::from_millis(5))));
    assert!(!a.rearm(Some(t + Duration::from_millis(9))), "later: the sleeping timer wakes soon enough");
    assert!(a.rearm(Some(t + Duration::from_millis(1))));
    assert_eq!(a.wake_at, Some(t + Duration::from_millis(1)));
}

#[test]
fn run_fires_when_due_and_returns_once_closed() {
    let clocked = Clocked::new(0u32);
    clocked.lock().alarm.wake_at = Some(Instant::now());
    let st = clocked.run(|mut st, _| {
        **st += 1;
        st.alarm.open = false; // the batcher closes while the timer acts
    });
    assert!(!st.alarm.open && st.alarm.wake_at.is_none());
    assert_eq!(**st, 1);
    drop(st);
    assert!(clocked.lock_open("m").is_err(), "a closed batcher refuses requests");
}

#[test]
fn close_wakes_a_sleeping_timer() {
    let clocked = std::sync::Arc::new(Clocked::new(()));
    let c = clocked.clone();
    let t = std::thread::spawn(move || drop(c.run(|_, _| {})));
    std::thread::sleep(Duration::from_millis(20));
    assert!(clocked.lock_open("m").is_ok());
    clocked.rearm(clocked.lock(), Some(Instant::now() + Duration::from_secs(3600)));
    clocked.close();
    t.join().unwrap();
}
