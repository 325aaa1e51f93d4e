//! Unit tests of `assemble/trace.rs`.

use super::*;
use crate::config::Cli;
use clap::Parser;

fn trace(args: &[&str]) -> Result<(TraceSettings, Vec<String>)> {
    let mut all = vec!["tritonrs"];
    all.extend_from_slice(args);
    trace_settings(&Cli::try_parse_from(all).unwrap().serve)
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
        &["--trace-config", "mode=opentelemetry"],
        &["--trace-config", "opentelemetry,url=x"],
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
