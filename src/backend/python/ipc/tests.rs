//! Unit tests of `backend/python/ipc.rs`.

use super::*;

#[test]
fn frames_round_trip() {
    let mut buf = Vec::new();
    write_frame(&mut buf, br#"{"type":"pong"}"#, &[b"ab", b"c"]).unwrap();
    write_frame(&mut buf, b"{}", &[]).unwrap();
    let mut r = &buf[..];
    let (j, p) = read_frame(&mut r).unwrap().unwrap();
    assert_eq!((&j[..], &p[..]), (&br#"{"type":"pong"}"#[..], &b"abc"[..]));
    let (j, p) = read_frame(&mut r).unwrap().unwrap();
    assert_eq!((&j[..], p.len()), (&b"{}"[..], 0));
    assert!(read_frame(&mut r).unwrap().is_none());
    // A truncated frame is an error, not a clean end.
    let mut short = &buf[..5];
    assert!(read_frame(&mut short).is_err());
}

#[test]
fn frame_reader_survives_timeouts_inside_a_frame() {
    /// Hands out its bytes a few at a time, timing out between chunks.
    struct Trickle(Vec<u8>, usize, bool);
    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.2 = !self.2;
            if self.2 {
                return Err(std::io::ErrorKind::WouldBlock.into());
            }
            let n = 3.min(self.0.len() - self.1).min(buf.len());
            buf[..n].copy_from_slice(&self.0[self.1..self.1 + n]);
            self.1 += n;
            Ok(n)
        }
    }
    let mut bytes = Vec::new();
    write_frame(&mut bytes, b"{\"a\":1}", &[b"xyz"]).unwrap();
    write_frame(&mut bytes, b"{}", &[]).unwrap();
    let mut src = Trickle(bytes, 0, false);
    let mut reader = FrameReader::default();
    let mut frames = Vec::new();
    for _ in 0..100 {
        match reader.read(&mut src) {
            Ok(Some(f)) => frames.push(f),
            Ok(None) => {}
            Err(e) => {
                assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
                break;
            }
        }
    }
    assert_eq!(frames, vec![(b"{\"a\":1}".to_vec(), b"xyz".to_vec()), (b"{}".to_vec(), vec![])]);
}

#[test]
fn messages_parse_with_their_notes() {
    let (m, n) = parse(br#"{"type":"done","id":3,"resched":[0],"resps":[{"out":[{"n":"Y","t":"FP32","s":[2],"l":8,"o":4096}]}],"ring":128,"rel":[64]}"#).unwrap();
    match m {
        FromStub::Done { id, err, resps, resched } => {
            assert_eq!((id, err, resps.len(), resched), (3, None, 1, vec![0]));
            assert_eq!(resps[0].out[0].o, Some(4096));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!((n.ring, n.rel), (Some(128), vec![64]));
    // The same message laid out otherwise takes the general path, with the same result.
    let (m, n) = parse(br#"{"id":3, "type":"done","resps":[{"err":{"m":"no"}}],"ring":64}"#).unwrap();
    assert!(
        matches!(m, FromStub::Done { id: 3, err: None, ref resps, ref resched } if resps[0].err.as_ref().unwrap().c == 1 && resched.is_empty())
    );
    assert_eq!((n.ring, n.rel), (Some(64), vec![]));
    assert!(parse(br#"{"type":"done","resps":[]}"#).is_err(), "an answer without its id");
    let (m, _) = parse(br#"{"type":"call","op":"metric_value","id":7,"x":1}"#).unwrap();
    assert!(matches!(m, FromStub::Call { id: Some(7), ref op, ref args } if op == "metric_value" && args["x"] == 1));
    assert!(parse(br#"{"type":"nope"}"#).is_err());
    assert!(parse(b"not json").is_err());
}

#[test]
fn tensors_are_checked_against_their_shape() {
    let t = WireTensor { n: "X".into(), t: "INT32".into(), s: vec![2], l: 8, o: None, i: Some(1) };
    let payload = [0u8, 1, 0, 0, 0, 2, 0, 0, 0];
    let x = read_tensor(&t, &payload, |_, _| unreachable!()).unwrap();
    assert_eq!(x.data.as_host().unwrap().as_ref(), &payload[1..]);
    let short = WireTensor { l: 4, ..t.clone() };
    assert!(read_tensor(&short, &payload, |_, _| unreachable!()).is_err());
    let outside = WireTensor { i: Some(5), ..t.clone() };
    assert!(read_tensor(&outside, &payload, |_, _| unreachable!()).is_err());
    let bad_type = WireTensor { t: "FLOAT".into(), ..t };
    assert!(read_tensor(&bad_type, &payload, |_, _| unreachable!()).is_err());
}
