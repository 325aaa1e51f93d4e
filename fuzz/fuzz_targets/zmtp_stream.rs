//! What a peer of the Frigate ZMQ detector sends, as the ROUTER reads it: the greeting, the READY
//! command, then messages and commands until the stream ends or breaks the protocol. The first input
//! byte picks the frame limit (up to 64 KiB); no declared length may allocate past it (libFuzzer's
//! -malloc_limit_mb catches one that does), and nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use tritonrs::frontend::frigate::zmtp::{read_greeting, read_inbound, read_ready, Limits};

/// Runs a future that never waits (it reads from a slice) to its end.
fn run<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, mut stream)) = data.split_first() else { return };
    let frame = 1u64 << (pick % 17);
    let mut limits = |_fresh: bool| Limits { frame, message: frame * 2, frames: 16 };
    if run(read_greeting(&mut stream)).is_err() || run(read_ready(&mut stream)).is_err() {
        return;
    }
    while run(read_inbound(&mut stream, &mut limits)).is_ok() {}
});
