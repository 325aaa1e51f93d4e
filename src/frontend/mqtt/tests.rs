//! Unit tests of `frontend/mqtt/mod.rs`.

use super::*;
use serde_json::json;

#[test]
fn broker_urls() {
    assert_eq!(parse_broker("mqtt://localhost:1884").unwrap(), (false, "localhost".into(), 1884));
    assert_eq!(parse_broker("mqtts://broker.lan").unwrap(), (true, "broker.lan".into(), 8883));
    assert_eq!(parse_broker("tcp://10.0.0.2").unwrap(), (false, "10.0.0.2".into(), 1883));
    assert_eq!(parse_broker("[::1]:1999").unwrap(), (false, "::1".into(), 1999));
    assert_eq!(parse_broker("mqtt://host/").unwrap(), (false, "host".into(), 1883));
    assert!(parse_broker("http://host").is_err());
    assert!(parse_broker("mqtt://host:x").is_err());
    assert!(parse_broker("mqtt://:1883").is_err());
    assert!(parse_broker("mqtt://host/path").is_err());
}

#[test]
fn ids_and_digests() {
    let a = new_id();
    assert_eq!(a.len(), 36);
    assert_ne!(a, new_id());
    assert_eq!(digest(b""), 0xcbf2_9ce4_8422_2325);
    assert_ne!(digest(b"a"), digest(b"b"));
    assert_eq!(hex(&[0, 255, 16]), "00ff10");
}

#[test]
fn binary_results_carry_their_header_length() {
    let reply = Reply { topic: "t".into(), correlation: Some(Bytes::from_static(b"c")) };
    let mut f = serde_json::Map::new();
    f.insert("a".into(), json!(1));
    let answer = request::Answer { fields: f, outputs: None, binary: Some(Bytes::from_static(b"\x01\x02")) };
    let m = result_message(1, &reply, answer);
    assert_eq!(&m.payload[..], b"{\"a\":1}\x01\x02");
    assert_eq!(m.user, vec![(request::HEADER_LEN.to_string(), "7".to_string())]);
    assert_eq!(m.correlation.as_deref(), Some(&b"c"[..]));
}
