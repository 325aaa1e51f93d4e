//! The configuration file (`/etc/tritonrs/tritonrs.toml`, or `--config PATH`): every command-line
//! setting under its flag's name, e.g. `model-repository = ["/var/lib/tritonrs/models"]`,
//! `http-port = 8000`.
//!
//! Its values become the flags' defaults, so that clap's own order gives file < `TRITONRS_*`
//! environment < command line. Each value is checked with its flag's parser first, so an unknown key or
//! a wrong type is an error naming the key and the file's line, and the server does not start.

use clap::builder::ValueRange;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// Where the server looks when no `--config` or `TRITONRS_CONFIG` is given; a missing file there is
/// no error.
pub const DEFAULT_PATH: &str = "/etc/tritonrs/tritonrs.toml";

/// One setting from the file: the flag's long name, its values as command-line text, and its line.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub key: String,
    pub values: Vec<String>,
    pub line: usize,
}

/// A parsed configuration file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConfigFile {
    pub path: PathBuf,
    pub entries: Vec<Entry>,
}

/// The configuration file named by `--config PATH` / `--config=PATH` in `args` (the program name
/// first), else by `TRITONRS_CONFIG` (`env`), else the default path if it exists. The bool says whether
/// it was named explicitly (then it must exist).
pub fn locate(args: &[OsString], env: Option<OsString>) -> Option<(PathBuf, bool)> {
    let mut named = None;
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        if a == "--" {
            break;
        }
        if a == "--config" {
            named = it.next().map(PathBuf::from);
        } else if let Some(v) = a.to_str().and_then(|s| s.strip_prefix("--config=")) {
            named = Some(PathBuf::from(v));
        }
    }
    match named.or_else(|| env.filter(|v| !v.is_empty()).map(PathBuf::from)) {
        Some(p) => Some((p, true)),
        None => Path::new(DEFAULT_PATH).exists().then(|| (PathBuf::from(DEFAULT_PATH), false)),
    }
}

/// 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

impl ConfigFile {
    /// Reads and parses `path`; values are not yet checked against the flags (see [`ConfigFile::apply`]).
    pub fn read(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the configuration file '{}': {e}", path.display()))?;
        Self::parse(&text, path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<Self, String> {
        let at = |line: usize| format!("{}:{line}", path.display());
        let table: BTreeMap<Spanned<String>, Spanned<toml::Value>> = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| line_of(text, s.start)).unwrap_or(1);
            format!("{}: {}", at(line), e.message().trim_end())
        })?;
        let mut entries = Vec::new();
        for (key, value) in table {
            let line = line_of(text, key.span().start);
            let name = key.into_inner();
            let scalar = |v: &toml::Value| -> Result<String, String> {
                match v {
                    toml::Value::String(s) => Ok(s.clone()),
                    toml::Value::Integer(i) => Ok(i.to_string()),
                    toml::Value::Float(f) => Ok(f.to_string()),
                    toml::Value::Boolean(b) => Ok(b.to_string()),
                    toml::Value::Datetime(_) => Err(format!("{}: '{name}': a date is not a valid value", at(line))),
                    toml::Value::Array(_) => Err(format!("{}: '{name}': a list may not hold lists", at(line))),
                    toml::Value::Table(_) => Err(format!("{}: '{name}': a list may not hold tables", at(line))),
                }
            };
            let values = match value.into_inner() {
                toml::Value::Table(_) => {
                    return Err(format!("{}: unknown section '[{name}]'", at(line)));
                }
                toml::Value::Array(items) => items.iter().map(scalar).collect::<Result<Vec<_>, _>>()?,
                v => vec![scalar(&v)?],
            };
            entries.push(Entry { key: name, values, line });
        }
        entries.sort_by_key(|e| e.line);
        Ok(ConfigFile { path: path.to_path_buf(), entries })
    }

    /// The keys whose values differ between two readings of the file (added and removed ones too).
    pub fn changed_keys(old: Option<&ConfigFile>, new: Option<&ConfigFile>) -> Vec<String> {
        let values = |f: Option<&ConfigFile>| -> BTreeMap<String, Vec<String>> {
            f.map(|f| f.entries.iter().map(|e| (e.key.clone(), e.values.clone())).collect()).unwrap_or_default()
        };
        let (a, b) = (values(old), values(new));
        let mut keys: Vec<String> = a.keys().chain(b.keys()).filter(|k| a.get(*k) != b.get(*k)).cloned().collect();
        keys.dedup();
        keys.sort();
        keys.dedup();
        keys
    }

    /// Makes every entry the default of its flag in `cmd`, after checking it with the flag's parser.
    /// Keys that `cmd` does not know are errors unless `others` (the other commands sharing the file)
    /// know them.
    pub fn apply(&self, mut cmd: clap::Command, others: &[&clap::Command]) -> Result<clap::Command, String> {
        for e in &self.entries {
            let at = format!("{}:{}", self.path.display(), e.line);
            if e.key == "config" {
                return Err(format!("{at}: 'config' cannot be set in a configuration file"));
            }
            let Some(arg) = cmd.get_arguments().find(|a| a.get_long() == Some(e.key.as_str())).cloned() else {
                if others.iter().any(|c| c.get_arguments().any(|a| a.get_long() == Some(e.key.as_str()))) {
                    continue;
                }
                let longs = cmd
                    .get_arguments()
                    .chain(others.iter().flat_map(|c| c.get_arguments()))
                    .filter_map(|a| a.get_long());
                let hint = match crate::model_config::pbtxt::closest(&e.key, longs) {
                    Some(near) => format!("; did you mean '{near}'?"),
                    None => " (settings are the command-line flags' names)".to_string(),
                };
                return Err(format!("{at}: unknown setting '{}'{hint}", e.key));
            };
            let many = arg.get_num_args().unwrap_or(ValueRange::SINGLE).max_values() > 1
                || matches!(arg.get_action(), clap::ArgAction::Append)
                || arg.get_value_delimiter().is_some();
            if e.values.len() != 1 && !many {
                return Err(format!("{at}: '{}' takes one value, not a list", e.key));
            }
            if matches!(arg.get_action(), clap::ArgAction::SetTrue | clap::ArgAction::SetFalse) {
                if let Some(v) = e.values.iter().find(|v| *v != "true" && *v != "false") {
                    return Err(format!("{at}: '{}': '{v}' is not a boolean (use true or false)", e.key));
                }
                cmd = cmd.mut_arg(arg.get_id().clone(), |a| a.default_value(e.values[0].clone()));
                continue;
            }
            // Each value goes through the flag's own parser, in a command holding only that flag.
            let check = clap::Command::new("check").no_binary_name(true).arg(arg.clone().required(false));
            for v in &e.values {
                check.clone().try_get_matches_from([OsString::from(format!("--{}={v}", e.key))]).map_err(|err| {
                    let text = err.to_string();
                    let first = text.lines().next().unwrap_or("").trim_start_matches("error: ").to_string();
                    format!("{at}: '{}': {first}", e.key)
                })?;
            }
            let values: Vec<clap::builder::OsStr> =
                e.values.iter().map(|v| clap::builder::OsStr::from(v.clone())).collect();
            cmd = cmd.mut_arg(arg.get_id().clone(), |a| a.default_values(values));
        }
        Ok(cmd)
    }
}

#[cfg(test)]
mod tests;
