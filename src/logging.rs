//! Logging: tracing set up from Triton's `--log-*` flags, adjustable at run time by the logging API.

use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::path::PathBuf;
use std::sync::Arc;
use tracing_subscriber::{filter::LevelFilter, fmt, layer::SubscriberExt, reload, util::SubscriberInitExt, Registry};

/// The logging settings, as the logging extension reports them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LogSettings {
    pub log_file: String,
    pub log_info: bool,
    pub log_warning: bool,
    pub log_error: bool,
    pub log_verbose_level: u32,
    pub log_format: String,
}

impl Default for LogSettings {
    /// tritonserver's defaults: info, warnings and errors to standard error, no verbose output.
    fn default() -> Self {
        LogSettings {
            log_file: String::new(),
            log_info: true,
            log_warning: true,
            log_error: true,
            log_verbose_level: 0,
            log_format: "default".into(),
        }
    }
}

impl LogSettings {
    fn level(&self) -> LevelFilter {
        if self.log_verbose_level > 1 {
            LevelFilter::TRACE
        } else if self.log_verbose_level == 1 {
            LevelFilter::DEBUG
        } else if self.log_info {
            LevelFilter::INFO
        } else if self.log_warning {
            LevelFilter::WARN
        } else if self.log_error {
            LevelFilter::ERROR
        } else {
            LevelFilter::OFF
        }
    }
}

/// A partial update from `POST /v2/logging`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogUpdate {
    pub log_file: Option<String>,
    pub log_info: Option<bool>,
    pub log_warning: Option<bool>,
    pub log_error: Option<bool>,
    pub log_verbose_level: Option<u32>,
    pub log_format: Option<String>,
}

/// Reads and changes the live logging settings.
#[derive(Clone)]
pub struct LogControl {
    /// The current settings.
    settings: Arc<Mutex<LogSettings>>,
    /// Swaps the level filter without restarting the subscriber; `None` in tests without a subscriber.
    reload: Option<reload::Handle<LevelFilter, Registry>>,
}

impl LogControl {
    /// A control that only records settings (for tests and for `validate`).
    pub fn detached(settings: LogSettings) -> Self {
        LogControl { settings: Arc::new(Mutex::new(settings)), reload: None }
    }

    pub fn get(&self) -> LogSettings {
        self.settings.lock().clone()
    }

    /// Applies an update; the log file and format are fixed at start, as in Triton.
    pub fn update(&self, u: LogUpdate) -> Result<LogSettings> {
        let mut s = self.settings.lock();
        if let Some(f) = u.log_file.as_ref().filter(|f| **f != s.log_file) {
            return Err(Error::invalid(format!("log_file cannot be changed at run time (asked for '{f}')")));
        }
        if let Some(f) = u.log_format.as_ref().filter(|f| **f != s.log_format) {
            return Err(Error::invalid(format!("log_format cannot be changed at run time (asked for '{f}')")));
        }
        let mut next = s.clone();
        if let Some(v) = u.log_info {
            next.log_info = v;
        }
        if let Some(v) = u.log_warning {
            next.log_warning = v;
        }
        if let Some(v) = u.log_error {
            next.log_error = v;
        }
        if let Some(v) = u.log_verbose_level {
            next.log_verbose_level = v;
        }
        if let Some(h) = &self.reload {
            h.reload(next.level()).map_err(|e| Error::internal(format!("cannot change the log level: {e}")))?;
        }
        *s = next.clone();
        Ok(next)
    }
}

/// Whether standard error is systemd's journal: systemd sets `JOURNAL_STREAM=<dev>:<inode>` to the
/// stream it connects, and a child whose stderr was redirected elsewhere still inherits the variable.
fn stderr_is_journal() -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some(stream) = std::env::var_os("JOURNAL_STREAM") else { return false };
    let Ok(meta) = std::fs::metadata("/proc/self/fd/2") else { return false };
    stream.to_str() == Some(&format!("{}:{}", meta.dev(), meta.ino()))
}

/// The journal's priority prefix (sd-daemon(3)) for a level: `<3>` error, `<4>` warning, `<6>` info,
/// `<7>` debug and trace.
pub fn journal_prefix(level: &tracing::Level) -> &'static [u8] {
    match *level {
        tracing::Level::ERROR => b"<3>",
        tracing::Level::WARN => b"<4>",
        tracing::Level::INFO => b"<6>",
        _ => b"<7>",
    }
}

/// Standard error with each event's line prefixed by its journal priority.
struct JournalStderr;

/// One event's writer: the prefix goes out with the first write (the formatter writes a whole line
/// at once).
struct PrefixedStderr {
    prefix: Option<&'static [u8]>,
}

impl std::io::Write for PrefixedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut err = std::io::stderr().lock();
        match self.prefix.take() {
            Some(p) => {
                let mut line = Vec::with_capacity(p.len() + buf.len());
                line.extend_from_slice(p);
                line.extend_from_slice(buf);
                err.write_all(&line)?;
            }
            None => err.write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

impl<'a> fmt::MakeWriter<'a> for JournalStderr {
    type Writer = PrefixedStderr;

    fn make_writer(&'a self) -> PrefixedStderr {
        PrefixedStderr { prefix: None }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> PrefixedStderr {
        PrefixedStderr { prefix: Some(journal_prefix(meta.level())) }
    }
}

/// Installs the global subscriber. Logs go to standard error, or to `log_file`.
pub fn init(settings: LogSettings) -> Result<LogControl> {
    let (filter, handle) = reload::Layer::new(settings.level());
    let iso = settings.log_format.eq_ignore_ascii_case("ISO8601");
    if !iso && settings.log_format != "default" {
        return Err(Error::invalid(format!(
            "--log-format must be 'default' or 'ISO8601', got '{}'",
            settings.log_format
        )));
    }
    let writer: fmt::writer::BoxMakeWriter = if settings.log_file.is_empty() && stderr_is_journal() {
        fmt::writer::BoxMakeWriter::new(JournalStderr)
    } else if settings.log_file.is_empty() {
        fmt::writer::BoxMakeWriter::new(std::io::stderr)
    } else {
        let path = PathBuf::from(&settings.log_file);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| Error::invalid(format!("cannot open --log-file '{}': {e}", path.display())))?;
        fmt::writer::BoxMakeWriter::new(std::sync::Mutex::new(file))
    };
    let layer = fmt::layer().with_writer(writer).with_target(false).with_ansi(false);
    let registry = tracing_subscriber::registry().with(filter);
    let installed = if iso {
        registry.with(layer).try_init()
    } else {
        registry.with(layer.with_timer(fmt::time::uptime())).try_init()
    };
    installed.map_err(|e| Error::internal(format!("cannot install the log subscriber: {e}")))?;
    Ok(LogControl { settings: Arc::new(Mutex::new(settings)), reload: Some(handle) })
}

#[cfg(test)]
mod tests;
