//! An OpenAI request body read and turned into one core inference request: the prompt (or the
//! rendered chat) becomes `text_input`, every other field an input of that name where the model has
//! one (typed by its configuration), else a request parameter.

use crate::error::{Error, Result};
use crate::kserve::parse_json_data;
use crate::model_api::types::{DataType, InferRequest, ParamValue, Parameters, Tensor};
use crate::proto::inference::{ModelConfig, ModelInput};
use minijinja::value::{Value as JValue, ValueKind};
use serde_json::{Map, Value};

/// The input a prompt goes to, and the output the generated text comes from (the names Triton's
/// OpenAI front-end and its LLM backends use).
pub const TEXT_INPUT: &str = "text_input";
pub const TEXT_OUTPUT: &str = "text_output";

/// What Triton's OpenAI front-end sends as `max_tokens` when the client gives none
/// (`--default-max-tokens`): only to a model that declares a `max_tokens` input.
pub const DEFAULT_MAX_TOKENS: u64 = 16;

/// Which of the two generation endpoints a request came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /v1/completions`: a prompt.
    Completions,
    /// `POST /v1/chat/completions`: messages, rendered through the model's chat template.
    Chat,
}

/// What the client asks the model for: a prompt as it is, or chat messages to render.
#[derive(Debug)]
pub enum Prompt {
    Text(String),
    Messages(Vec<JValue>),
}

/// A request body, read: the fields the API itself uses, and the rest to hand to the model.
#[derive(Debug)]
pub struct Parsed {
    pub model: String,
    pub stream: bool,
    /// `stream_options.include_usage`: a last chunk with the token counts.
    pub include_usage: bool,
    pub prompt: Prompt,
    /// A chat's `add_generation_prompt` (vLLM's extension; true unless the client says otherwise).
    pub add_generation_prompt: bool,
    /// The request's `tools`, for chat templates that describe them.
    pub tools: Option<JValue>,
    /// Every other field, for the model: inputs of that name, else request parameters.
    pub fields: Map<String, Value>,
}

/// An error about one field of the request (OpenAI's `param`).
#[derive(Debug)]
pub struct FieldError {
    pub error: Error,
    pub param: Option<&'static str>,
}

impl From<Error> for FieldError {
    fn from(error: Error) -> Self {
        FieldError { error, param: None }
    }
}

fn bad(param: &'static str, message: impl Into<String>) -> FieldError {
    FieldError { error: Error::invalid(message), param: Some(param) }
}

/// A request body as first read: the chat's `messages` and `tools` as template values (their objects
/// keep the client's key order, which a template's `tojson` shows the model), the rest as JSON.
#[derive(serde::Deserialize)]
struct Body {
    #[serde(default)]
    messages: Option<JValue>,
    #[serde(default)]
    tools: Option<JValue>,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

/// Reads a request body for `endpoint`.
pub fn parse(endpoint: Endpoint, body: &[u8]) -> std::result::Result<Parsed, FieldError> {
    let Body { messages, tools, rest: mut fields } = serde_json::from_slice(body).map_err(|e| {
        FieldError::from(Error::invalid(match e.classify() {
            serde_json::error::Category::Data => format!("the request body must be a JSON object: {e}"),
            _ => format!("the request body is not valid JSON: {e}"),
        }))
    })?;
    fields.retain(|_, v| !v.is_null());
    let model = match fields.remove("model") {
        Some(Value::String(m)) if !m.is_empty() => m,
        Some(_) => return Err(bad("model", "'model' must be a non-empty string")),
        None => return Err(bad("model", "'model' is required")),
    };
    let stream = match fields.get("stream") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(bad("stream", "'stream' must be a boolean")),
    };
    let include_usage = stream_options(fields.remove("stream_options"), stream)?;
    let add_generation_prompt = match fields.remove("add_generation_prompt") {
        None => true,
        Some(Value::Bool(b)) => b,
        Some(_) => return Err(bad("add_generation_prompt", "'add_generation_prompt' must be a boolean")),
    };
    let prompt = match endpoint {
        Endpoint::Completions => Prompt::Text(completion_prompt(fields.remove("prompt"))?),
        Endpoint::Chat => Prompt::Messages(chat_messages(messages)?),
    };
    // The chat API's newer name for the limit wins over the deprecated one, as in Triton.
    if let Some(v) = fields.remove("max_completion_tokens") {
        fields.insert("max_tokens".into(), v);
    }
    let tools = tools.filter(|t| !t.is_none() && endpoint == Endpoint::Chat);
    Ok(Parsed { model, stream, include_usage, prompt, add_generation_prompt, tools, fields })
}

/// `stream_options.include_usage`, for a streamed request only.
fn stream_options(v: Option<Value>, stream: bool) -> std::result::Result<bool, FieldError> {
    match v {
        None => Ok(false),
        Some(_) if !stream => Err(bad("stream_options", "'stream_options' can only be used when 'stream' is true")),
        Some(Value::Object(o)) => match o.get("include_usage") {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(bad("stream_options", "'stream_options.include_usage' must be a boolean")),
        },
        Some(_) => Err(bad("stream_options", "'stream_options' must be an object")),
    }
}

/// A completion's prompt: one non-empty string (or a list holding one), as Triton's front-end takes it.
fn completion_prompt(v: Option<Value>) -> std::result::Result<String, FieldError> {
    let unsupported = || bad("prompt", "'prompt' must be a string (token lists and several prompts are not supported)");
    let text = match v {
        None => return Err(bad("prompt", "'prompt' is required")),
        Some(Value::String(s)) => s,
        Some(Value::Array(items)) => match <[Value; 1]>::try_from(items) {
            Ok([Value::String(s)]) => s,
            _ => return Err(unsupported()),
        },
        Some(_) => return Err(unsupported()),
    };
    if text.is_empty() {
        return Err(bad("prompt", "'prompt' must be non-empty"));
    }
    Ok(text)
}

/// A chat's messages: a non-empty list of objects with a string `role`. Content given as a list of text
/// parts is joined into one string, the form most chat templates expect.
fn chat_messages(v: Option<JValue>) -> std::result::Result<Vec<JValue>, FieldError> {
    let messages = match v {
        None => return Err(bad("messages", "'messages' is required")),
        Some(m) if m.kind() == ValueKind::Seq && m.len() != Some(0) => m,
        Some(_) => return Err(bad("messages", "'messages' must be a non-empty list of messages")),
    };
    let items = messages.try_iter().map_err(|e| bad("messages", e.to_string()))?;
    items
        .enumerate()
        .map(|(i, m)| {
            if m.kind() != ValueKind::Map {
                return Err(bad("messages", format!("messages[{i}] must be an object")));
            }
            if m.get_attr("role").ok().and_then(|r| r.as_str().map(str::len)).is_none() {
                return Err(bad("messages", format!("messages[{i}] needs a string 'role'")));
            }
            match m.get_attr("content").ok().and_then(|c| joined_text_parts(&c)) {
                Some(text) => with_content(&m, text).map_err(|e| bad("messages", e.to_string())),
                None => Ok(m),
            }
        })
        .collect()
}

/// Content given as text parts (`[{"type": "text", "text": ...}, ...]`), as one string.
fn joined_text_parts(content: &JValue) -> Option<String> {
    if content.kind() != ValueKind::Seq {
        return None;
    }
    let texts: Option<Vec<String>> = content
        .try_iter()
        .ok()?
        .map(|p| match p.get_attr("type").ok()?.as_str() {
            Some("text") => p.get_attr("text").ok()?.as_str().map(str::to_string),
            _ => None,
        })
        .collect();
    Some(texts?.join("\n"))
}

/// A message with its content replaced, its keys in their order.
fn with_content(message: &JValue, text: String) -> std::result::Result<JValue, minijinja::Error> {
    let mut pairs = Vec::new();
    for key in message.try_iter()? {
        let value =
            if key.as_str() == Some("content") { JValue::from(text.clone()) } else { message.get_item(&key)? };
        pairs.push((key, value));
    }
    Ok(JValue::from_pairs(pairs))
}

/// Builds the core request: `text` into the model's `text_input`, each field into the input of its
/// name (typed as the model declares it) or else into a request parameter, and `extra` (forwarded
/// headers) into the parameters.
pub fn infer_request(
    cfg: &ModelConfig,
    name: &str,
    id: &str,
    text: String,
    fields: Map<String, Value>,
    extra: Parameters,
) -> Result<InferRequest> {
    let batched = cfg.max_batch_size > 0;
    let text_input = cfg.input.iter().find(|i| i.name == TEXT_INPUT).ok_or_else(|| {
        Error::invalid(format!(
            "model '{name}' has no '{TEXT_INPUT}' input, so the OpenAI-compatible API cannot send it a prompt"
        ))
    })?;
    let mut inputs = vec![input_tensor(text_input, vec![Value::String(text)], batched)?];
    let mut parameters = extra;
    for (key, value) in fields {
        match cfg.input.iter().find(|i| i.name == key) {
            Some(input) => {
                let elements = match value {
                    Value::Array(items) => items,
                    one => vec![one],
                };
                inputs.push(input_tensor(input, elements, batched)?);
            }
            None => {
                parameters.insert(key, param_value(value));
            }
        }
    }
    if let Some(input) = cfg.input.iter().find(|i| i.name == "max_tokens") {
        if !inputs.iter().any(|t| t.name == "max_tokens") {
            inputs.push(input_tensor(input, vec![Value::from(DEFAULT_MAX_TOKENS)], batched)?);
        }
    }
    Ok(InferRequest { model_name: name.to_string(), id: id.to_string(), inputs, parameters, ..Default::default() })
}

/// A request parameter from a field: scalars as they are, lists and objects as their JSON text
/// (parameters hold no nested values).
fn param_value(v: Value) -> ParamValue {
    match v {
        Value::Bool(b) => ParamValue::Bool(b),
        Value::String(s) => ParamValue::String(s),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => ParamValue::Int(i),
            (None, Some(u)) => ParamValue::Uint(u),
            _ => ParamValue::Double(n.as_f64().unwrap_or(0.0)),
        },
        other => ParamValue::String(other.to_string()),
    }
}

/// One input's tensor from JSON elements, typed as the model declares the input; its shape is the
/// declared one with a variable dimension resolved (plus the batch dimension of 1). A BYTES input takes
/// strings as they are and anything else as its JSON text.
fn input_tensor(input: &ModelInput, elements: Vec<Value>, batched: bool) -> Result<Tensor> {
    let name = &input.name;
    let dt = DataType::from_config(input.data_type)
        .ok_or_else(|| Error::internal(format!("input '{name}' has no valid datatype")))?;
    let count = elements.len();
    let data = if dt == DataType::Bytes {
        let texts = elements.into_iter().map(|v| match v {
            Value::String(s) => s,
            other => other.to_string(),
        });
        crate::model_api::types::serialize_bytes(texts.collect::<Vec<_>>())
    } else {
        let raw = serde_json::value::to_raw_value(&elements).map_err(|e| Error::internal(e.to_string()))?;
        parse_json_data(&raw, dt, count, name)
            .map_err(|e| Error::invalid(format!("field '{name}' cannot go to the model's {dt} input: {}", e.message)))?
    };
    let mut shape = if batched { vec![1] } else { Vec::new() };
    shape.extend(crate::core::validate::resolve_wildcards(&input.dims, count));
    Ok(Tensor::new(name.clone(), dt, shape, data))
}
