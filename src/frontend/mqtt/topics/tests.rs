//! Unit tests of `frontend/mqtt/topics.rs`.

use super::*;

fn t() -> Topics {
    Topics::new("tritonrs", "cam-box", "fleet", true).unwrap()
}

#[test]
fn fleet_filters_are_shared_and_device_filters_are_not() {
    assert_eq!(
        t().fleet_filters("yolo"),
        ["$share/fleet/tritonrs/infer/yolo/#".to_string(), "$share/fleet/tritonrs/generate/yolo/#".to_string()]
    );
    assert_eq!(
        t().device_filters(),
        ["tritonrs/cam-box/infer/#".to_string(), "tritonrs/cam-box/generate/#".to_string()]
    );
    let plain = Topics::new("a/b", "d", "g", false).unwrap();
    assert_eq!(plain.fleet_filters("m")[0], "a/b/infer/m/#");
}

#[test]
fn request_topics_parse_with_and_without_source() {
    let t = t();
    let r =
        |m: &str, s: Option<&str>| Some(RequestTopic { model: m.into(), source: s.map(Into::into), generate: false });
    assert_eq!(t.parse_request("tritonrs/infer/yolo"), r("yolo", None));
    assert_eq!(t.parse_request("tritonrs/infer/yolo/front"), r("yolo", Some("front")));
    assert_eq!(t.parse_request("tritonrs/infer/yolo/cams/back"), r("yolo", Some("cams/back")));
    assert_eq!(t.parse_request("tritonrs/cam-box/infer/yolo/door"), r("yolo", Some("door")));
    assert_eq!(t.parse_request("tritonrs/infer/yolo/"), r("yolo", None));
    assert_eq!(t.parse_request("tritonrs/infer/"), None);
    assert_eq!(t.parse_request("tritonrs/other/infer/yolo"), None);
    assert_eq!(t.parse_request("tritonrsx/infer/yolo"), None);
    assert_eq!(t.parse_request("tritonrs/result/yolo"), None);
    assert_eq!(t.parse_request("tritonrs/cam-box/result/yolo"), None);
    let g =
        |m: &str, s: Option<&str>| Some(RequestTopic { model: m.into(), source: s.map(Into::into), generate: true });
    assert_eq!(t.parse_request("tritonrs/generate/llm"), g("llm", None));
    assert_eq!(t.parse_request("tritonrs/cam-box/generate/llm/kitchen"), g("llm", Some("kitchen")));
    assert_eq!(t.parse_request("tritonrs/generate/"), None);
}

#[test]
fn result_and_device_topics() {
    let t = t();
    assert_eq!(t.result(&RequestTopic { model: "m".into(), source: None, generate: false }), "tritonrs/result/m");
    assert_eq!(
        t.result(&RequestTopic { model: "m".into(), source: Some("c".into()), generate: true }),
        "tritonrs/result/m/c"
    );
    assert_eq!(t.available(), "tritonrs/cam-box/available");
    assert_eq!(t.state(), "tritonrs/cam-box/state");
    assert_eq!(t.stats(), "tritonrs/cam-box/stats");
}

#[test]
fn bad_names_are_refused() {
    assert!(Topics::new("a/+", "d", "g", true).is_err());
    assert!(Topics::new("", "d", "g", true).is_err());
    assert!(Topics::new("$SYS", "d", "g", true).is_err());
    assert!(Topics::new("p", "a/b", "g", true).is_err());
    assert!(Topics::new("p", "d", "#", true).is_err());
    assert!(Topics::new("p/q", "d", "g", true).is_ok());
}
