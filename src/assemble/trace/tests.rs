//! Unit tests of `assemble/trace.rs`.

use super::*;
use crate::config::Cli;
use clap::Parser;

fn trace(args: &[&str]) -> Result<(TraceSettings, Vec<String>)> {
    let mut all = vec!["tritonrs"];
    all.extend_from_slice(args);
    trace_config(&Cli::try_parse_from(all).unwrap().serve).map(|(s, _, w)| (s, w))
}

#[test]
fn trace_config_parses_as_tritonserver_does() {
    let (s, warnings) = trace(&[
        "--trace-config",
        "triton,file=/tmp/t.json",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config",
        "level=tensors",
        "--trace-config",
        "rate=2",
        "--trace-config",
        "count=-1",
        "--trace-config",
        "triton,log-frequency=5",
        "--trace-config",
        "mode=triton",
    ])
    .unwrap();
    assert_eq!(s.file, "/tmp/t.json");
    assert_eq!(s.level, TraceLevel::TIMESTAMPS.union(TraceLevel::TENSORS));
    assert_eq!((s.rate, s.count, s.log_frequency), (2, -1, 5));
    assert!(warnings.is_empty(), "{warnings:?}");
    // Defaults: off, rate 1000.
    let (s, _) = trace(&[]).unwrap();
    assert_eq!(s, TraceSettings::default());
}

#[test]
fn deprecated_trace_flags_still_work_and_lose_to_trace_config() {
    let (s, warnings) = trace(&[
        "--trace-file=/a.json",
        "--trace-level=TIMESTAMPS",
        "--trace-rate=7",
        "--trace-count=-1",
        "--trace-log-frequency=2",
        "--trace-config",
        "rate=3",
    ])
    .unwrap();
    assert_eq!(
        (s.file.as_str(), s.level, s.rate, s.count, s.log_frequency),
        ("/a.json", TraceLevel::TIMESTAMPS, 3, -1, 2)
    );
    assert_eq!(warnings.len(), 5, "{warnings:?}");
    // Any OFF wins.
    let (s, _) = trace(&["--trace-level=TIMESTAMPS", "--trace-config", "level=OFF"]).unwrap();
    assert!(s.level.is_off());
}

#[test]
fn bad_trace_config_is_rejected() {
    for bad in [
        &["--trace-config", "level"][..],
        &["--trace-config", "level=loud"],
        &["--trace-config", "rate=abc"],
        &["--trace-config", "rate=-1"],
        &["--trace-config", "count=-2"],
        &["--trace-config", "mode=zipkin"],
        &["--trace-config", "opentelemetry,bogus=x"],
        &["--trace-config", "opentelemetry,resource=novalue"],
        &["--trace-config", "opentelemetry,bsp_max_queue_size=many"],
        &["--trace-config", "triton,rate=5"],
        &["--trace-config", "file=/x"],
        &["--trace-config", "level=TIMESTAMPS", "--trace-config", "triton,file=/x", "--trace-config", "rate=0"],
    ] {
        assert!(trace(bad).is_err(), "{bad:?}");
    }
    // Tracing without a file starts, with a warning (tritonserver starts and traces nothing).
    let (_, warnings) = trace(&["--trace-config", "level=TIMESTAMPS"]).unwrap();
    assert_eq!(warnings.len(), 1);
}

#[test]
fn opentelemetry_settings_are_reported_as_tritonserver_does() {
    let mut all = vec!["tritonrs"];
    all.extend_from_slice(&[
        "--trace-config=mode=opentelemetry",
        "--trace-config=opentelemetry,url=http://c:4318/v1/traces",
        "--trace-config=opentelemetry,resource=a=1",
        "--trace-config=opentelemetry,resource=b=2",
        "--trace-config=opentelemetry,bsp_max_export_batch_size=8",
    ]);
    let (s, otel, warnings) = trace_config(&Cli::try_parse_from(all).unwrap().serve).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(s.mode, TraceMode::OpenTelemetry);
    let otel = otel.expect("the exporter's settings");
    assert_eq!(otel.url, "http://c:4318/v1/traces");
    assert_eq!(otel.resource, [("a".to_string(), "1".to_string()), ("b".to_string(), "2".to_string())]);
    assert_eq!((otel.bsp_max_export_batch_size, otel.bsp_max_queue_size, otel.bsp_schedule_delay_ms), (8, 2048, 5000));
    let report: Vec<(&str, &str)> = s.exporter.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(
        report,
        [
            ("url", "http://c:4318/v1/traces"),
            ("resource", "b=2"),
            ("bsp_max_export_batch_size", "8"),
            ("bsp_schedule_delay", "5000"),
            ("bsp_max_queue_size", "2048"),
        ]
    );
    // Triton mode without any opentelemetry setting starts no exporter.
    assert!(trace_config(&Cli::try_parse_from(["tritonrs"]).unwrap().serve).unwrap().1.is_none());
}
