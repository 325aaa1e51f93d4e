//! Request payloads and result messages: what a PUBLISH asks for (an image, a KServe v2 JSON request
//! or a binary-tensor request) and the JSON that answers it.

use crate::core::trace::{Activity, Trace};
use crate::core::Server;
use crate::error::{Error, ErrorKind, Result};
use crate::kserve::{self, JsonParams, KeyOrder, Outputs};
use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use std::time::Instant;

/// The user property that carries a binary-tensor request's JSON length, as the HTTP header does.
pub const HEADER_LEN: &str = "Inference-Header-Content-Length";

/// What a payload is, recognised by content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A JPEG or PNG image (the format, sniffed once here).
    Image(crate::vision::Format),
    /// A KServe v2 JSON inference request.
    Json,
    /// A JSON header of this many bytes, then tensor data.
    Binary(usize),
}

/// A user property by name (names compared without case).
pub fn user_prop<'a>(user: &'a [(String, String)], name: &str) -> Option<&'a str> {
    user.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

/// Recognises the payload.
pub fn kind(payload: &[u8], user: &[(String, String)]) -> Result<Kind> {
    if let Some(v) = user_prop(user, HEADER_LEN) {
        let n = v
            .trim()
            .parse::<usize>()
            .map_err(|_| Error::invalid(format!("{HEADER_LEN} must be a non-negative integer, got '{v}'")))?;
        return Ok(Kind::Binary(n));
    }
    if let Some(format) = crate::vision::preprocess::format_of(payload) {
        return Ok(Kind::Image(format));
    }
    if payload.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        return Ok(Kind::Json);
    }
    Err(Error::invalid(
        "the payload is neither a JPEG or PNG image nor a KServe v2 JSON request (a binary-tensor request needs \
         the user property Inference-Header-Content-Length)",
    ))
}

/// A request's id: the `request_id` user property, else a JSON request's `id`. The JSON of a payload
/// that is `too_large` is not read: it is refused unread.
pub fn request_id(user: &[(String, String)], payload: &[u8], too_large: bool) -> Option<String> {
    if let Some(id) = user_prop(user, "request_id") {
        return Some(id.to_string());
    }
    (!too_large && payload.first() == Some(&b'{')).then(|| json_request_id(payload)).flatten()
}

/// The `id` of a JSON request, read without decoding its tensors.
fn json_request_id(payload: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct IdOnly {
        #[serde(default)]
        id: Option<String>,
    }
    serde_json::from_slice::<IdOnly>(payload).ok().and_then(|r| r.id).filter(|id| !id.is_empty())
}

/// Request options from user properties.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub version: Option<i64>,
    pub min_confidence: Option<f32>,
    pub top_k: Option<usize>,
    /// A caller's W3C trace context (user property `traceparent`), which OpenTelemetry traces continue
    /// (a camera's trace runs on through the appliance).
    pub traceparent: Option<String>,
}

impl Options {
    pub fn from_user(user: &[(String, String)]) -> Result<Options> {
        let version = match user_prop(user, "model_version") {
            Some(v) => crate::core::server::parse_version(v.trim())?,
            None => None,
        };
        let min_confidence =
            match user_prop(user, "min_confidence") {
                Some(v) => Some(v.trim().parse::<f32>().ok().filter(|c| (0.0..=1.0).contains(c)).ok_or_else(|| {
                    Error::invalid(format!("min_confidence must be a number from 0 to 1, got '{v}'"))
                })?),
                None => None,
            };
        let top_k = match user_prop(user, "top_k") {
            Some(v) => Some(
                v.trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|&k| k > 0)
                    .ok_or_else(|| Error::invalid(format!("top_k must be a positive integer, got '{v}'")))?,
            ),
            None => None,
        };
        let traceparent = user_prop(user, "traceparent").map(str::to_string);
        Ok(Options { version, min_confidence, top_k, traceparent })
    }
}

/// The answer to run, before the common fields are added.
pub struct Answer {
    pub fields: Map<String, Value>,
    /// The KServe `outputs` array of a tensor request, encoded once from the response's tensors; it
    /// takes its place among `fields` by name when the result is written.
    pub outputs: Option<Box<RawValue>>,
    /// Binary output data after the JSON (tensor requests asking for binary outputs).
    pub binary: Option<Bytes>,
}

impl Answer {
    /// An answer of JSON fields only.
    pub fn fields(fields: Map<String, Value>) -> Answer {
        Answer { fields, outputs: None, binary: None }
    }

    /// The result's JSON: one object, its keys in name order.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(&SortedObject(self)).unwrap_or_else(|_| b"{}".to_vec())
    }
}

/// Writes an answer's fields and its encoded outputs as one object with sorted keys, as a
/// `serde_json::Map` does.
struct SortedObject<'a>(&'a Answer);

impl serde::Serialize for SortedObject<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        const OUTPUTS: &str = "outputs";
        let mut m = s.serialize_map(None)?;
        let mut outputs = self.0.outputs.as_deref();
        for (k, v) in &self.0.fields {
            if let Some(raw) = outputs.filter(|_| k.as_str() >= OUTPUTS) {
                m.serialize_entry(OUTPUTS, raw)?;
                outputs = None;
                if k == OUTPUTS {
                    continue;
                }
            }
            m.serialize_entry(k, v)?;
        }
        if let Some(raw) = outputs {
            m.serialize_entry(OUTPUTS, raw)?;
        }
        m.end()
    }
}

/// The response is complete: the MQTT bridge's one front-end event in a trace.
fn responded(trace: Option<&mut Trace>) {
    if let Some(t) = trace {
        t.stamp_now(Activity::InferResponseComplete);
    }
}

/// Runs one request through the core.
pub async fn run(
    server: &Server,
    kind: Kind,
    model: &str,
    id: &str,
    opts: &Options,
    payload: Bytes,
    timeout_us: Option<u64>,
) -> Result<Answer> {
    // Traced as tritonserver traces a request (the MQTT bridge adds no front-end events of its own
    // besides INFER_RESPONSE_COMPLETE); a `traceparent` user property continues the caller's trace.
    let mut trace = server.tracer().sample_in_context(model, id, opts.traceparent.as_deref());
    match kind {
        Kind::Image(format) => {
            let post = crate::vision::PostOptions { min_confidence: opts.min_confidence, top_k: opts.top_k };
            let picture = crate::vision::Picture { bytes: payload, format: Some(format) };
            let r = crate::vision::infer_image(server, model, opts.version, id, picture, &post, trace.as_mut()).await?;
            responded(trace.as_mut());
            let mut fields = Map::new();
            fields.insert("model_version".into(), json!(r.model_version.to_string()));
            r.write_json(&mut fields);
            Ok(Answer::fields(fields))
        }
        Kind::Json | Kind::Binary(_) => {
            let start = Instant::now();
            let header_len = match kind {
                Kind::Binary(n) => Some(n),
                _ => None,
            };
            let mut decoded = kserve::decode_request(payload, header_len, model, opts.version)?;
            if decoded.request.id.is_empty() {
                decoded.request.id = id.to_string();
            }
            if let Some(t) = timeout_us {
                decoded.request.parameters.insert("timeout".into(), crate::model_api::types::ParamValue::Uint(t));
            }
            if server.is_decoupled(model, opts.version) {
                return Err(Error::unsupported("the MQTT bridge does not serve decoupled models"));
            }
            let binary = decoded.binary_outputs();
            let resp = server.infer_traced(decoded.request, trace.as_mut()).await?;
            responded(trace.as_mut());
            // The KServe response, built from the tensors: the outputs are encoded once, straight into
            // the result's JSON, with the keys in name order as every result object has them.
            let outputs = Outputs::new(&resp.outputs, |n| binary.is_binary(n))?;
            let raw = serde_json::value::to_raw_value(&outputs.json(KeyOrder::Sorted))
                .map_err(|e| Error::internal(format!("cannot encode the response: {e}")))?;
            let mut fields = Map::new();
            fields.insert("model_name".into(), json!(resp.model_name));
            fields.insert("model_version".into(), json!(resp.model_version.to_string()));
            if !resp.id.is_empty() {
                fields.insert("id".into(), json!(resp.id));
            }
            if !resp.parameters.is_empty() {
                let p = serde_json::to_value(JsonParams(&resp.parameters))
                    .map_err(|e| Error::internal(format!("cannot encode the response: {e}")))?;
                fields.insert("parameters".into(), p);
            }
            let total = start.elapsed().as_secs_f64() * 1e3;
            fields.insert("timings_ms".into(), json!({ "total": total }));
            Ok(Answer { fields, outputs: Some(raw), binary: outputs.binary_tail() })
        }
    }
}

/// The code of an error result.
pub fn error_code(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidArgument => "bad_request",
        ErrorKind::NotFound => "not_found",
        ErrorKind::Unavailable => "unavailable",
        ErrorKind::PayloadTooLarge => "payload_too_large",
        ErrorKind::Unsupported => "unsupported",
        ErrorKind::AlreadyExists => "conflict",
        ErrorKind::PermissionDenied => "forbidden",
        ErrorKind::Internal => "internal",
        ErrorKind::Cancelled => "cancelled",
    }
}

/// Fields every result carries.
pub struct Common<'a> {
    pub model: &'a str,
    pub device: &'a str,
    pub source: Option<&'a str>,
    pub id: &'a str,
}

impl Common<'_> {
    /// Adds the common fields (keeping a `model_version` the answer has).
    pub fn write(&self, m: &mut Map<String, Value>) {
        m.insert("model".into(), json!(self.model));
        m.entry("model_version").or_insert(Value::Null);
        m.insert("device".into(), json!(self.device));
        m.insert("source".into(), json!(self.source));
        m.insert("id".into(), json!(self.id));
        m.insert("ts".into(), json!(humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()));
    }

    /// An error result: `success: false, error: {code, message}`.
    pub fn error(&self, code: &str, message: &str) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("success".into(), json!(false));
        m.insert("error".into(), json!({ "code": code, "message": message }));
        self.write(&mut m);
        m
    }
}

#[cfg(test)]
mod tests;
