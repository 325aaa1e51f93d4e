use super::*;

fn msg(topic: &str, qos: u8) -> Outgoing {
    Outgoing {
        topic: topic.into(),
        payload: Bytes::from_static(b"{}"),
        qos,
        retain: false,
        correlation: None,
        content_type: None,
        user: Vec::new(),
    }
}

fn published(actions: &[Action]) -> Vec<(u16, String)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Publish { pkid, msg } => Some((*pkid, msg.topic.clone())),
            _ => None,
        })
        .collect()
}

fn acked(actions: &[Action]) -> Vec<u16> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Ack { pkid, .. } => Some(*pkid),
            _ => None,
        })
        .collect()
}

fn tracked(a: Accepted) -> DeliveryId {
    match a {
        Accepted::Tracked(id) => id,
        other => panic!("expected a tracked delivery, got {other:?}"),
    }
}

#[test]
fn a_request_is_acknowledged_only_after_its_result_is() {
    let mut l = Ledger::new(100..=110);
    assert!(l.connected(false, 10).is_empty());
    let d = tracked(l.delivery(7, 1));
    let a = l.publish(msg("r", 1), vec![d]);
    assert_eq!(published(&a), vec![(100, "r".to_string())]);
    assert!(acked(&a).is_empty(), "no PUBACK before the result's own PUBACK");
    let a = l.puback(100);
    assert_eq!(acked(&a), vec![7]);
    assert_eq!((l.unacked(), l.unsent()), (0, 0));
}

#[test]
fn acknowledgements_keep_arrival_order() {
    let mut l = Ledger::new(100..=110);
    l.connected(false, 10);
    let first = tracked(l.delivery(1, 1));
    let second = tracked(l.delivery(2, 1));
    let third = tracked(l.delivery(3, 1));
    // The second and third finish first; nothing is acknowledged until the first is.
    let p2 = published(&l.publish(msg("b", 1), vec![second]))[0].0;
    let p3 = published(&l.publish(msg("c", 1), vec![third]))[0].0;
    assert!(acked(&l.puback(p3)).is_empty());
    assert!(acked(&l.puback(p2)).is_empty());
    let p1 = published(&l.publish(msg("a", 1), vec![first]))[0].0;
    assert_eq!(acked(&l.puback(p1)), vec![1, 2, 3]);
}

#[test]
fn qos0_requests_are_not_tracked_and_qos0_results_complete_at_once() {
    let mut l = Ledger::new(100..=110);
    l.connected(false, 10);
    assert_eq!(l.delivery(0, 0), Accepted::Untracked);
    let d = tracked(l.delivery(5, 1));
    let a = l.publish(msg("r", 0), vec![d]);
    assert_eq!(published(&a), vec![(0, "r".to_string())]);
    assert_eq!(acked(&a), vec![5]);
}

#[test]
fn the_broker_window_bounds_our_unacknowledged_publishes() {
    let mut l = Ledger::new(100..=110);
    l.connected(false, 2);
    let sent: Vec<_> = (0..4).flat_map(|i| published(&l.publish(msg(&format!("m{i}"), 1), vec![]))).collect();
    assert_eq!(sent.len(), 2);
    let a = l.puback(sent[0].0);
    assert_eq!(published(&a).len(), 1, "one freed slot sends one more");
    assert_eq!(l.unsent(), 3);
}

#[test]
fn nothing_is_sent_or_acknowledged_while_disconnected() {
    let mut l = Ledger::new(100..=110);
    let d = tracked(l.delivery(9, 1));
    assert!(l.publish(msg("r", 1), vec![d]).is_empty());
    let a = l.connected(true, 5);
    assert_eq!(published(&a).len(), 1);
    l.disconnected();
    assert!(l.puback(100).is_empty(), "acks wait for a connection");
    let a = l.connected(true, 5);
    assert_eq!(acked(&a), vec![9]);
}

#[test]
fn a_lost_session_resends_our_publishes_and_forgets_old_deliveries() {
    let mut l = Ledger::new(100..=110);
    l.connected(false, 10);
    let d = tracked(l.delivery(4, 1));
    let p = published(&l.publish(msg("r", 1), vec![d]));
    assert_eq!(p.len(), 1);
    l.disconnected();
    // The broker restarted without our session: the result goes out again, the old packet id 4 is
    // never acknowledged (it means nothing to the new session).
    let a = l.connected(false, 10);
    assert_eq!(published(&a).len(), 1);
    let pkid = published(&a)[0].0;
    assert!(acked(&l.puback(pkid)).is_empty());
    assert_eq!((l.unacked(), l.unsent()), (0, 0));
}

#[test]
fn a_kept_session_keeps_deliveries_and_spots_redeliveries() {
    let mut l = Ledger::new(100..=110);
    l.connected(false, 10);
    let d = tracked(l.delivery(4, 1));
    l.disconnected();
    l.connected(true, 10);
    assert_eq!(l.delivery(4, 1), Accepted::AlreadyHeld);
    let p = published(&l.publish(msg("r", 1), vec![d]));
    assert_eq!(acked(&l.puback(p[0].0)), vec![4]);
    // Once acknowledged, the broker may use id 4 for a new request.
    assert!(matches!(l.delivery(4, 1), Accepted::Tracked(_)));
}

#[test]
fn packet_ids_are_reused_and_never_exhausted() {
    let mut l = Ledger::new(100..=101);
    l.connected(false, 100);
    for i in 0..50 {
        let a = l.publish(msg(&format!("m{i}"), 1), vec![]);
        let p = published(&a);
        assert_eq!(p.len(), 1);
        assert!((100..=101).contains(&p[0].0));
        l.puback(p[0].0);
    }
    assert!(l.puback(100).is_empty(), "an unknown PUBACK is ignored");
}

#[test]
fn completing_without_a_publish_releases_the_ack() {
    let mut l = Ledger::new(100..=110);
    l.connected(false, 10);
    let d = tracked(l.delivery(3, 2));
    assert_eq!(l.complete(&[d]), vec![Action::Ack { pkid: 3, qos: 2 }]);
}
