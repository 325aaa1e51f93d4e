//! Settings, sampling and the file layout, without a server.

use super::*;
use serde_json::Value;
use std::time::Duration;

fn on(file: &str) -> TraceSettings {
    TraceSettings { level: TraceLevel::TIMESTAMPS, rate: 1, file: file.to_string(), ..Default::default() }
}

fn set(key: &str, v: &str) -> (String, SettingValue) {
    (key.to_string(), SettingValue::Set(vec![v.to_string()]))
}

fn clear(key: &str) -> (String, SettingValue) {
    (key.to_string(), SettingValue::Clear)
}

fn upd(pairs: Vec<(String, SettingValue)>) -> TraceUpdate {
    TraceUpdate::parse(pairs).unwrap()
}

fn read_json(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str::<Vec<Value>>(&text).unwrap_or_else(|e| panic!("{} is not JSON ({e}): {text}", path.display()))
}

#[test]
fn levels_are_named_and_parsed_as_triton_does() {
    assert_eq!(TraceLevel::OFF.names(), vec!["OFF"]);
    assert_eq!(TraceLevel::TENSORS.union(TraceLevel::TIMESTAMPS).names(), vec!["TIMESTAMPS", "TENSORS"]);
    assert_eq!(TraceLevel::parse_flag("timestamps").unwrap(), TraceLevel::TIMESTAMPS);
    assert_eq!(TraceLevel::parse_flag("MAX").unwrap(), TraceLevel::TIMESTAMPS);
    assert_eq!(TraceLevel::parse_flag("false").unwrap(), TraceLevel::OFF);
    assert!(TraceLevel::parse_flag("loud").is_err());
    assert!(!TraceLevel::TENSORS.contains(TraceLevel::TIMESTAMPS));
    assert!(!TraceLevel::TIMESTAMPS.contains(TraceLevel::OFF));
}

#[test]
fn updates_parse_strings_and_clears() {
    let u = upd(vec![
        ("trace_level".into(), SettingValue::Set(vec!["TIMESTAMPS".into(), "TENSORS".into(), "TENSORS".into()])),
        set("trace_rate", "5"),
        set("trace_count", "-1"),
        clear("log_frequency"),
        set("trace_mode", "triton"),
    ]);
    assert_eq!(u.level, Some(Some(TraceLevel::TIMESTAMPS.union(TraceLevel::TENSORS))));
    assert_eq!(u.rate, Some(Some(5)));
    assert_eq!(u.count, Some(Some(-1)));
    assert_eq!(u.log_frequency, Some(None));
    // An empty list of levels changes nothing.
    assert_eq!(upd(vec![("trace_level".into(), SettingValue::Set(vec![]))]).level, None);
}

#[test]
fn bad_updates_are_client_errors() {
    use crate::error::ErrorKind;
    let err = |pairs| TraceUpdate::parse(pairs).unwrap_err();
    for bad in [
        vec![set("trace_rate", "abc")],
        vec![set("trace_rate", "-1")],
        vec![set("trace_rate", "5abc")],
        vec![set("trace_rate", "99999999999")],
        vec![set("trace_count", "-2")],
        vec![set("trace_count", "1.5")],
        vec![set("log_frequency", "-3")],
        vec![set("trace_level", "LOUD")],
        vec![("trace_level".into(), SettingValue::Set(vec!["OFF".into(), "TIMESTAMPS".into()]))],
        vec![("trace_rate".into(), SettingValue::Set(vec!["1".into(), "2".into()]))],
        vec![set("trace_mode", "zipkin")],
        vec![set("trace_rat", "1")],
    ] {
        let what = format!("{bad:?}");
        assert_eq!(err(bad).kind, ErrorKind::InvalidArgument, "{what}");
    }
    // Moving the file is refused as unsupported, before anything else is looked at.
    assert_eq!(err(vec![set("trace_rate", "abc"), set("trace_file", "/x")]).kind, ErrorKind::Unsupported);
}

#[test]
fn off_costs_one_flag_and_samples_nothing() {
    let t = Tracer::new(TraceSettings::default());
    assert!(!t.enabled());
    assert!(t.sample("simple", "").is_none());
    // Asking for tracing without a file traces nothing either, as in tritonserver.
    let t = Tracer::new(TraceSettings { level: TraceLevel::TIMESTAMPS, rate: 1, ..Default::default() });
    assert!(!t.enabled());
    assert!(t.update(None, &upd(vec![set("trace_rate", "1")])).is_err());
}

#[test]
fn rate_traces_every_nth_request() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tracer::new(TraceSettings { rate: 3, ..on(&dir.path().join("t.json").display().to_string()) });
    assert!(t.enabled());
    let traced: Vec<usize> = (1..=9).filter(|_| t.sample("m", "").is_some()).collect();
    assert_eq!(traced, vec![3, 6, 9]);
}

#[test]
fn count_limits_traces_and_counts_down() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tracer::new(TraceSettings { rate: 2, count: 2, ..on(&dir.path().join("t.json").display().to_string()) });
    let mut counts = Vec::new();
    let mut traced = Vec::new();
    for i in 1..=6 {
        if let Some(tr) = t.sample("m", "") {
            traced.push((i, tr.id()));
        }
        counts.push(t.settings(None).count);
    }
    assert_eq!(traced, vec![(2, 1), (4, 2)]);
    assert_eq!(counts, vec![2, 1, 1, 0, 0, 0]);
    // Used up: the hot path's flag is off again.
    assert!(!t.enabled());
    // Clearing the count returns to the start-up value and traces again.
    assert_eq!(t.update(None, &upd(vec![clear("trace_count")])).unwrap().count, 2);
    assert!(t.enabled());
}

#[test]
fn model_settings_override_mirror_and_clear() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.json").display().to_string();
    let t = Tracer::new(TraceSettings { count: 7, ..on(&file) });
    let m = t.update(Some("simple"), &upd(vec![set("trace_rate", "5")])).unwrap();
    assert_eq!((m.rate, m.count, m.level), (5, 7, TraceLevel::TIMESTAMPS));
    assert_eq!(t.settings(None).rate, 1);
    assert_eq!(t.settings(Some("other")).rate, 1);
    // The model's unspecified fields follow the global setting.
    t.update(None, &upd(vec![set("trace_count", "10"), set("log_frequency", "3")])).unwrap();
    let m = t.settings(Some("simple"));
    assert_eq!((m.rate, m.count, m.log_frequency), (5, 10, 3));
    // Its own OFF does not touch the global setting.
    assert_eq!(t.update(Some("simple"), &upd(vec![set("trace_level", "OFF")])).unwrap().level, TraceLevel::OFF);
    assert_eq!(t.settings(None).level, TraceLevel::TIMESTAMPS);
    assert!(t.sample("simple", "").is_none());
    assert!(t.sample("other", "").is_some());
    // Clearing its fields one by one brings back the global values, then the global setting itself.
    assert_eq!(t.update(Some("simple"), &upd(vec![clear("trace_rate")])).unwrap().rate, 1);
    let m = t.update(Some("simple"), &upd(vec![clear("trace_level")])).unwrap();
    assert_eq!(m, t.settings(None));
    // Clearing a global field returns it to the start-up value.
    assert_eq!(t.update(None, &upd(vec![clear("trace_count")])).unwrap().count, 7);
}

#[test]
fn invalid_settings_are_refused_unless_they_turn_tracing_off() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tracer::new(on(&dir.path().join("t.json").display().to_string()));
    assert!(t.update(None, &upd(vec![set("trace_rate", "0")])).is_err());
    assert!(t.update(None, &upd(vec![set("trace_count", "0")])).is_err());
    assert_eq!(t.settings(None).rate, 1, "a refused update changes nothing");
    let s = t.update(None, &upd(vec![set("trace_level", "OFF"), set("trace_rate", "0")])).unwrap();
    assert_eq!((s.level, s.rate), (TraceLevel::OFF, 0));
    assert!(!t.enabled());
    // A model override inherits the global rate 0 and so cannot turn tracing on.
    assert!(t.update(Some("m"), &upd(vec![set("trace_level", "TIMESTAMPS")])).is_err());
}

#[test]
fn file_is_one_json_array_closed_at_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    let t = Tracer::new(on(&path.display().to_string()));
    let start = Instant::now();
    for (i, rid) in ["a\"1", ""].iter().enumerate() {
        let mut tr = t.sample("simple", rid).unwrap();
        tr.stamp(Activity::HttpRecvStart, start);
        tr.set_model("simple", 1);
        tr.stamp(Activity::RequestStart, start + Duration::from_micros(10 * i as u64 + 1));
        tr.stamp_now(Activity::RequestEnd);
    }
    assert!(!path.exists(), "with log frequency 0 nothing is written before shutdown");
    t.shutdown();
    let records = read_json(&path);
    let names: Vec<String> = records
        .iter()
        .map(|r| r.get("timestamps").map(|ts| ts[0]["name"].as_str().unwrap().to_string()).unwrap_or("MODEL".into()))
        .collect();
    let one = ["HTTP_RECV_START", "MODEL", "REQUEST_START", "REQUEST_END"];
    assert_eq!(names, [one, one].concat());
    assert_eq!(
        records[1],
        serde_json::json!({"id": 1, "model_name": "simple", "model_version": 1, "request_id": "a\"1"})
    );
    // No request id, no key; no parent, no parent_id (as tritonserver writes them).
    assert_eq!(records[5], serde_json::json!({"id": 2, "model_name": "simple", "model_version": 1}));
    let ns: Vec<u64> =
        records.iter().filter_map(|r| r.get("timestamps")).map(|ts| ts[0]["ns"].as_u64().unwrap()).collect();
    assert!(ns[0] <= ns[1] && ns[1] <= ns[2], "{ns:?}");
    // Traces finishing after shutdown are dropped, not appended past the closing bracket.
    assert!(t.sample("simple", "").is_none());
    read_json(&path);
}

#[test]
fn log_frequency_writes_numbered_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    let t = Tracer::new(TraceSettings { log_frequency: 2, ..on(&path.display().to_string()) });
    for _ in 0..5 {
        let mut tr = t.sample("m", "").unwrap();
        tr.stamp_now(Activity::RequestStart);
    }
    let chunk = |n: usize| dir.path().join(format!("t.json.{n}"));
    assert_eq!(read_json(&chunk(0)).len(), 2);
    assert_eq!(read_json(&chunk(1)).len(), 2);
    assert!(!chunk(2).exists());
    t.shutdown();
    // The rest goes to the next chunk at shutdown; the main file is never created.
    assert_eq!(read_json(&chunk(2))[0]["id"], 5);
    assert!(!path.exists());
}

#[test]
fn a_used_up_count_writes_a_chunk_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    let t = Tracer::new(TraceSettings { count: 2, ..on(&path.display().to_string()) });
    let first = t.sample("m", "").unwrap();
    let mut second = t.sample("m", "").unwrap();
    second.stamp_now(Activity::RequestStart);
    drop(second);
    assert!(!dir.path().join("t.json.0").exists(), "waits for the trace still in flight");
    drop(first);
    assert_eq!(read_json(&dir.path().join("t.json.0")).len(), 1, "only the trace with a timestamp has records");
}

#[test]
fn an_update_writes_the_replaced_settings_traces() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    let t = Tracer::new(on(&path.display().to_string()));
    t.sample("m", "").unwrap().stamp_now(Activity::RequestStart);
    t.update(None, &upd(vec![set("trace_rate", "2")])).unwrap();
    assert!(path.exists(), "the replaced setting wrote its trace");
    for _ in 0..2 {
        if let Some(mut tr) = t.sample("m", "") {
            tr.stamp_now(Activity::RequestStart);
        }
    }
    t.shutdown();
    let ids: Vec<i64> = read_json(&path).iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, vec![1, 2]);
}

#[test]
fn tensors_only_traces_count_but_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    let t = Tracer::new(TraceSettings { level: TraceLevel::TENSORS, count: 1, ..on(&path.display().to_string()) });
    t.sample("m", "").unwrap().stamp_now(Activity::RequestStart);
    assert_eq!(t.settings(None).count, 0);
    t.shutdown();
    assert!(!path.exists());
}

#[test]
fn timestamps_are_monotonic_clock_nanoseconds() {
    let c = Clock::new();
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let now_ns = now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64;
    let ours = c.ns(Instant::now());
    assert!(ours.abs_diff(now_ns) < 50_000_000, "{ours} vs {now_ns}");
    let earlier = c.base - Duration::from_millis(5);
    assert_eq!(c.ns(c.base) - c.ns(earlier), 5_000_000);
}

#[test]
fn startup_checks() {
    assert!(check_startup(&TraceSettings { count: -2, ..Default::default() }).is_err());
    assert!(check_startup(&TraceSettings { rate: 0, ..on("/x") }).is_err());
    assert!(check_startup(&TraceSettings { rate: 0, ..Default::default() }).unwrap().is_none());
    assert!(check_startup(&on("")).unwrap().is_some());
    assert!(check_startup(&on("/x")).unwrap().is_none());
}

#[test]
fn wire_form_lists_every_setting_in_tritons_order() {
    let settings = on("/t.json");
    let w = settings.to_wire();
    let keys: Vec<&str> = w.iter().map(|(k, _)| *k).collect();
    assert_eq!(keys, ["trace_level", "trace_rate", "trace_count", "log_frequency", "trace_file", "trace_mode"]);
    assert_eq!(w[0].1, vec!["TIMESTAMPS"]);
    assert_eq!(w[5].1, vec!["triton"]);
}

/// A span sink that keeps what it is given.
#[derive(Debug, Default)]
struct Kept(Mutex<Vec<opentelemetry_proto::tonic::trace::v1::Span>>);

/// A finished trace's spans, decoded from what [`Finished::encode_spans`] writes with
/// `opentelemetry-proto`'s messages (a run of encoded spans is a `ScopeSpans` message's spans).
fn decoded(trace: &Finished) -> Vec<opentelemetry_proto::tonic::trace::v1::Span> {
    use prost::Message;
    let mut out = EncodedSpans::default();
    let n = trace.encode_spans(&mut out);
    assert_eq!(n, out.len());
    let bytes = out.take_front(n);
    assert!(out.is_empty());
    opentelemetry_proto::tonic::trace::v1::ScopeSpans::decode(bytes.as_slice()).expect("valid OTLP").spans
}

impl SpanSink for Kept {
    fn submit(&self, trace: Finished) {
        let spans = decoded(&trace);
        assert_eq!(spans.len(), trace.len());
        self.0.lock().extend(spans);
    }
    fn dropped(&self) -> u64 {
        0
    }
    fn shutdown(&self) {}
}

fn otel_tracer() -> (Tracer, Arc<Kept>) {
    let kept = Arc::new(Kept::default());
    let settings =
        TraceSettings { level: TraceLevel::TIMESTAMPS, rate: 1, mode: TraceMode::OpenTelemetry, ..Default::default() };
    (Tracer::with_spans(settings, Some(kept.clone())), kept)
}

fn stamp_model(t: &mut Trace, name: &str, compute: bool) {
    t.set_model(name, 1);
    t.stamp_now(Activity::RequestStart);
    t.stamp_now(Activity::QueueStart);
    if compute {
        t.stamp_now(Activity::ComputeStart);
        t.stamp_now(Activity::ComputeEnd);
    }
}

#[test]
fn a_trace_becomes_tritonservers_spans_and_children_hang_under_the_model_span() {
    let (t, kept) = otel_tracer();
    let mut root = t.sample("ens", "r-1").unwrap();
    root.stamp_now(Activity::HttpRecvStart);
    stamp_model(&mut root, "ens", false);
    let link = root.link();
    let mut step = child_of(&link).unwrap();
    step.set_request_id("r-1");
    stamp_model(&mut step, "add1", true);
    step.stamp_now(Activity::RequestEnd);
    drop(step);
    root.stamp_now(Activity::RequestEnd);
    root.stamp_now(Activity::HttpSendEnd);
    drop(root);
    let spans = kept.0.lock();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    // The step's model and compute spans, then the request's front-end and model spans (no compute).
    assert_eq!(names, ["add1", "compute", "InferRequest", "ens"]);
    let by = |n: &str| spans.iter().find(|s| s.name == n).unwrap();
    let trace_id = &by("InferRequest").trace_id;
    assert_eq!(trace_id.len(), 16);
    assert!(spans.iter().all(|s| &s.trace_id == trace_id && s.span_id.len() == 8));
    assert!(by("InferRequest").parent_span_id.is_empty(), "a root span has no parent");
    assert_eq!(by("ens").parent_span_id, by("InferRequest").span_id);
    assert_eq!(by("add1").parent_span_id, by("ens").span_id);
    assert_eq!(by("compute").parent_span_id, by("add1").span_id);
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    let attr = |s: &opentelemetry_proto::tonic::trace::v1::Span, k: &str| {
        s.attributes.iter().find(|kv| kv.key == k).and_then(|kv| kv.value.clone()).and_then(|v| v.value)
    };
    assert_eq!(attr(by("add1"), "triton.trace_parent_id"), attr(by("ens"), "triton.trace_id"));
    assert_eq!(attr(by("ens"), "triton.trace_parent_id"), Some(Value::IntValue(0)));
    assert_eq!(attr(by("ens"), "triton.model_name"), Some(Value::StringValue("ens".into())));
    assert_eq!(attr(by("add1"), "triton.request_id"), Some(Value::StringValue("r-1".into())));
    assert_eq!(attr(by("ens"), "triton.request_id"), Some(Value::StringValue("r-1".into())));
    assert_eq!(attr(by("compute"), "triton.request_id"), None, "only the model span has attributes");
    let events: Vec<&str> = by("ens").events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(events, ["REQUEST_START", "QUEUE_START", "REQUEST_END"]);
    // SERVER spans, status UNSET, sampled, parent not remote; times in Unix nanoseconds, in order.
    let now_ns = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    for s in spans.iter() {
        assert_eq!(s.kind, 2, "{}", s.name);
        assert_eq!(s.status.as_ref().map(|st| st.code), Some(0));
        assert_eq!(s.flags, 0x101, "{}", s.name);
        // Wall-clock times from one reading at start plus the monotonic clock: within a second of now.
        assert!(s.start_time_unix_nano <= s.end_time_unix_nano && s.end_time_unix_nano <= now_ns + 1_000_000_000);
        assert!(now_ns - s.start_time_unix_nano < 60_000_000_000, "{}", s.name);
        assert!(s.events.windows(2).all(|w| w[0].time_unix_nano <= w[1].time_unix_nano));
    }
    let front = by("InferRequest");
    assert!(front.start_time_unix_nano <= by("ens").start_time_unix_nano);
    assert!(front.end_time_unix_nano >= by("compute").end_time_unix_nano, "the front-end span covers the request");
}

#[test]
fn traceparent_continues_the_callers_trace_and_is_always_traced() {
    let (t, kept) = otel_tracer();
    t.update(None, &upd(vec![set("trace_rate", "1000")])).unwrap();
    let caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
    let mut tr = t.sample_in_context("simple", "", Some(caller)).expect("a request with a traceparent is traced");
    tr.stamp_now(Activity::HttpRecvStart);
    drop(tr);
    let spans = kept.0.lock();
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    assert_eq!(hex(&spans[0].trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(hex(&spans[0].parent_span_id), "00f067aa0ba902b7");
    assert_eq!(spans[0].flags, 0x301, "sampled, and the parent is remote");
    drop(spans);
    // A malformed one is sampled as any request (the first of 1000 is not traced).
    assert!(t.sample_in_context("simple", "", Some("00-xyz-01")).is_none());
    for bad in [
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
    ] {
        assert!(otel::parse_traceparent(bad).is_none(), "{bad}");
    }
}

#[test]
fn file_mode_children_carry_parent_id() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    let t = Tracer::new(TraceSettings { count: 1, ..on(&path.display().to_string()) });
    let mut root = t.sample("ens", "").unwrap();
    stamp_model(&mut root, "ens", false);
    let mut step = child_of(&root.link()).unwrap();
    stamp_model(&mut step, "add1", true);
    drop(step);
    assert!(!path.exists() && !dir.path().join("t.json.0").exists(), "the count's last trace is not in yet");
    drop(root);
    // Count 1 is used up and both traces are in: the chunk is written at once.
    let records = read_json(&dir.path().join("t.json.0"));
    let models: Vec<&Value> = records.iter().filter(|r| r.get("model_name").is_some()).collect();
    assert_eq!(models[0]["model_name"], "add1");
    assert_eq!(models[0]["parent_id"], models[1]["id"]);
    assert!(models[1].get("parent_id").is_none());
}

#[test]
fn switching_to_opentelemetry_needs_the_exporter() {
    let t = Tracer::new(on("/t.json"));
    let e = t.update(None, &upd(vec![set("trace_mode", "opentelemetry")])).unwrap_err();
    assert!(e.message.contains("opentelemetry,url"), "{e:?}");
    let (t, _) = otel_tracer();
    assert!(t.update(Some("m"), &upd(vec![set("trace_mode", "triton")])).is_err(), "the mode is global");
    // Back to triton mode needs a file.
    assert!(t.update(None, &upd(vec![set("trace_mode", "triton")])).is_err());
    let settings = t.settings(None);
    let wire = settings.to_wire();
    assert!(wire.iter().all(|(k, _)| *k != "trace_file" && *k != "log_frequency"), "{wire:?}");
}

#[test]
fn encoded_spans_are_taken_in_batches_on_span_boundaries() {
    use prost::Message;
    #[derive(Debug, Default)]
    struct Traces(Mutex<Vec<Finished>>);
    impl SpanSink for Traces {
        fn submit(&self, trace: Finished) {
            self.0.lock().push(trace);
        }
        fn dropped(&self) -> u64 {
            0
        }
        fn shutdown(&self) {}
    }
    let traces = Arc::new(Traces::default());
    let settings =
        TraceSettings { level: TraceLevel::TIMESTAMPS, rate: 1, mode: TraceMode::OpenTelemetry, ..Default::default() };
    let t = Tracer::with_spans(settings, Some(traces.clone()));
    for i in 0..3 {
        let mut tr = t.sample("m", &format!("r{i}")).unwrap();
        tr.stamp_now(Activity::HttpRecvStart);
        stamp_model(&mut tr, "m", true);
        tr.stamp_now(Activity::HttpSendEnd);
    }
    let mut out = EncodedSpans::default();
    for finished in traces.0.lock().iter() {
        assert_eq!(finished.encode_spans(&mut out), 3);
    }
    assert_eq!(out.len(), 9);
    let decode = |b: Vec<u8>| opentelemetry_proto::tonic::trace::v1::ScopeSpans::decode(b.as_slice()).unwrap().spans;
    let first = decode(out.take_front(4));
    assert_eq!(
        first.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ["InferRequest", "m", "compute", "InferRequest"]
    );
    assert_eq!(out.len(), 5);
    let rest = decode(out.take_front(100));
    assert_eq!(rest.len(), 5);
    assert_eq!(rest[0].name, "m");
    assert!(out.is_empty() && out.take_front(1).is_empty());
}
