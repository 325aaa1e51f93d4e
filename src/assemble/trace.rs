//! The start-up trace settings from the flags: `--trace-config` and the deprecated `--trace-*` flags,
//! combined as tritonserver combines them.

use crate::config::ServeArgs;
use crate::core::trace::{self, OtelSettings, TraceLevel, TraceMode, TraceSettings};
use crate::error::{Error, Result};

/// A `--trace-config` number, with the flag in the error.
fn trace_number<T: std::str::FromStr>(setting: &str, value: &str) -> Result<T> {
    value
        .parse()
        .map_err(|_| Error::invalid(format!("--trace-config {setting}={value}: '{value}' is not a valid number")))
}

/// Why a `--trace-config` setting is refused.
fn bad_setting(mode: Option<&str>, setting: &str, value: &str) -> Error {
    Error::invalid(match mode {
        None if setting == "mode" => {
            format!("--trace-config mode={value}: unknown trace mode (use triton or opentelemetry)")
        }
        Some("triton") => {
            format!("--trace-config triton,{setting}: unknown setting (the triton mode has file and log-frequency)")
        }
        Some("opentelemetry") => format!(
            "--trace-config opentelemetry,{setting}: unknown setting (the opentelemetry mode has url, resource, \
             bsp_max_queue_size, bsp_schedule_delay and bsp_max_export_batch_size)"
        ),
        Some(m) => format!("--trace-config {m},...: unknown trace mode '{m}' (use triton or opentelemetry)"),
        None => format!(
            "--trace-config {setting}: unknown setting (use level, rate, count, mode, triton,file, \
             triton,log-frequency or opentelemetry,url)"
        ),
    })
}

/// The deprecated `--trace-*` flags: the settings they give, their combined level, and a warning for
/// each flag used.
fn deprecated_flags(args: &ServeArgs) -> Result<(TraceSettings, TraceLevel, Vec<String>)> {
    let mut warnings = Vec::new();
    let mut s = TraceSettings::default();
    let mut level = TraceLevel::OFF;
    let deprecated = |flag: &str, instead: &str| {
        format!(
            "'--{flag}' is deprecated and will be removed in future releases; use '--trace-config {instead}' instead."
        )
    };
    if let Some(f) = &args.trace_file {
        warnings.push(deprecated("trace-file", "triton,file=<path>"));
        s.file = f.clone();
    }
    let mut off = false;
    for l in &args.trace_level {
        let parsed = TraceLevel::parse_flag(l).map_err(|e| Error::invalid(format!("--trace-level: {}", e.message)))?;
        off |= parsed.is_off();
        level = level.union(parsed);
    }
    if !args.trace_level.is_empty() {
        warnings.push(deprecated("trace-level", "level=<OFF|TIMESTAMPS|TENSORS>"));
    }
    if let Some(r) = args.trace_rate {
        warnings.push(deprecated("trace-rate", "rate=<N>"));
        s.rate = r;
    }
    if let Some(c) = args.trace_count {
        warnings.push(deprecated("trace-count", "count=<N>"));
        s.count = c;
    }
    if let Some(f) = args.trace_log_frequency {
        warnings.push(deprecated("trace-log-frequency", "triton,log-frequency=<N>"));
        s.log_frequency = f;
    }
    // Any OFF among the deprecated levels turns tracing off, as one in --trace-config does.
    Ok((s, if off { TraceLevel::OFF } else { level }, warnings))
}

/// One `opentelemetry,<setting>=<value>`, applied to `otel`.
fn otel_setting(otel: &mut OtelSettings, setting: &str, value: &str) -> Result<bool> {
    match setting {
        "url" => otel.url = value.to_string(),
        "resource" => {
            let (k, v) = value.split_once('=').ok_or_else(|| {
                Error::invalid(format!("--trace-config opentelemetry,resource={value}: must be key=value"))
            })?;
            otel.resource.push((k.to_string(), v.to_string()));
        }
        "bsp_max_queue_size" => otel.bsp_max_queue_size = trace_number(setting, value)?,
        "bsp_schedule_delay" => otel.bsp_schedule_delay_ms = trace_number(setting, value)?,
        "bsp_max_export_batch_size" => otel.bsp_max_export_batch_size = trace_number(setting, value)?,
        _ => return Ok(false),
    }
    Ok(true)
}

/// The batch span processor's environment variables, which tritonserver reads too (flags win).
fn otel_from_env() -> Result<OtelSettings> {
    let mut otel = OtelSettings::default();
    for (var, setting) in [
        ("OTEL_BSP_MAX_QUEUE_SIZE", "bsp_max_queue_size"),
        ("OTEL_BSP_SCHEDULE_DELAY", "bsp_schedule_delay"),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "bsp_max_export_batch_size"),
    ] {
        if let Ok(v) = std::env::var(var) {
            otel_setting(&mut otel, setting, &v).map_err(|e| Error::invalid(format!("{var}: {}", e.message)))?;
        }
    }
    Ok(otel)
}

/// The start-up trace settings from `--trace-config` and the deprecated `--trace-*` flags, as
/// tritonserver combines them: `--trace-config` wins over a deprecated flag, levels from both
/// combine, and any OFF turns tracing off. Also returns the OpenTelemetry exporter's settings, when
/// the mode is opentelemetry or any `opentelemetry,*` setting is given (the settings API may switch
/// to that mode later), and warnings to log (deprecated flags used, tracing without a file).
pub fn trace_config(args: &ServeArgs) -> Result<(TraceSettings, Option<OtelSettings>, Vec<String>)> {
    let mut otel = otel_from_env()?;
    let mut given: Vec<(String, String)> = Vec::new();
    let (mut s, mut level, mut warnings) = deprecated_flags(args)?;
    let mut off = level.is_off() && !args.trace_level.is_empty();
    for arg in &args.trace_config {
        let format_error = || {
            Error::invalid(format!(
                "--trace-config must be '<setting>=<value>' or 'triton,<setting>=<value>', got '{arg}'"
            ))
        };
        let (setting, value) = arg.split_once('=').ok_or_else(format_error)?;
        let (mode, setting) = match setting.split_once(',') {
            Some((mode, setting)) => (Some(mode), setting),
            None => (None, setting),
        };
        if setting.is_empty() || value.is_empty() {
            return Err(format_error());
        }
        let mode = mode.map(str::to_ascii_lowercase);
        match (mode.as_deref(), setting) {
            (None, "level") => {
                let parsed = TraceLevel::parse_flag(value)
                    .map_err(|e| Error::invalid(format!("--trace-config level={value}: {}", e.message)))?;
                off |= parsed.is_off();
                level = level.union(parsed);
            }
            (None, "rate") => s.rate = trace_number(setting, value)?,
            (None, "count") => s.count = trace_number(setting, value)?,
            (None, "mode") => s.mode = TraceMode::parse(value).map_err(|_| bad_setting(None, setting, value))?,
            (Some("triton"), "file") => s.file = value.to_string(),
            (Some("triton"), "log-frequency") => s.log_frequency = trace_number(setting, value)?,
            (Some("opentelemetry"), _) if otel_setting(&mut otel, setting, value)? => {
                given.retain(|(k, _)| k != setting);
                given.push((setting.to_string(), value.to_string()));
            }
            (mode, _) => return Err(bad_setting(mode, setting, value)),
        }
    }
    // As in tritonserver, one OFF anywhere disables tracing whatever else is given.
    s.level = if off { TraceLevel::OFF } else { level };
    if let Some(w) = trace::check_startup(&s)? {
        warnings.push(w);
    }
    let exporter = (s.mode == TraceMode::OpenTelemetry || !given.is_empty()).then_some(otel);
    s.exporter = exporter.as_ref().map(|otel| exporter_report(given, otel)).unwrap_or_default();
    if s.mode == TraceMode::OpenTelemetry {
        if args.trace_file.is_some() {
            warnings.push("'--trace-file' is deprecated and will be ignored with opentelemetry tracing mode.".into());
        }
        if args.trace_log_frequency.is_some() {
            warnings.push(
                "'--trace-log-frequency' is deprecated and will be ignored with opentelemetry tracing mode.".into(),
            );
        }
    }
    Ok((s, exporter, warnings))
}

/// The exporter's settings as tritonserver's settings API reports them: the `opentelemetry,*` flags
/// as given (the last of a repeated one), then each batch span processor setting not given.
fn exporter_report(mut given: Vec<(String, String)>, otel: &OtelSettings) -> Vec<(String, String)> {
    for (key, value) in [
        ("bsp_schedule_delay", otel.bsp_schedule_delay_ms.to_string()),
        ("bsp_max_export_batch_size", otel.bsp_max_export_batch_size.to_string()),
        ("bsp_max_queue_size", otel.bsp_max_queue_size.to_string()),
    ] {
        if !given.iter().any(|(k, _)| k == key) {
            given.push((key.to_string(), value));
        }
    }
    given
}

#[cfg(test)]
mod tests;
