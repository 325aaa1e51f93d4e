//! Unit tests of `backend/python/conn.rs`.

use super::*;

#[test]
fn the_instance_thread_ends_its_requests_when_the_stub_died_during_the_call() {
    let c = Conn::for_tests();
    let (tx, mut rx) = ResponseSender::channel();
    c.open_stream(7, tx);
    c.set_in_flight(&[7]);
    c.end_in_flight(&[7]);
    assert!(rx.try_recv().is_err(), "a live stub's requests stay open after execute returned");
    c.set_in_flight(&[7]);
    c.alive.store(false, Ordering::SeqCst);
    c.fail_streams(None, &c.gone());
    c.end_in_flight(&[7]);
    let e = rx.try_recv().unwrap().unwrap_err();
    assert_eq!(e.message, "Stub process 'm_0' is not healthy. It exited.");
}
