//! Unit tests of `backend/python/stub.rs`.

use super::*;
use crate::model_api::ResponseSender;

#[test]
fn a_stub_process_name_names_the_model_and_instance_in_15_bytes() {
    assert_eq!(process_name("add_sub", "add_sub_0_1"), "add_sub_0_1");
    assert_eq!(process_name("add_sub", "spare_0"), "add_sub:spare_0");
    assert_eq!(process_name("my_long_model_name", "my_long_model_name_0_12"), "my_lon~ame_0_12");
    assert_eq!(process_name("m", "a_very_long_group_3"), "m:a_ve~_group_3");
    // Multi-byte characters are never cut.
    let n = process_name("ééééé", "ééééé_ééééé_0");
    assert!(n.len() <= 15 && n.ends_with("é_0") && n.contains('~'), "{n}");
}

/// A dead stub's reader thread leaves the requests of the call in flight to the instance thread, which
/// may still have to read responses the stub sent on the main socket before it died.
#[test]
fn a_dead_stub_leaves_the_requests_in_flight_to_the_instance_thread() {
    let c = Conn::for_tests();
    let (done_tx, mut done_rx) = ResponseSender::channel();
    let (busy_tx, mut busy_rx) = ResponseSender::channel();
    c.open_stream(1, done_tx);
    c.open_stream(2, busy_tx);
    c.set_in_flight(&[2]);
    // What the reader thread does when the side socket closes.
    c.alive.store(false, Ordering::SeqCst);
    c.fail_streams(None, &c.gone());
    assert!(done_rx.try_recv().unwrap().is_err(), "a request whose execute has returned ends at once");
    assert!(busy_rx.try_recv().is_err(), "the request in flight is left open");
    // A response read from the main socket afterwards still reaches its request.
    let resp = FromStub::Response { key: 2, flags: 0, resp: None };
    assert!(handle(&Arc::new(c), None, resp, &[]).is_none());
    let got = busy_rx.try_recv().unwrap().unwrap();
    assert!(got.empty && !got.is_final);
}
