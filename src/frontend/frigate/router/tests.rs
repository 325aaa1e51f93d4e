//! Unit tests of `frontend/frigate/router.rs`.

use super::*;

#[test]
fn endpoints() {
    assert_eq!(Endpoint::parse("tcp://*:5555"), Ok(Endpoint::Tcp("0.0.0.0".into(), 5555)));
    assert_eq!(Endpoint::parse("tcp://127.0.0.1:0"), Ok(Endpoint::Tcp("127.0.0.1".into(), 0)));
    assert_eq!(Endpoint::parse("tcp://[::1]:5555"), Ok(Endpoint::Tcp("::1".into(), 5555)));
    assert_eq!(Endpoint::parse("ipc:///run/f.sock"), Ok(Endpoint::Ipc("/run/f.sock".into())));
    for bad in ["udp://x:1", "tcp://x", "tcp://x:99999", "tcp://:1", "ipc://", "5555"] {
        assert!(Endpoint::parse(bad).is_err(), "{bad}");
    }
}

struct NoEvents;
impl Events for NoEvents {
    fn too_large(&self) {}
    fn reply_dropped(&self) {}
    fn peers(&self, _: usize) {}
}

#[test]
fn identities_are_unique() {
    let shared = Shared {
        peers: Mutex::new(HashMap::new()),
        connections: AtomicU64::new(0),
        next_identity: AtomicU32::new(u32::MAX),
        next_conn: AtomicU64::new(0),
        size_limit: Arc::new(|_| Limits { frame: 1, message: 1, frames: 1 }),
        events: Arc::new(NoEvents),
    };
    let (tx, _rx) = mpsc::channel(1);
    let (a, _) = shared.register(Bytes::new(), 0, tx.clone()).unwrap();
    let (b, n) = shared.register(Bytes::new(), 1, tx.clone()).unwrap();
    assert_ne!(a, b);
    assert_eq!((a.len(), a[0], n), (5, 0, 2));
    let (c, _) = shared.register(Bytes::from_static(b"cam"), 2, tx.clone()).unwrap();
    assert_eq!(c, Bytes::from_static(b"cam"));
    assert!(shared.register(Bytes::from_static(b"cam"), 3, tx.clone()).is_none(), "taken");
    // A connection that lost its identity to no one removes only its own entry.
    assert_eq!(shared.unregister(&c, 9), 3);
    assert_eq!(shared.unregister(&c, 2), 2);
}
