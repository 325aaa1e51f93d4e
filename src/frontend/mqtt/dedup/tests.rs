//! Unit tests of `frontend/mqtt/dedup.rs`.

use super::*;

fn msg(payload: &str) -> Arc<Outgoing> {
    Arc::new(Outgoing {
        topic: "res".into(),
        payload: Bytes::copy_from_slice(payload.as_bytes()),
        qos: 1,
        retain: false,
        correlation: Some(Bytes::from_static(b"\x00\xffc")),
        content_type: Some("application/json".into()),
        user: vec![("a".into(), "b".into())],
    })
}

#[test]
fn running_then_answered_then_evicted() {
    let (mut d, w) = Dedup::new(2, 1 << 20, None);
    assert!(w.is_none());
    assert!(d.lookup("k").is_none());
    d.running("k".into(), 7);
    assert!(matches!(d.lookup("k"), Some(Seen::Running(7))));
    d.answered("k".into(), msg("one"));
    assert!(matches!(d.lookup("k"), Some(Seen::Answered(m)) if &m.payload[..] == b"one"));
    d.answered("x".into(), msg("x"));
    d.answered("y".into(), msg("y"));
    assert!(d.lookup("k").is_none(), "the least recently used key goes first");
}

#[test]
fn the_byte_budget_bounds_kept_results() {
    let (mut d, _) = Dedup::new(100, 10, None);
    d.answered("a".into(), msg("123456"));
    d.answered("b".into(), msg("123456"));
    assert!(d.lookup("a").is_none());
    assert!(d.lookup("b").is_some());
    d.forget("b");
    assert!(d.lookup("b").is_none());
    assert_eq!(d.bytes, 0);
}

#[test]
fn the_journal_survives_a_restart_and_is_compacted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub/journal.jsonl");
    {
        let (mut d, w) = Dedup::new(3, 1 << 20, Some(&path));
        assert!(w.is_none(), "{w:?}");
        for i in 0..10 {
            d.answered(format!("k{i}"), msg(&format!("r{i}")));
        }
    }
    let lines = std::fs::read_to_string(&path).unwrap().lines().count();
    assert!(lines <= 6, "compacted to the cache, got {lines} lines");
    let (mut d, _) = Dedup::new(3, 1 << 20, Some(&path));
    match d.lookup("k9") {
        Some(Seen::Answered(m)) => assert_eq!(*m, *msg("r9")),
        other => panic!("k9 should be answered after a restart, got {other:?}"),
    }
    assert!(d.lookup("k0").is_none());
}

#[test]
fn a_request_started_before_a_crash_is_interrupted_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j");
    {
        let (mut d, _) = Dedup::new(8, 1 << 20, Some(&path));
        d.running("ran".into(), 1);
        d.running("done".into(), 2);
        d.answered("done".into(), msg("r"));
        d.running("dropped".into(), 3);
        d.forget("dropped");
    }
    let (mut d, _) = Dedup::new(8, 1 << 20, Some(&path));
    assert!(matches!(d.lookup("ran"), Some(Seen::Interrupted)));
    assert!(matches!(d.lookup("done"), Some(Seen::Answered(_))));
    assert!(d.lookup("dropped").is_none());
}

#[test]
fn a_corrupt_journal_line_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j");
    std::fs::write(&path, "not json\n{\"k\":\"a\",\"t\":\"t\",\"q\":1,\"p\":\"!!\"}\n").unwrap();
    let (mut d, w) = Dedup::new(3, 1 << 20, Some(&path));
    assert!(w.is_none());
    assert!(d.lookup("a").is_none());
}

#[test]
fn an_unusable_journal_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let (_, w) = Dedup::new(3, 1 << 20, Some(dir.path()));
    assert!(w.is_some_and(|w| w.contains("cannot be used")));
}
