//! Parses Triton `config.pbtxt` model configurations and converts them to and from JSON.

// Parsing goes through prost-reflect's dynamic text-format parser and is then transcoded into
// the generated `ModelConfig`. Two things are added on top of prost-reflect:
//
// * A pre-pass inserts the optional `:` in `input [ { ... } ]`. The text-format spec allows a
//   field name followed directly by a list, Triton configs use it everywhere, and
//   prost-reflect 0.16 rejects it.
// * Errors are mapped back to line and column of the text the user wrote, and name the field
//   they concern.

use std::fmt;
use std::ops::Range;

use prost::Message;
use prost_reflect::text_format::{FormatOptions, ParseError};
use prost_reflect::{DeserializeOptions, DynamicMessage, FieldDescriptor, Kind, MessageDescriptor, SerializeOptions};

use crate::error::Error;
use crate::proto::inference::ModelConfig;
use crate::proto::model_config_descriptor;

/// A model configuration error, positioned in the file it came from.
///
/// `line` and `column` are 1-based (column counts characters); both are 0 when the error has
/// no position. Displays as `models/simple/config.pbtxt:12:5: field 'max_batch_sizee': ...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// File the text came from, as given by the caller.
    pub file: String,
    /// 1-based line, or 0 if unknown.
    pub line: u32,
    /// 1-based column in characters, or 0 if unknown.
    pub column: u32,
    /// The field the error concerns, when there is one.
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.column)?;
        }
        f.write_str(": ")?;
        if let Some(field) = &self.field {
            write!(f, "field '{field}': ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Parses a model configuration in protobuf text format (the contents of `config.pbtxt`).
///
/// `file` is only used to label errors.
pub fn parse_config(text: &str, file: &str) -> Result<ModelConfig, ConfigError> {
    // Editors on Windows like to prepend a byte order mark; it is not part of the text.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let descriptor = model_config_descriptor();
    let tokens = tokenize(text);
    let patched = insert_list_colons(text, &tokens, &descriptor);

    let message = DynamicMessage::parse_text_format(descriptor.clone(), &patched.text)
        .map_err(|err| locate_error(&err, text, &tokens, &patched, &descriptor, file))?;
    ModelConfig::decode(message.encode_to_vec().as_slice()).map_err(|err| ConfigError {
        file: file.to_owned(),
        line: 0,
        column: 0,
        field: None,
        message: format!("parsed config does not decode as ModelConfig ({err}); this is a bug"),
    })
}

/// Converts a configuration to JSON the way Triton's `GET /v2/models/<m>/config` prints it.
///
/// Proto field names, enum value names, every non-message field even when it holds its
/// default, and 64-bit integers as JSON numbers (Triton post-processes its JSON the same way).
/// Message fields that are not set, including unset `oneof` members, are left out, as
/// protobuf's JSON printer does.
pub fn config_to_json(cfg: &ModelConfig) -> serde_json::Value {
    let options =
        SerializeOptions::new().use_proto_field_name(true).skip_default_fields(false).stringify_64_bit_integers(false);
    // Serialize to text rather than straight into a `serde_json::Value`: the value serializer
    // widens f32 to f64 (0.1 becomes 0.10000000149011612), the text writer prints the shortest
    // f32 representation, which is what Triton shows.
    let mut json = Vec::new();
    to_dynamic(cfg)
        .serialize_with_options(&mut serde_json::Serializer::new(&mut json), &options)
        .expect("serializing a model config into a byte buffer cannot fail; this is a bug");
    let mut value =
        serde_json::from_slice(&json).expect("JSON written by serde_json does not parse back; this is a bug");
    integral_floats_to_integers(&mut value);
    value
}

/// Rewrites whole-valued floats such as `1.0` as `1`.
///
/// protobuf's C++ JSON printer (and so Triton) prints float fields with integral values without
/// a fraction, e.g. `"fp32_false_true":[0,1]`. Integer fields are never printed as floats, so
/// only float fields are affected. Values beyond 2^53 stay floats, as they may not be exact.
fn integral_floats_to_integers(value: &mut serde_json::Value) {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    match value {
        serde_json::Value::Number(number) => {
            let whole = number.as_f64().filter(|f| number.is_f64() && f.fract() == 0.0 && f.abs() <= EXACT);
            if let Some(whole) = whole {
                // In range by the filter above, so the conversion is exact.
                *number = serde_json::Number::from(whole as i64);
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(integral_floats_to_integers),
        serde_json::Value::Object(fields) => fields.values_mut().for_each(integral_floats_to_integers),
        _ => {}
    }
}

/// Parses a configuration from JSON, as passed in the `config` parameter of a model load
/// request.
///
/// Accepts proto or camelCase field names, 64-bit integers as numbers or strings, and enums by
/// name or number. Unknown fields are rejected.
pub fn config_from_json(json: &str) -> crate::error::Result<ModelConfig> {
    let mut deserializer = serde_json::Deserializer::from_str(json);
    let message = DynamicMessage::deserialize_with_options(
        model_config_descriptor(),
        &mut deserializer,
        &DeserializeOptions::new().deny_unknown_fields(true),
    )
    .map_err(|err| Error::invalid(format!("invalid model config JSON: {err}")))?;
    deserializer.end().map_err(|err| Error::invalid(format!("invalid model config JSON: {err}")))?;
    ModelConfig::decode(message.encode_to_vec().as_slice())
        .map_err(|err| Error::internal(format!("parsed config does not decode as ModelConfig ({err}); this is a bug")))
}

/// Formats a configuration in protobuf text format, for logs and config validation output.
///
/// Fields holding their default value are left out; the result parses back with
/// [`parse_config`] to an equal configuration.
pub fn config_to_pbtxt(cfg: &ModelConfig) -> String {
    let options = FormatOptions::new().pretty(true).print_message_fields_in_index_order(true);
    let mut text = to_dynamic(cfg).to_text_format_with_options(&options);
    if !text.is_empty() {
        text.push('\n');
    }
    text
}

/// Reflective view of a configuration, for the conversions prost-reflect provides.
fn to_dynamic(cfg: &ModelConfig) -> DynamicMessage {
    DynamicMessage::decode(model_config_descriptor(), cfg.encode_to_vec().as_slice())
        .expect("ModelConfig does not decode against its own descriptor; this is a bug")
}

// ---------------------------------------------------------------------------------------------
// Tokens
// ---------------------------------------------------------------------------------------------

/// Token classes the pre-pass and error locator need; far coarser than the real lexer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TokenKind {
    Ident,
    /// Integer or float literal, including any malformed tail the real lexer will reject.
    Number,
    /// String literal in either quote style, possibly unterminated.
    Str,
    /// A single ASCII punctuation character.
    Punct(u8),
    /// Anything else (non-ASCII outside strings, control characters).
    Other,
}

#[derive(Debug, Clone, Copy)]
struct Token {
    kind: TokenKind,
    start: usize,
    end: usize,
}

/// Splits text-format input into tokens, skipping whitespace and `#` comments.
///
/// String literals are recognized the way the text format defines them (either quote, backslash
/// escapes, ending at the line end if unterminated), so `#` and brackets inside them are inert.
fn tokenize(text: &str) -> Vec<Token> {
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        let kind = match bytes[i] {
            b' ' | b'\t' | b'\r' | b'\n' | 0x0b | 0x0c => {
                i += 1;
                continue;
            }
            b'#' => {
                i = bytes[i..].iter().position(|&b| b == b'\n').map_or(bytes.len(), |n| i + n);
                continue;
            }
            quote @ (b'"' | b'\'') => {
                i = string_end(bytes, i, quote);
                TokenKind::Str
            }
            b'0'..=b'9' => {
                i = number_end(bytes, i);
                TokenKind::Number
            }
            b'.' if bytes.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                i = number_end(bytes, i);
                TokenKind::Number
            }
            b'A'..=b'Z' | b'a'..=b'z' | b'_' => {
                i += 1;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                TokenKind::Ident
            }
            b if b.is_ascii_punctuation() => {
                i += 1;
                TokenKind::Punct(b)
            }
            _ => {
                // Step over a whole character so token bounds stay on char boundaries.
                i += text[i..].chars().next().map_or(1, char::len_utf8);
                TokenKind::Other
            }
        };
        tokens.push(Token { kind, start, end: i });
    }
    tokens
}

/// End of the string literal opening at `start`: after the closing quote, or at the end of the
/// line (or input) if it is unterminated.
fn string_end(bytes: &[u8], start: usize, quote: u8) -> usize {
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'\n' => return i,
            b if b == quote => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

/// End of the number starting at `start`, covering exponents and suffixes like `1e-3f`.
fn number_end(bytes: &[u8], start: usize) -> usize {
    let hex = bytes[start] == b'0' && matches!(bytes.get(start + 1), Some(b'x' | b'X'));
    let mut i = start;
    while i < bytes.len() {
        let b = bytes[i];
        let exponent_sign = matches!(b, b'+' | b'-') && !hex && i > start && matches!(bytes[i - 1], b'e' | b'E');
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || exponent_sign {
            i += 1;
        } else {
            break;
        }
    }
    i
}

// ---------------------------------------------------------------------------------------------
// Structure tracking
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FrameKind {
    /// `{ ... }` or `< ... >`, or the top level: holds fields.
    Message,
    /// `[ ... ]` after a field name: holds values.
    List,
    /// `[ ... ]` where a field name is expected: an extension or Any type name.
    TypeName,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    FieldName,
    /// After a field name: `:` or a message value.
    Separator,
    /// After `:`.
    Value,
}

#[derive(Debug, Clone)]
struct Frame {
    kind: FrameKind,
    /// The field whose value this frame is; `None` at the top level.
    owner: Option<String>,
    /// Offset and character of the opening bracket; `None` at the top level.
    open: Option<(usize, char)>,
    /// Message type of this frame (for lists: of their elements), if known.
    desc: Option<MessageDescriptor>,
    /// Field most recently named in this message.
    field: Option<String>,
    expect: Expect,
}

/// Follows the nesting of messages and lists token by token, to know which field and message
/// type any position belongs to.
///
/// It is deliberately forgiving: it only has to be right for input prost-reflect accepts (where
/// it decides colon insertion) and up to the first error (where it names the field).
struct Walker<'a> {
    text: &'a str,
    stack: Vec<Frame>,
}

impl<'a> Walker<'a> {
    fn new(text: &'a str, root: &MessageDescriptor) -> Self {
        Walker {
            text,
            stack: vec![Frame {
                kind: FrameKind::Message,
                owner: None,
                open: None,
                desc: Some(root.clone()),
                field: None,
                expect: Expect::FieldName,
            }],
        }
    }

    /// Walks every token that starts before `offset`.
    fn run_until(text: &'a str, tokens: &[Token], root: &MessageDescriptor, offset: usize) -> Self {
        let mut walker = Walker::new(text, root);
        for token in tokens.iter().take_while(|t| t.start < offset) {
            walker.step(token);
        }
        walker
    }

    fn top(&self) -> &Frame {
        self.stack.last().expect("walker stack lost its root frame; this is a bug")
    }

    fn top_mut(&mut self) -> &mut Frame {
        self.stack.last_mut().expect("walker stack lost its root frame; this is a bug")
    }

    /// Whether `token` is a field name followed directly by `[`, i.e. a list without the
    /// optional colon.
    fn is_colonless_list(&self, token: &Token, next: Option<&Token>) -> bool {
        let top = self.top();
        top.kind == FrameKind::Message
            && top.expect == Expect::FieldName
            && token.kind == TokenKind::Ident
            && next.is_some_and(|n| n.kind == TokenKind::Punct(b'['))
    }

    fn step(&mut self, token: &Token) {
        let kind = self.top().kind;
        match (kind, token.kind) {
            (FrameKind::Message, _) => self.step_in_message(token),
            (FrameKind::List, TokenKind::Punct(b'{' | b'<')) => self.open_message(token),
            (FrameKind::List | FrameKind::TypeName, TokenKind::Punct(b']')) => self.close(),
            (FrameKind::List | FrameKind::TypeName, _) => {}
        }
    }

    fn step_in_message(&mut self, token: &Token) {
        let expect = self.top().expect;
        match token.kind {
            TokenKind::Punct(b'}' | b'>') => self.close(),
            TokenKind::Punct(b'{' | b'<') if expect != Expect::FieldName => self.open_message(token),
            TokenKind::Punct(b'[') => self.open_bracket(token, expect),
            TokenKind::Punct(b':') if expect == Expect::Separator => {
                self.top_mut().expect = Expect::Value;
            }
            TokenKind::Ident if expect == Expect::FieldName => {
                let name = self.text[token.start..token.end].to_owned();
                let top = self.top_mut();
                top.field = Some(name);
                top.expect = Expect::Separator;
            }
            TokenKind::Ident | TokenKind::Number | TokenKind::Str if expect == Expect::Value => {
                // A scalar value ends the field. The field name is kept for error messages.
                self.top_mut().expect = Expect::FieldName;
            }
            // Separators, a sign before a number, the tail of concatenated strings, and
            // anything prost-reflect will reject on its own.
            _ => {}
        }
    }

    fn open_bracket(&mut self, token: &Token, expect: Expect) {
        let open = Some((token.start, '['));
        if expect == Expect::FieldName {
            self.stack.push(Frame {
                kind: FrameKind::TypeName,
                owner: None,
                open,
                desc: None,
                field: None,
                expect: Expect::FieldName,
            });
        } else {
            let top = self.top();
            let owner = top.field.clone();
            let desc = child_message(top.desc.as_ref(), owner.as_deref());
            self.stack.push(Frame { kind: FrameKind::List, owner, open, desc, field: None, expect: Expect::Value });
        }
    }

    fn open_message(&mut self, token: &Token) {
        let top = self.top();
        let (owner, desc) = match top.kind {
            FrameKind::List => (top.owner.clone(), top.desc.clone()),
            _ => (top.field.clone(), child_message(top.desc.as_ref(), top.field.as_deref())),
        };
        let bracket = if token.kind == TokenKind::Punct(b'<') { '<' } else { '{' };
        self.stack.push(Frame {
            kind: FrameKind::Message,
            owner,
            open: Some((token.start, bracket)),
            desc,
            field: None,
            expect: Expect::FieldName,
        });
    }

    fn close(&mut self) {
        let closed = if self.stack.len() > 1 { self.stack.pop() } else { None };
        let top = self.top_mut();
        if top.kind == FrameKind::Message {
            if closed.is_some_and(|c| c.kind == FrameKind::TypeName) {
                // `[ext.name]` stands where a field name would.
                top.field = None;
                top.expect = Expect::Separator;
            } else {
                top.expect = Expect::FieldName;
            }
        }
    }

    /// The field being set at the current position: inside its value, or the one whose
    /// message or list the position is in.
    fn current_field(&self) -> Option<String> {
        let top = self.top();
        if top.kind == FrameKind::Message && top.expect != Expect::FieldName {
            top.field.clone()
        } else {
            top.owner.clone()
        }
    }

    /// Descriptor of [`Self::current_field`], if it is a known field.
    fn current_field_descriptor(&self) -> Option<FieldDescriptor> {
        let top = self.top();
        let (desc, name) = if top.kind == FrameKind::Message && top.expect != Expect::FieldName {
            (top.desc.as_ref(), top.field.as_deref())
        } else {
            let parent = self.stack.len().checked_sub(2).map(|i| &self.stack[i])?;
            (parent.desc.as_ref(), top.owner.as_deref())
        };
        desc?.get_field_by_name(name?)
    }

    /// The innermost bracket still open at end of input, if the input ends while it waits
    /// for more content or its closing bracket (rather than in the middle of a field).
    fn unclosed(&self) -> Option<(usize, char, Option<String>)> {
        let top = self.top();
        let waiting_for_close = top.kind != FrameKind::Message || top.expect == Expect::FieldName;
        match top.open {
            Some((offset, bracket)) if waiting_for_close => Some((offset, bracket, top.owner.clone())),
            _ => None,
        }
    }
}

/// Message type of field `name` of `desc`, if both are known and the field holds messages
/// (map fields give their entry type, with `key` and `value` fields).
fn child_message(desc: Option<&MessageDescriptor>, name: Option<&str>) -> Option<MessageDescriptor> {
    match desc?.get_field_by_name(name?)?.kind() {
        Kind::Message(message) => Some(message),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Colon insertion
// ---------------------------------------------------------------------------------------------

/// Parser input with the optional colons inserted, and where they went.
struct Patched {
    text: String,
    /// Offsets in the original text where a `:` was inserted, ascending.
    insertions: Vec<usize>,
}

impl Patched {
    /// Maps an offset in the patched text back to the original text. An offset pointing at an
    /// inserted colon maps to where it was inserted (just after the field name).
    fn to_original(&self, offset: usize) -> usize {
        let before = self.insertions.iter().enumerate().take_while(|&(index, &at)| at + index < offset).count();
        offset - before
    }
}

/// Rewrites `name [` to `name: [` wherever a field name is followed by a list without a colon,
/// which the text-format spec allows but prost-reflect does not accept.
fn insert_list_colons(text: &str, tokens: &[Token], root: &MessageDescriptor) -> Patched {
    let mut walker = Walker::new(text, root);
    let mut insertions = Vec::new();
    for (index, token) in tokens.iter().enumerate() {
        if walker.is_colonless_list(token, tokens.get(index + 1)) {
            insertions.push(token.end);
        }
        walker.step(token);
    }

    let mut patched = String::with_capacity(text.len() + insertions.len());
    let mut copied = 0;
    for &at in &insertions {
        patched.push_str(&text[copied..at]);
        patched.push(':');
        copied = at;
    }
    patched.push_str(&text[copied..]);
    Patched { text: patched, insertions }
}

// ---------------------------------------------------------------------------------------------
// Error reporting
// ---------------------------------------------------------------------------------------------

/// What prost-reflect's error carries beyond its message.
struct ErrorDetails {
    /// Name of the `ParseErrorKind` variant, e.g. `FieldNotFound`.
    kind: String,
    /// Byte range in the parsed (patched) text.
    span: Option<Range<usize>>,
}

/// Pulls the error kind and span out of a prost-reflect text-format error.
///
/// prost-reflect 0.16 exposes the span only through miette's `Diagnostic` (an optional feature
/// we do not enable), so this reads the derived `Debug` output, which has the form
/// `ParseError { kind: Variant { ..., span: 12..20 } }` with `span` as the last field of every
/// variant that has one. If that shape ever changes the error simply loses its position; the
/// tests pin the shape.
fn error_details(err: &ParseError) -> ErrorDetails {
    let debug = format!("{err:?}");
    let kind = debug
        .split_once("kind: ")
        .map(|(_, rest)| rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect())
        .unwrap_or_default();
    let span = debug.strip_suffix(" } }").and_then(|rest| rest.rsplit_once("span: ")).and_then(|(_, range)| {
        let (start, end) = range.split_once("..")?;
        Some(start.parse().ok()?..end.parse().ok()?)
    });
    ErrorDetails { kind, span }
}

/// Turns a prost-reflect parse error into a [`ConfigError`] positioned in the original text.
fn locate_error(
    err: &ParseError,
    original: &str,
    tokens: &[Token],
    patched: &Patched,
    root: &MessageDescriptor,
    file: &str,
) -> ConfigError {
    let details = error_details(err);
    let mut message = err.to_string();
    let mut field = None;
    let mut offset = None;

    if let Some(span) = details.span {
        let start = patched.to_original(span.start);
        let walker = Walker::run_until(original, tokens, root, start);
        let found = patched.text.get(span).unwrap_or_default();
        match details.kind.as_str() {
            "FieldNotFound" => {
                field = Some(found.to_owned());
                if let Some(desc) = &walker.top().desc {
                    message = format!("no such field in {}", desc.full_name());
                    let names: Vec<String> = desc.fields().map(|f| f.name().to_owned()).collect();
                    if let Some(similar) = closest(found, names.iter().map(String::as_str)) {
                        message.push_str(&format!("; did you mean '{similar}'?"));
                    }
                }
            }
            "EnumValueNotFound" => {
                field = walker.current_field();
                let values = walker.current_field_descriptor().and_then(|f| f.kind().as_enum().cloned());
                if let Some(values) = values {
                    let names: Vec<String> = values.values().map(|v| v.name().to_owned()).collect();
                    if let Some(similar) = closest(found, names.iter().map(String::as_str)) {
                        message.push_str(&format!("; did you mean '{similar}'?"));
                    }
                }
            }
            "FieldAlreadySet" => {
                field = walker.current_field();
                message = "set more than once, but it is not a repeated field".to_owned();
            }
            _ => field = walker.current_field(),
        }
        offset = Some(start);
    } else if details.kind == "UnexpectedEof" {
        let walker = Walker::run_until(original, tokens, root, original.len());
        match walker.unclosed() {
            Some((at, bracket, owner)) => {
                message = format!("'{bracket}' is never closed ({message})");
                field = owner;
                offset = Some(at);
            }
            None => {
                field = walker.current_field();
                offset = Some(original.len());
            }
        }
    }

    let (line, column) = offset.map_or((0, 0), |offset| line_column(original, offset));
    ConfigError { file: file.to_owned(), line, column, field, message }
}

/// 1-based line and character column of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (u32, u32) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
    let column = before[line_start..].chars().count() + 1;
    (u32::try_from(line).unwrap_or(u32::MAX), u32::try_from(column).unwrap_or(u32::MAX))
}

/// The candidate closest to a misspelled `name`, if one is close enough to be a likely typo and no other
/// candidate is as close (`TYPE_INT23` suggests `TYPE_INT32`, one transposition away, and nothing when
/// two candidates tie).
pub fn closest<'c>(name: &str, candidates: impl Iterator<Item = &'c str>) -> Option<&'c str> {
    let limit = (name.chars().count() / 3).clamp(1, 3);
    let mut scored: Vec<(usize, &str)> = candidates
        .map(|candidate| (edit_distance(name, candidate), candidate))
        .filter(|&(distance, _)| distance <= limit)
        .collect();
    scored.sort_by_key(|&(distance, _)| distance);
    match scored.as_slice() {
        [(_, only)] => Some(only),
        [(best, candidate), (next, _), ..] if best < next => Some(candidate),
        _ => None,
    }
}

/// Edit distance with adjacent transpositions (optimal string alignment), case-insensitive: a swapped
/// pair of characters or a wrongly cased name is one typo.
fn edit_distance(a: &str, b: &str) -> usize {
    strsim::osa_distance(&a.to_ascii_lowercase(), &b.to_ascii_lowercase())
}

#[cfg(test)]
mod tests;
