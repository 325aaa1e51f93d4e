//! The model's responses as OpenAI's JSON: a whole completion, or the chunks of a streamed one (each a
//! server-sent event, `data: {...}`, the last `data: [DONE]`).

use super::request::{Endpoint, TEXT_OUTPUT};
use crate::error::{Error, Result};
use crate::model_api::types::{bytes_elements, InferResponse, ParamValue, Tensor};
use bytes::Bytes;
use serde_json::{json, Value};

/// The outputs that give the token counts of `usage` (those of vLLM's Triton backend); without them
/// `usage` is left out, as Triton's OpenAI front-end leaves it out.
const INPUT_TOKENS: &str = "num_input_tokens";
const OUTPUT_TOKENS: &str = "num_output_tokens";

/// What every object of one completion carries.
#[derive(Clone, Debug)]
pub struct Meta {
    pub endpoint: Endpoint,
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl Meta {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.endpoint, chunk) {
            (Endpoint::Chat, false) => "chat.completion",
            (Endpoint::Chat, true) => "chat.completion.chunk",
            (Endpoint::Completions, _) => "text_completion",
        }
    }

    fn wrap(&self, chunk: bool, choices: Vec<Value>, usage: Option<Value>) -> Value {
        let mut v = json!({
            "id": self.id,
            "object": self.object(chunk),
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": choices,
        });
        if let Some(u) = usage {
            v["usage"] = u;
        }
        v
    }
}

/// The texts of a response's `text_output`, one per choice; none when the response has no such output.
pub fn texts(resp: &InferResponse) -> Result<Vec<String>> {
    let Some(t) = resp.outputs.iter().find(|t| t.name == TEXT_OUTPUT) else { return Ok(Vec::new()) };
    let data = t.data.to_host()?;
    let elements = bytes_elements(&data).map_err(|e| {
        Error::internal(format!("model '{}' sent a malformed '{TEXT_OUTPUT}': {}", resp.model_name, e.message))
    })?;
    Ok(elements.into_iter().map(|e| String::from_utf8_lossy(e).into_owned()).collect())
}

/// The first element of an integer output, as a count.
fn count(t: &Tensor) -> Option<u64> {
    let data = t.data.to_host().ok()?;
    let size = t.datatype.byte_size()?;
    let first = data.get(..size)?;
    let mut le = [0u8; 8];
    le[..size].copy_from_slice(first);
    use crate::model_api::types::DataType as D;
    match t.datatype {
        D::Uint8 | D::Uint16 | D::Uint32 | D::Uint64 => Some(u64::from_le_bytes(le)),
        D::Int8 => u64::try_from(i8::from_le_bytes([le[0]])).ok(),
        D::Int16 => u64::try_from(i16::from_le_bytes([le[0], le[1]])).ok(),
        D::Int32 => u64::try_from(i32::from_le_bytes([le[0], le[1], le[2], le[3]])).ok(),
        D::Int64 => u64::try_from(i64::from_le_bytes(le)).ok(),
        _ => None,
    }
}

/// Token counts as the model reports them: the prompt's (the same in every response) and the
/// generated ones (summed over the responses).
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    prompt: Option<u64>,
    completion: u64,
}

impl Usage {
    pub fn add(&mut self, resp: &InferResponse) {
        let find = |n: &str| resp.outputs.iter().find(|t| t.name == n).and_then(count);
        if let (Some(p), Some(c)) = (find(INPUT_TOKENS), find(OUTPUT_TOKENS)) {
            self.prompt.get_or_insert(p);
            self.completion += c;
        }
    }

    pub fn json(&self) -> Option<Value> {
        let p = self.prompt?;
        Some(json!({ "prompt_tokens": p, "completion_tokens": self.completion, "total_tokens": p + self.completion }))
    }
}

/// Why the model stopped: its response's `finish_reason` parameter when it sends one (say, "length"),
/// else "stop".
pub fn finish_reason(resp: &InferResponse) -> String {
    match resp.parameters.get("finish_reason") {
        Some(ParamValue::String(s)) if !s.is_empty() => s.clone(),
        _ => "stop".to_string(),
    }
}

/// A whole completion: the texts of every response joined per choice.
pub fn whole(meta: &Meta, texts: &[String], finish: &str, usage: &Usage) -> Value {
    let choices = texts
        .iter()
        .enumerate()
        .map(|(i, text)| match meta.endpoint {
            Endpoint::Chat => json!({
                "index": i,
                "message": { "role": "assistant", "content": text },
                "logprobs": null,
                "finish_reason": finish,
            }),
            Endpoint::Completions => json!({ "index": i, "text": text, "logprobs": null, "finish_reason": finish }),
        })
        .collect();
    meta.wrap(false, choices, usage.json())
}

/// One server-sent event.
pub fn event(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

pub const DONE: &[u8] = b"data: [DONE]\n\n";

/// The chunk that opens a streamed chat: the assistant's role, no content yet.
pub fn role_chunk(meta: &Meta) -> Value {
    let choice =
        json!({ "index": 0, "delta": { "role": "assistant", "content": "" }, "logprobs": null, "finish_reason": null });
    meta.wrap(true, vec![choice], None)
}

/// The chunk of one response: its text per choice, and `finish` on the last response. `None` for a
/// response with nothing to say (no text and not the last).
pub fn chunk(meta: &Meta, texts: &[String], finish: Option<&str>) -> Option<Value> {
    if texts.is_empty() && finish.is_none() {
        return None;
    }
    let one = |i: usize, text: Option<&String>| match meta.endpoint {
        Endpoint::Chat => {
            let delta = text.map_or_else(|| json!({}), |t| json!({ "content": t }));
            json!({ "index": i, "delta": delta, "logprobs": null, "finish_reason": finish })
        }
        Endpoint::Completions => {
            json!({ "index": i, "text": text.map_or("", String::as_str), "logprobs": null, "finish_reason": finish })
        }
    };
    let choices = if texts.is_empty() {
        vec![one(0, None)]
    } else {
        texts.iter().enumerate().map(|(i, t)| one(i, Some(t))).collect()
    };
    Some(meta.wrap(true, choices, None))
}

/// The last chunk a client asked for with `stream_options.include_usage`: no choices, the usage.
pub fn usage_chunk(meta: &Meta, usage: &Usage) -> Option<Value> {
    usage.json().map(|u| meta.wrap(true, Vec::new(), Some(u)))
}
