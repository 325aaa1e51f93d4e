//! The device's retained state, its periodic stats and its Home Assistant discovery message.

use super::metrics::{MqttMetrics, Outcome};
use super::topics::Topics;
use crate::core::lifecycle::IndexEntry;
use crate::core::server::ModelStatistics;
use crate::metrics_text::names;
use serde_json::{json, Map, Value};

/// `P/D/state`: every model version and its state, the server's version and the platform.
pub fn state(device: &str, models: &[IndexEntry], platform: &Value) -> Value {
    let models: Vec<Value> = models
        .iter()
        .map(|e| {
            json!({
                "name": e.name,
                "version": e.version.map(|v| v.to_string()),
                "state": e.state.map_or("UNKNOWN", |s| s.as_str()),
                "reason": e.reason,
            })
        })
        .collect();
    json!({
        "device": device,
        "tritonrs_version": env!("CARGO_PKG_VERSION"),
        "platform": platform,
        "models": models,
        "ts": humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
    })
}

/// Totals over all models, for rates between two stats messages.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Totals {
    pub inferences: u64,
    pub requests: u64,
    pub queue_ns: u64,
}

impl Totals {
    pub fn of(models: &[ModelStatistics]) -> Totals {
        models.iter().fold(Totals::default(), |t, m| Totals {
            inferences: t.inferences + m.stats.inference_count,
            requests: t.requests + m.stats.success.count + m.stats.fail.count,
            queue_ns: t.queue_ns + m.stats.queue.ns,
        })
    }
}

/// `P/D/stats`: the /metrics counters per model version, the bridge's counters, and the rates since
/// `before` over `secs` (inferences per second, mean queue time).
pub fn stats(device: &str, models: &[ModelStatistics], before: Totals, secs: f64, mqtt: &MqttMetrics) -> Value {
    let now = Totals::of(models);
    let per_second = if secs > 0.0 { now.inferences.saturating_sub(before.inferences) as f64 / secs } else { 0.0 };
    let requests = now.requests.saturating_sub(before.requests);
    let queue_ms =
        if requests > 0 { now.queue_ns.saturating_sub(before.queue_ns) as f64 / requests as f64 / 1e6 } else { 0.0 };
    let per_model: Vec<Value> = models
        .iter()
        .map(|m| {
            let s = &m.stats;
            let mut o = Map::new();
            o.insert("model".into(), json!(m.name));
            o.insert("version".into(), json!(m.version.to_string()));
            o.insert(names::REQUEST_SUCCESS.name.into(), json!(s.success.count));
            o.insert(names::REQUEST_FAILURE.name.into(), json!(m.failures.iter().map(|(_, n)| n).sum::<u64>()));
            o.insert(names::INFERENCE_COUNT.name.into(), json!(s.inference_count));
            o.insert(names::EXEC_COUNT.name.into(), json!(s.execution_count));
            o.insert(names::REQUEST_DURATION.name.into(), json!((s.success.ns + s.fail.ns) / 1000));
            o.insert(names::QUEUE_DURATION.name.into(), json!(s.queue.ns / 1000));
            o.insert(names::COMPUTE_INPUT_DURATION.name.into(), json!(s.compute_input.ns / 1000));
            o.insert(names::COMPUTE_INFER_DURATION.name.into(), json!(s.compute_infer.ns / 1000));
            o.insert(names::COMPUTE_OUTPUT_DURATION.name.into(), json!(s.compute_output.ns / 1000));
            o.insert(names::PENDING_REQUESTS.name.into(), json!(m.pending));
            Value::Object(o)
        })
        .collect();
    let messages: Map<String, Value> =
        Outcome::ALL.iter().map(|o| (o.as_str().to_string(), json!(mqtt.messages(*o)))).collect();
    json!({
        "device": device,
        "ts": humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
        "interval_s": secs,
        "inferences_per_second": per_second,
        "queue_time_ms": queue_ms,
        "models": per_model,
        "mqtt": {
            names::MQTT_CONNECTED.name: u8::from(mqtt.is_connected()),
            names::MQTT_MESSAGES.name: messages,
        },
    })
}

/// Home Assistant's device-based discovery message (topic and payload): one device with its sensors,
/// available while `P/D/available` says `online`. Abbreviated keys as Home Assistant documents them.
pub fn discovery(t: &Topics, ha_prefix: &str) -> (String, Value) {
    let id = format!("tritonrs_{}", t.device);
    let sensor = |key: &str, name: &str, unit: &str, extra: Value| {
        let mut s = json!({
            "p": "sensor",
            "name": name,
            "uniq_id": format!("{id}_{key}"),
            "obj_id": format!("{id}_{key}"),
            "unit_of_meas": unit,
            "stat_cla": "measurement",
            "val_tpl": format!("{{{{ value_json.{key} | round(2) }}}}"),
        });
        if let (Some(s), Some(e)) = (s.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        s
    };
    let payload = json!({
        "dev": {
            "ids": [id],
            "name": format!("tritonrs {}", t.device),
            "mf": "tritonrs",
            "mdl": "tritonrs inference server",
            "sw": env!("CARGO_PKG_VERSION"),
        },
        "o": { "name": "tritonrs", "sw": env!("CARGO_PKG_VERSION") },
        "avty_t": t.available(),
        "pl_avail": "online",
        "pl_not_avail": "offline",
        "stat_t": t.stats(),
        "qos": 1,
        "cmps": {
            "inferences_per_second": sensor("inferences_per_second", "Inferences per second", "inferences/s", json!({})),
            "queue_time_ms": sensor("queue_time_ms", "Queue time", "ms", json!({ "dev_cla": "duration" })),
        },
    });
    (format!("{ha_prefix}/device/{id}/config"), payload)
}

#[cfg(test)]
mod tests;
