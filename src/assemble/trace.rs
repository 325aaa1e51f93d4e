//! The start-up trace settings from the flags: `--trace-config` and the deprecated `--trace-*` flags,
//! combined as tritonserver combines them.

use crate::config::ServeArgs;
use crate::core::trace::{self, TraceLevel, TraceSettings, TRACE_MODE};
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
            format!("--trace-config mode={value}: tritonrs only has the trace mode '{TRACE_MODE}' (no opentelemetry)")
        }
        Some("triton") => {
            format!("--trace-config triton,{setting}: unknown setting (the triton mode has file and log-frequency)")
        }
        Some(m) => format!("--trace-config {m},...: unknown trace mode '{m}' (tritonrs only has '{TRACE_MODE}')"),
        None => format!(
            "--trace-config {setting}: unknown setting (use level, rate, count, mode, or triton,file and \
             triton,log-frequency)"
        ),
    })
}

/// The start-up trace settings from `--trace-config` and the deprecated `--trace-*` flags, as
/// tritonserver combines them: `--trace-config` wins over a deprecated flag, levels from both
/// combine, and any OFF turns tracing off. Also returns warnings to log (deprecated flags used,
/// tracing without a file).
pub fn trace_settings(args: &ServeArgs) -> Result<(TraceSettings, Vec<String>)> {
    let mut warnings = Vec::new();
    let mut s = TraceSettings::default();
    let mut level = TraceLevel::OFF;
    let mut off = false;
    let deprecated = |flag: &str, instead: &str| {
        format!(
            "'--{flag}' is deprecated and will be removed in future releases; use '--trace-config {instead}' instead."
        )
    };
    if let Some(f) = &args.trace_file {
        warnings.push(deprecated("trace-file", "triton,file=<path>"));
        s.file = f.clone();
    }
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
            (None, "mode") if value.eq_ignore_ascii_case(TRACE_MODE) => {}
            (Some("triton"), "file") => s.file = value.to_string(),
            (Some("triton"), "log-frequency") => s.log_frequency = trace_number(setting, value)?,
            (mode, _) => return Err(bad_setting(mode, setting, value)),
        }
    }
    // As in tritonserver, one OFF anywhere disables tracing whatever else is given.
    s.level = if off { TraceLevel::OFF } else { level };
    if let Some(w) = trace::check_startup(&s)? {
        warnings.push(w);
    }
    Ok((s, warnings))
}

#[cfg(test)]
mod tests;
