//! Unit tests of `frontend/frigate/zmtp.rs`.

use super::*;

fn limits(frame: u64) -> impl FnMut(bool) -> Limits {
    move |_| Limits { frame, message: frame * 2, frames: 8 }
}

fn frame(flags: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    header(flags, body.len(), &mut out);
    out.extend_from_slice(body);
    out
}

#[tokio::test]
async fn reads_a_greeting_and_refuses_other_peers() {
    let g = greeting();
    assert_eq!(g.len(), 64);
    read_greeting(&mut &g[..]).await.unwrap();
    let mut old = g;
    old[10] = 2;
    assert!(matches!(read_greeting(&mut &old[..]).await, Err(WireError::Protocol(m)) if m.contains("ZMTP 2")));
    let mut curve = g;
    curve[12..17].copy_from_slice(b"CURVE");
    assert!(matches!(read_greeting(&mut &curve[..]).await, Err(WireError::Protocol(m)) if m.contains("CURVE")));
    let http = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".repeat(3);
    assert!(matches!(read_greeting(&mut &http[..]).await, Err(WireError::Protocol(_))));
}

#[tokio::test]
async fn ready_round_trip_with_identity() {
    let mut body = Vec::new();
    property(&mut body, "socket-type", b"DEALER");
    property(&mut body, "Identity", b"cam-1");
    let wire = command("READY", &body);
    let ready = read_ready(&mut &wire[..]).await.unwrap();
    assert_eq!(ready, Ready { socket_type: "DEALER".into(), identity: Bytes::from_static(b"cam-1") });
    assert_eq!(parse_ready(&super::ready("ROUTER")[2..]).unwrap().socket_type, "ROUTER");
    // A property whose length runs past the end.
    let mut body = Vec::new();
    property(&mut body, "Socket-Type", b"REQ");
    body.truncate(body.len() - 1);
    assert!(parse_ready(&command("READY", &body)[2..]).is_err());
    let err = command("ERROR", b"\x05nope!");
    assert!(matches!(parse_ready(&err[2..]), Err(WireError::Protocol(m)) if m.contains("nope")));
}

#[tokio::test]
async fn reads_messages_pings_and_long_frames() {
    let mut wire = frame(MORE, b"");
    wire.extend(frame(COMMAND, b"\x04PING\x00\x0actx"));
    let big = vec![7u8; 300];
    wire.extend(frame(0, &big));
    let mut r = &wire[..];
    let msg = read_inbound(&mut r, &mut limits(1000)).await.unwrap();
    assert_eq!(msg, Inbound::Message(vec![Bytes::new(), Bytes::from(big)]));
    let ping = [frame(COMMAND, b"\x04PING\x00\x0actx"), frame(0, b"x")].concat();
    let mut r = &ping[..];
    assert_eq!(read_inbound(&mut r, &mut limits(10)).await.unwrap(), Inbound::Ping(Bytes::from_static(b"ctx")));
    assert_eq!(read_inbound(&mut r, &mut limits(10)).await.unwrap(), Inbound::Message(vec![Bytes::from_static(b"x")]));
    assert_eq!(pong(b"ctx"), frame(COMMAND, b"\x04PONGctx"));
}

#[tokio::test]
async fn a_declared_size_past_the_limit_is_refused_before_any_read() {
    for declared in [1u64 << 36, 1 << 40, 1 << 62, u64::MAX] {
        let mut wire = vec![LONG];
        wire.extend_from_slice(&declared.to_be_bytes());
        // No body follows: the refusal must come from the header alone.
        let got = read_inbound(&mut &wire[..], &mut limits(1 << 20)).await;
        assert!(matches!(got, Err(WireError::TooLarge { declared: d, limit }) if d == declared && limit == 1 << 20));
    }
    // The message total counts too: two frames of 0.75 of a 2x message limit each are fine, three not.
    let part = vec![0u8; 750];
    let wire = [frame(MORE, &part), frame(MORE, &part), frame(MORE, &part)].concat();
    let got = read_inbound(&mut &wire[..], &mut limits(1000)).await;
    assert!(matches!(got, Err(WireError::TooLarge { declared: 2250, limit: 2000 })), "{got:?}");
    let wire: Vec<u8> = (0..9).flat_map(|_| frame(MORE, b"a")).collect();
    assert!(matches!(read_inbound(&mut &wire[..], &mut limits(1000)).await, Err(WireError::TooManyFrames(8))));
    assert!(matches!(read_inbound(&mut &[0x80u8, 0][..], &mut limits(10)).await, Err(WireError::Protocol(_))));
    assert!(read_ready(&mut &[COMMAND | LONG, 0, 0, 0, 1, 0, 0, 0, 0][..]).await.is_err());
}

#[tokio::test]
async fn the_exact_limit_is_asked_for_only_past_the_cached_one() {
    let mut asked = Vec::new();
    let mut l = |fresh: bool| {
        asked.push(fresh);
        Limits { frame: if fresh { 500 } else { 100 }, message: 1000, frames: 4 }
    };
    let wire = frame(0, &[1u8; 300]);
    assert!(matches!(read_inbound(&mut &wire[..], &mut l).await, Ok(Inbound::Message(_))));
    assert_eq!(asked, vec![false, true]);
}

#[tokio::test]
async fn writes_frames_with_more_flags_and_long_sizes() {
    let mut out = Vec::new();
    write_message(&mut out, &[Bytes::new(), Bytes::from(vec![1u8; 256])]).await.unwrap();
    assert_eq!(&out[..2], &[MORE, 0]);
    assert_eq!(out[2], LONG);
    assert_eq!(&out[3..11], &256u64.to_be_bytes());
    assert_eq!(out.len(), 2 + 9 + 256);
    let back = read_inbound(&mut &out[..], &mut limits(1000)).await.unwrap();
    assert_eq!(back, Inbound::Message(vec![Bytes::new(), Bytes::from(vec![1u8; 256])]));
}
