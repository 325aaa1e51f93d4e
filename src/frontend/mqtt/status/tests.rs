//! Unit tests of `frontend/mqtt/status.rs`.

use super::*;
use crate::core::lifecycle::ModelState;

#[test]
fn state_lists_models_and_platform() {
    let models = vec![
        IndexEntry { name: "a".into(), version: Some(1), state: Some(ModelState::Ready), reason: String::new() },
        IndexEntry { name: "b".into(), version: None, state: Some(ModelState::Unavailable), reason: "bad".into() },
    ];
    let s = state("dev", &models, &json!({"arch": "aarch64"}));
    assert_eq!(s["device"], "dev");
    assert_eq!(s["models"][0], json!({"name": "a", "version": "1", "state": "READY", "reason": ""}));
    assert_eq!(s["models"][1]["state"], "UNAVAILABLE");
    assert_eq!(s["models"][1]["version"], Value::Null);
    assert_eq!(s["platform"]["arch"], "aarch64");
}

#[test]
fn discovery_is_one_device_with_sensors_tied_to_availability() {
    let t = Topics::new("tritonrs", "box1", "g", true).unwrap();
    let (topic, p) = discovery(&t, "homeassistant");
    assert_eq!(topic, "homeassistant/device/tritonrs_box1/config");
    assert_eq!(p["avty_t"], "tritonrs/box1/available");
    assert_eq!(p["stat_t"], "tritonrs/box1/stats");
    assert_eq!(p["dev"]["ids"][0], "tritonrs_box1");
    let ips = &p["cmps"]["inferences_per_second"];
    assert_eq!(ips["p"], "sensor");
    assert_eq!(ips["uniq_id"], "tritonrs_box1_inferences_per_second");
    assert_eq!(ips["val_tpl"], "{{ value_json.inferences_per_second | round(2) }}");
    assert_eq!(p["cmps"]["queue_time_ms"]["dev_cla"], "duration");
}

#[test]
fn stats_rates_are_taken_between_two_readings() {
    let m = MqttMetrics::default();
    let s = stats("d", &[], Totals::default(), 10.0, &m);
    assert_eq!(s["inferences_per_second"], 0.0);
    assert_eq!(s["mqtt"]["tritonrs_mqtt_messages_total"]["ok"], 0);
}
