//! Chat templates: a model's Hugging Face chat template (Jinja, rendered with minijinja as transformers'
//! `apply_chat_template` renders it) turns chat messages into the prompt text the model reads.

use crate::error::{Error, Result};
use crate::proto::inference::ModelConfig;
use minijinja::value::{Kwargs, Value as JValue};
use parking_lot::Mutex;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// The model configuration parameter that holds a template, over any in the model folder.
pub const PARAMETER: &str = "chat_template";
/// The Hugging Face files in the model folder that hold one: the tokenizer configuration's
/// `chat_template`, or (newer transformers) a file of its own.
const TOKENIZER_CONFIG: &str = "tokenizer_config.json";
const TEMPLATE_FILE: &str = "chat_template.jinja";
/// Larger tokenizer files are refused rather than read.
const MAX_FILE_BYTES: u64 = 64 << 20;

/// A model's chat template and the tokenizer's special tokens it may name.
#[derive(Debug)]
pub struct ChatTemplate {
    source: String,
    /// `bos_token`, `eos_token` and the other special tokens of `tokenizer_config.json`.
    tokens: Map<String, Value>,
}

/// The templates read so far, per model name, with the configuration they were read for: a model
/// loaded again (a new configuration) has its files read again.
#[derive(Default)]
pub struct Cache {
    entries: Mutex<HashMap<String, Entry>>,
}

/// What was read for one model: for which configuration, and the template or why there is none.
type Entry = (Arc<ModelConfig>, Result<Arc<ChatTemplate>>);

impl Cache {
    /// The template of model `name` as loaded with `cfg` from `folder`.
    pub fn get(&self, name: &str, cfg: &Arc<ModelConfig>, folder: Option<&Path>) -> Result<Arc<ChatTemplate>> {
        if let Some((seen, t)) = self.entries.lock().get(name) {
            if Arc::ptr_eq(seen, cfg) {
                return t.clone();
            }
        }
        let t = load(cfg, folder, name).map(Arc::new);
        self.entries.lock().insert(name.to_string(), (cfg.clone(), t.clone()));
        t
    }
}

/// Reads a model's template: its configuration's `chat_template` parameter, else the `chat_template` of
/// `tokenizer_config.json` in its folder, else the folder's `chat_template.jinja`. The special tokens
/// come from `tokenizer_config.json` when there is one.
pub fn load(cfg: &ModelConfig, folder: Option<&Path>, name: &str) -> Result<ChatTemplate> {
    let tokenizer = match folder.map(|f| f.join(TOKENIZER_CONFIG)).filter(|p| p.is_file()) {
        Some(path) => Some(read_json(&path)?),
        None => None,
    };
    let tokens = tokenizer.as_ref().map(special_tokens).unwrap_or_default();
    let from_parameter = cfg.parameters.get(PARAMETER).map(|p| p.string_value.clone()).filter(|s| !s.trim().is_empty());
    let source = match from_parameter {
        Some(s) => s,
        None => match tokenizer.as_ref().and_then(|t| template_of(t, name).transpose()).transpose()? {
            Some(s) => s,
            None => match folder.map(|f| f.join(TEMPLATE_FILE)).filter(|p| p.is_file()) {
                Some(path) => read_text(&path)?,
                None => {
                    return Err(Error::invalid(format!(
                        "model '{name}' has no chat template, so it cannot serve chat completions: give it a \
                         '{PARAMETER}' parameter in config.pbtxt, or a {TOKENIZER_CONFIG} with '{PARAMETER}' \
                         (or a {TEMPLATE_FILE}) in its model folder; /v1/completions takes a plain prompt"
                    )))
                }
            },
        },
    };
    Ok(ChatTemplate { source, tokens })
}

fn read_text(path: &Path) -> Result<String> {
    let cannot = |e: &dyn std::fmt::Display| Error::internal(format!("cannot read {}: {e}", path.display()));
    let len = std::fs::metadata(path).map_err(|e| cannot(&e))?.len();
    if len > MAX_FILE_BYTES {
        return Err(cannot(&format!("it is {len} bytes, over the limit of {MAX_FILE_BYTES}")));
    }
    std::fs::read_to_string(path).map_err(|e| cannot(&e))
}

fn read_json(path: &Path) -> Result<Value> {
    serde_json::from_str(&read_text(path)?)
        .map_err(|e| Error::internal(format!("{} is not valid JSON: {e}", path.display())))
}

/// The `chat_template` of a tokenizer configuration: a string, or a list of named templates of which
/// the one named "default" (else the first) is used.
fn template_of(tokenizer: &Value, name: &str) -> Result<Option<String>> {
    let wrong = || {
        Error::internal(format!("the '{PARAMETER}' of model '{name}''s {TOKENIZER_CONFIG} is neither a string nor a list of named templates"))
    };
    match tokenizer.get(PARAMETER) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Array(named)) => {
            let pick =
                named.iter().find(|t| t.get("name").and_then(Value::as_str) == Some("default")).or(named.first());
            pick.and_then(|t| t.get("template")).and_then(Value::as_str).map(|s| Some(s.to_string())).ok_or_else(wrong)
        }
        Some(_) => Err(wrong()),
    }
}

/// The special tokens a tokenizer configuration names (`bos_token`, `eos_token`, ...): each a string, or
/// an added-token object whose `content` is the string.
fn special_tokens(tokenizer: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    let Some(obj) = tokenizer.as_object() else { return out };
    for (k, v) in obj {
        if !k.ends_with("_token") {
            continue;
        }
        let text = match v {
            Value::String(s) => Some(s.clone()),
            Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_string),
            _ => None,
        };
        if let Some(t) = text {
            out.insert(k.clone(), Value::String(t));
        }
    }
    if let Some(extra) = obj.get("additional_special_tokens") {
        out.insert("additional_special_tokens".into(), extra.clone());
    }
    out
}

impl ChatTemplate {
    /// Renders the messages into the prompt: `messages`, `add_generation_prompt`, `tools` and the special
    /// tokens are the template's variables, with transformers' `raise_exception` and `strftime_now`. A
    /// template that does not compile is the server's fault (500); one that fails on these messages
    /// (`raise_exception`, say, on roles out of order) is the client's (400).
    pub fn render(
        &self,
        model: &str,
        messages: &[JValue],
        add_generation_prompt: bool,
        tools: Option<&JValue>,
    ) -> Result<String> {
        let env = environment();
        let template = env
            .template_from_str(&self.source)
            .map_err(|e| Error::internal(format!("the chat template of model '{model}' does not compile: {e:#}")))?;
        let ctx = minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            tools => tools,
            ..JValue::from(minijinja::value::Serde(&self.tokens))
        };
        template.render(ctx).map_err(|e| {
            Error::invalid(format!("the chat template of model '{model}' failed on these messages: {e:#}"))
        })
    }
}

/// A Jinja environment as transformers sets one up for chat templates: blocks trim their newline and
/// leading space, Python's string and dict methods work, and JSON is written as Python's `json.dumps`
/// writes it.
fn environment() -> minijinja::Environment<'static> {
    let mut env = minijinja::Environment::new();
    if let Ok(syntax) = minijinja::syntax::SyntaxConfig::builder().trim_blocks(true).lstrip_blocks(true).build() {
        env.set_syntax(syntax);
    }
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", |message: String| -> std::result::Result<JValue, minijinja::Error> {
        Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, message))
    });
    env.add_function("strftime_now", |format: String| strftime(&format, unix_now()));
    env.add_filter("tojson", tojson);
    env
}

/// `tojson` as transformers defines it: `json.dumps` with non-ASCII kept, `", "` and `": "` between
/// items, or `indent` spaces per level; strings are not HTML-escaped (minijinja's own filter does).
fn tojson(value: JValue, kwargs: Kwargs) -> std::result::Result<JValue, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let mut out = Vec::new();
    let written = match indent {
        Some(n) => {
            let pad = vec![b' '; n];
            let mut ser =
                serde_json::Serializer::with_formatter(&mut out, serde_json::ser::PrettyFormatter::with_indent(&pad));
            serde::Serialize::serialize(&value, &mut ser)
        }
        None => serde::Serialize::serialize(&value, &mut serde_json::Serializer::with_formatter(&mut out, PySpaced)),
    };
    written.map_err(|e| {
        minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, format!("cannot write JSON: {e}"))
    })?;
    Ok(JValue::from_safe_string(String::from_utf8_lossy(&out).into_owned()))
}

/// Python `json.dumps`'s default separators.
struct PySpaced;

impl serde_json::ser::Formatter for PySpaced {
    fn begin_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];

/// `strftime_now` for templates that put today's date in the system prompt (Llama 3.2): the usual
/// `%Y %y %m %d %B %b %A %a %H %M %S %%` directives in UTC; any other directive is kept as written.
pub fn strftime(format: &str, unix: i64) -> String {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let month = MONTHS[(m - 1) as usize];
    // 1970-01-01 was a Thursday.
    let weekday = WEEKDAYS[(days + 3).rem_euclid(7) as usize];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => out.push_str(&format!("{:02}", y.rem_euclid(100))),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('B') => out.push_str(month),
            Some('b') => out.push_str(&month[..3]),
            Some('A') => out.push_str(weekday),
            Some('a') => out.push_str(&weekday[..3]),
            Some('H') => out.push_str(&format!("{:02}", secs / 3600)),
            Some('M') => out.push_str(&format!("{:02}", secs / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", secs % 60)),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// The proleptic Gregorian (year, month, day) of a count of days since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}
