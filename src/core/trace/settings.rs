//! Trace settings as the trace extension reports and updates them, and the rules (Triton's
//! `TraceManager`) by which a model's setting mirrors the global one.

use crate::error::{Error, Result};

/// What a trace records: Triton's `TRITONSERVER_InferenceTraceLevel` bits. Levels combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TraceLevel(u8);

impl TraceLevel {
    /// Tracing disabled.
    pub const OFF: TraceLevel = TraceLevel(0);
    /// The request's timestamps (the only level whose records tritonrs writes).
    pub const TIMESTAMPS: TraceLevel = TraceLevel(1);
    /// Tensor contents; accepted and reported, but tritonrs writes no tensor records.
    pub const TENSORS: TraceLevel = TraceLevel(2);

    pub fn is_off(self) -> bool {
        self.0 == 0
    }

    pub fn contains(self, other: TraceLevel) -> bool {
        other.0 != 0 && self.0 & other.0 == other.0
    }

    pub fn union(self, other: TraceLevel) -> TraceLevel {
        TraceLevel(self.0 | other.0)
    }

    /// The level as Triton lists it: `["OFF"]`, or the levels that are on.
    pub fn names(self) -> Vec<&'static str> {
        if self.is_off() {
            return vec!["OFF"];
        }
        let mut names = Vec::with_capacity(2);
        if self.contains(TraceLevel::TIMESTAMPS) {
            names.push("TIMESTAMPS");
        }
        if self.contains(TraceLevel::TENSORS) {
            names.push("TENSORS");
        }
        names
    }

    /// One level name as the settings API takes it (OFF, TIMESTAMPS, TENSORS; any case).
    fn parse_api(s: &str) -> Result<TraceLevel> {
        match s.to_ascii_uppercase().as_str() {
            "OFF" => Ok(TraceLevel::OFF),
            "TIMESTAMPS" => Ok(TraceLevel::TIMESTAMPS),
            "TENSORS" => Ok(TraceLevel::TENSORS),
            _ => Err(Error::invalid(format!("'{s}' is not a trace level: use OFF, TIMESTAMPS or TENSORS"))),
        }
    }

    /// One level as tritonserver's `--trace-config level=` and `--trace-level` take it, with its aliases
    /// (false/off, true/on/min/max/timestamps, tensors), in any case.
    pub fn parse_flag(s: &str) -> Result<TraceLevel> {
        match s.to_ascii_lowercase().as_str() {
            "off" | "false" => Ok(TraceLevel::OFF),
            "timestamps" | "true" | "on" | "min" | "max" => Ok(TraceLevel::TIMESTAMPS),
            "tensors" => Ok(TraceLevel::TENSORS),
            _ => Err(Error::invalid(format!("'{s}' is not a trace level: use OFF, TIMESTAMPS or TENSORS"))),
        }
    }
}

/// One trace setting's values: what `GET /v2/trace/setting` reports, and the start-up values from the
/// command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceSettings {
    pub level: TraceLevel,
    /// Every `rate`-th request is traced.
    pub rate: u32,
    /// Traces still to take; -1 is no limit. Counts down as requests are traced.
    pub count: i32,
    /// Write the trace file in chunks `<file>.<n>` of this many traces; 0 writes `<file>` at shutdown.
    pub log_frequency: u32,
    /// The trace file; fixed at start.
    pub file: String,
    /// Where traces go: tritonserver's trace file, or OpenTelemetry spans.
    pub mode: TraceMode,
    /// The OpenTelemetry exporter's settings as the settings API reports them in that mode (the
    /// `opentelemetry,*` flags given, then the batch span processor's); fixed at start.
    pub exporter: Vec<(String, String)>,
}

impl Default for TraceSettings {
    /// tritonserver's defaults: off, rate 1000, no count limit, written at shutdown, no file.
    fn default() -> Self {
        TraceSettings {
            level: TraceLevel::OFF,
            rate: 1000,
            count: -1,
            log_frequency: 0,
            file: String::new(),
            mode: TraceMode::Triton,
            exporter: Vec::new(),
        }
    }
}

/// tritonserver's trace modes (`--trace-config mode=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TraceMode {
    /// Triton's trace file (`--trace-config triton,file=`).
    #[default]
    Triton,
    /// Spans exported over OTLP/HTTP (`--trace-config opentelemetry,url=`).
    OpenTelemetry,
}

impl TraceMode {
    pub fn name(self) -> &'static str {
        match self {
            TraceMode::Triton => "triton",
            TraceMode::OpenTelemetry => "opentelemetry",
        }
    }

    /// A mode as `--trace-config mode=` and the settings API name it, in any case.
    pub fn parse(s: &str) -> Result<TraceMode> {
        match s.to_ascii_lowercase().as_str() {
            "triton" => Ok(TraceMode::Triton),
            "opentelemetry" => Ok(TraceMode::OpenTelemetry),
            _ => Err(Error::invalid(format!("'{s}' is not a trace mode: use triton or opentelemetry"))),
        }
    }
}

/// The OpenTelemetry exporter's settings (`--trace-config opentelemetry,<setting>=<value>`), fixed at
/// start; the defaults are tritonserver's (and the OpenTelemetry SDK's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtelSettings {
    /// The collector's OTLP/HTTP traces endpoint.
    pub url: String,
    /// Resource attributes added to every span (`resource=key=value`, repeatable).
    pub resource: Vec<(String, String)>,
    /// Spans queued for export at most; more are dropped (and counted).
    pub bsp_max_queue_size: usize,
    /// How long the exporter waits to fill a batch, in milliseconds.
    pub bsp_schedule_delay_ms: u64,
    /// Spans sent in one export at most.
    pub bsp_max_export_batch_size: usize,
}

impl Default for OtelSettings {
    fn default() -> Self {
        OtelSettings {
            url: "http://localhost:4318/v1/traces".to_string(),
            resource: Vec::new(),
            bsp_max_queue_size: 2048,
            bsp_schedule_delay_ms: 5000,
            bsp_max_export_batch_size: 512,
        }
    }
}

impl TraceSettings {
    /// The settings as the protocol carries them: each value a list of strings, in Triton's order.
    pub fn to_wire(&self) -> Vec<(&str, Vec<String>)> {
        if self.mode == TraceMode::OpenTelemetry {
            // As tritonserver reports this mode: no file, no log frequency, the exporter's settings.
            let mut wire = vec![
                ("trace_level", self.level.names().into_iter().map(String::from).collect()),
                ("trace_rate", vec![self.rate.to_string()]),
                ("trace_count", vec![self.count.to_string()]),
                ("trace_mode", vec![self.mode.name().to_string()]),
            ];
            wire.extend(self.exporter.iter().map(|(k, v)| (k.as_str(), vec![v.clone()])));
            return wire;
        }
        vec![
            ("trace_level", self.level.names().into_iter().map(String::from).collect()),
            ("trace_rate", vec![self.rate.to_string()]),
            ("trace_count", vec![self.count.to_string()]),
            ("log_frequency", vec![self.log_frequency.to_string()]),
            ("trace_file", vec![self.file.clone()]),
            ("trace_mode", vec![self.mode.name().to_string()]),
        ]
    }

    /// Why this setting cannot trace anything, as Triton words it; `None` when it can.
    pub(super) fn invalid_reason(&self) -> Option<&'static str> {
        if self.level.is_off() {
            Some("tracing is disabled")
        } else if self.rate == 0 {
            Some("sample rate must be non-zero")
        } else if self.file.is_empty() && self.mode == TraceMode::Triton {
            Some("trace file name is not given (start the server with --trace-config triton,file=PATH)")
        } else {
            None
        }
    }
}

/// One setting's value in an update request: a list of strings, or a request to clear it (JSON
/// `null` over HTTP, an empty list over gRPC), which makes a model's setting follow the global one
/// again and the global one return to its start-up value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettingValue {
    Clear,
    Set(Vec<String>),
}

/// A parsed settings update. Each field: `None` leaves it alone, `Some(None)` clears it, `Some(Some(v))`
/// sets it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceUpdate {
    pub level: Option<Option<TraceLevel>>,
    pub rate: Option<Option<u32>>,
    pub count: Option<Option<i32>>,
    pub log_frequency: Option<Option<u32>>,
    /// A new trace mode for the setting (the exporter or file it needs is set at start).
    pub mode: Option<TraceMode>,
}

/// The value of a setting that takes exactly one string.
fn single<'a>(key: &str, values: &'a [String]) -> Result<&'a str> {
    match values {
        [v] => Ok(v),
        _ => Err(Error::invalid(format!("trace setting '{key}' takes exactly one value, got {}", values.len()))),
    }
}

impl TraceUpdate {
    /// Reads an update from the protocol's (setting, value) pairs; nothing is applied if any is wrong.
    pub fn parse(settings: Vec<(String, SettingValue)>) -> Result<TraceUpdate> {
        // As in tritonserver, asking to move the file wins over every other problem in the request.
        if settings.iter().any(|(k, _)| k == "trace_file") {
            return Err(Error::unsupported(
                "the trace file location cannot be updated through the API; it is set at start with \
                 --trace-config triton,file=PATH",
            ));
        }
        let mut u = TraceUpdate::default();
        for (key, value) in settings {
            let values = match value {
                SettingValue::Clear => {
                    match key.as_str() {
                        "trace_level" => u.level = Some(None),
                        "trace_rate" => u.rate = Some(None),
                        "trace_count" => u.count = Some(None),
                        "log_frequency" => u.log_frequency = Some(None),
                        "trace_mode" => {}
                        other => return Err(unknown_setting(other)),
                    }
                    continue;
                }
                SettingValue::Set(values) => values,
            };
            match key.as_str() {
                // An empty list of levels changes nothing, as in tritonserver's HTTP API.
                "trace_level" if values.is_empty() => {}
                "trace_level" => u.level = Some(Some(parse_levels(&values)?)),
                "trace_rate" => {
                    let v = single(&key, &values)?;
                    let rate = v.parse::<u32>().map_err(|_| {
                        Error::invalid(format!("trace_rate must be an integer from 0 to {}, got '{v}'", u32::MAX))
                    })?;
                    u.rate = Some(Some(rate));
                }
                "trace_count" => {
                    let v = single(&key, &values)?;
                    let count = v.parse::<i32>().ok().filter(|c| *c >= -1).ok_or_else(|| {
                        Error::invalid(format!(
                            "trace_count must be an integer from -1 (no limit) to {}, got '{v}'",
                            i32::MAX
                        ))
                    })?;
                    u.count = Some(Some(count));
                }
                "log_frequency" => {
                    let v = single(&key, &values)?;
                    let f = v.parse::<u32>().map_err(|_| {
                        Error::invalid(format!("log_frequency must be an integer from 0 to {}, got '{v}'", u32::MAX))
                    })?;
                    u.log_frequency = Some(Some(f));
                }
                "trace_mode" => u.mode = Some(TraceMode::parse(single(&key, &values)?)?),
                other => return Err(unknown_setting(other)),
            }
        }
        Ok(u)
    }
}

fn unknown_setting(key: &str) -> Error {
    Error::invalid(format!(
        "unknown trace setting '{key}': expected trace_level, trace_rate, trace_count or log_frequency"
    ))
}

/// A list of levels from the settings API: they combine, and OFF must stand alone.
fn parse_levels(values: &[String]) -> Result<TraceLevel> {
    let mut level = TraceLevel::OFF;
    for v in values {
        let l = TraceLevel::parse_api(v)?;
        if l.is_off() && values.len() > 1 {
            return Err(Error::invalid("trace level OFF cannot be combined with other levels"));
        }
        level = level.union(l);
    }
    Ok(level)
}

/// Which fields of a setting were set explicitly; the others mirror the level above (a model's
/// setting mirrors the global one, the global one mirrors the start-up values).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Specified {
    pub level: bool,
    pub rate: bool,
    pub count: bool,
    pub log_frequency: bool,
}

impl Specified {
    pub fn none(self) -> bool {
        !(self.level || self.rate || self.count || self.log_frequency)
    }
}

/// One field of Triton's `UpdateTraceSettingInternal`: cleared → not specified (take the fallback);
/// set → specified with the new value; untouched → keeps whether it was specified and its current value.
fn merge_field<T: Copy>(update: Option<Option<T>>, current: Option<(T, bool)>, fallback: T) -> (T, bool) {
    match update {
        Some(None) => (fallback, false),
        Some(Some(v)) => (v, true),
        None => match current {
            Some((v, true)) => (v, true),
            _ => (fallback, false),
        },
    }
}

/// The values and flags of a setting after `update`, given its current values (with the count still
/// remaining) and what it mirrors. The file is never per setting, so it comes from `fallback`.
pub(super) fn merge(
    current: Option<(&TraceSettings, Specified)>,
    fallback: &TraceSettings,
    update: &TraceUpdate,
) -> (TraceSettings, Specified) {
    let (level, level_s) = merge_field(update.level, current.map(|(s, sp)| (s.level, sp.level)), fallback.level);
    let (rate, rate_s) = merge_field(update.rate, current.map(|(s, sp)| (s.rate, sp.rate)), fallback.rate);
    let (count, count_s) = merge_field(update.count, current.map(|(s, sp)| (s.count, sp.count)), fallback.count);
    let (log_frequency, lf_s) = merge_field(
        update.log_frequency,
        current.map(|(s, sp)| (s.log_frequency, sp.log_frequency)),
        fallback.log_frequency,
    );
    (
        TraceSettings {
            level,
            rate,
            count,
            log_frequency,
            file: fallback.file.clone(),
            exporter: fallback.exporter.clone(),
            mode: update.mode.or(current.map(|(s, _)| s.mode)).unwrap_or(fallback.mode),
        },
        Specified { level: level_s, rate: rate_s, count: count_s, log_frequency: lf_s },
    )
}

/// Refuses a merged setting that asks to trace but cannot, as tritonserver does: a setting that turns
/// tracing off may be incomplete.
pub(super) fn validate(merged: &TraceSettings, update: &TraceUpdate) -> Result<()> {
    if merged.level.is_off() {
        return Ok(());
    }
    if let Some(reason) = merged.invalid_reason() {
        return Err(Error::invalid(format!("invalid trace setting: {reason}")));
    }
    if update.count == Some(Some(0)) {
        return Err(Error::invalid(
            "invalid trace setting: trace_count 0 would trace nothing; set trace_level to OFF to stop tracing",
        ));
    }
    Ok(())
}
