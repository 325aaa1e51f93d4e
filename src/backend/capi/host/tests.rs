//! Unit tests of `backend/capi/host.rs`.

use super::*;

#[test]
fn a_retired_instance_gives_up_within_the_unload_limit_counted_from_the_retirement() {
    let now = Instant::now();
    let own = now + Duration::from_secs(60);
    // Not retired: its own deadline.
    assert_eq!(give_up_at(own, None, Duration::from_secs(60)), own);
    // Retired: the response timeout from the retirement, but never more than UNLOAD_WAIT.
    assert_eq!(give_up_at(own, Some(now), Duration::from_secs(60)), now + UNLOAD_WAIT);
    assert_eq!(give_up_at(own, Some(now), Duration::from_secs(2)), now + Duration::from_secs(2));
    // Never later than its own deadline.
    let soon = now + Duration::from_millis(10);
    assert_eq!(give_up_at(soon, Some(now), Duration::from_secs(60)), soon);
}

#[test]
fn a_ring_wakes_the_waiter_and_a_moved_deadline_ends_the_wait() {
    let bell = Arc::new(Bell::default());
    let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (b, f) = (bell.clone(), flag.clone());
    let ringer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        f.store(true, Ordering::SeqCst);
        b.ring();
    });
    let far = Instant::now() + Duration::from_secs(60);
    assert!(bell.wait(|| flag.load(Ordering::SeqCst), || far));
    ringer.join().unwrap();
    // Nothing comes: the wait ends at the deadline, asked again after each ring (a retirement moves
    // it closer).
    let moved = Arc::new(Mutex::new(far));
    let (b, m) = (bell.clone(), moved.clone());
    let retire = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        *m.lock() = Instant::now();
        b.ring();
    });
    let t = Instant::now();
    assert!(!bell.wait(|| false, || *moved.lock()));
    assert!(t.elapsed() < Duration::from_secs(30));
    retire.join().unwrap();
}
