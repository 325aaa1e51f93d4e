//! Streamed generation over MQTT: a prompt on `P/generate/<model>[/<source>]` (UTF-8 text, given to
//! the model's `text_input`, or a JSON object as the generate extension takes it) runs as a streamed
//! inference; each response is published as it comes, in order, with its `index` and `final: false`,
//! then one final marker (`final: true`, the count of `responses`, and the `text_output` pieces joined)
//! that also answers duplicates of the request. An error ends the stream with the usual error result,
//! marked final.

use super::request::{self, Answer, Common};
use crate::core::Server;
use crate::error::{Error, Result};
use crate::kserve::generate::encode_generate;
use crate::model_api::types::InferRequest;
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::{json, Map, Value};
use std::future::Future;
use std::time::Instant;

/// How a generation ended: its final answer, and whether duplicates may be given it again.
pub struct Ended {
    pub answer: Answer,
    pub ok: bool,
    pub keep: bool,
}

/// Runs the generation of `payload` for `common.model` and hands each response's fields (common fields
/// included) to `emit` in order; returns the final marker. `deadline` ends it with `expired`.
pub async fn run<E, F>(
    server: &Server,
    common: &Common<'_>,
    user: &[(String, String)],
    payload: Bytes,
    deadline: Option<Instant>,
    mut emit: E,
) -> Ended
where
    E: FnMut(Map<String, Value>) -> F,
    F: Future<Output = ()>,
{
    let mut sent = 0usize;
    let mut text = String::new();
    let streamed = async {
        let req = prompt_request(server, common, user, &payload)?;
        let mut responses = server.infer_stream(req).await?;
        while let Some(r) = responses.next().await {
            let r = r?;
            if let Some(e) = r.error {
                return Err(e);
            }
            if r.empty {
                continue;
            }
            let mut fields = response_fields(&r.response)?;
            if let Some(Value::String(piece)) = fields.get("text_output") {
                text.push_str(piece);
            }
            fields.insert("index".into(), json!(sent));
            fields.insert("final".into(), json!(false));
            common.write(&mut fields);
            emit(fields).await;
            sent += 1;
        }
        Ok::<(), Error>(())
    };
    // `None`: the deadline passed first.
    let result = match deadline {
        Some(d) => tokio::time::timeout_at(d.into(), streamed).await.ok(),
        None => Some(streamed.await),
    };
    finish(common, result, sent, text)
}

/// The final marker of a generation that sent `sent` responses and ended with `result` (`None`: expired).
fn finish(common: &Common<'_>, result: Option<Result<()>>, sent: usize, text: String) -> Ended {
    let (mut fields, ok, keep) = match result {
        Some(Ok(())) => {
            let mut m = Map::new();
            m.insert("success".into(), json!(true));
            if !text.is_empty() {
                m.insert("text_output".into(), json!(text));
            }
            (m, true, true)
        }
        None => (common.error("expired", "the request expired before its last response was ready"), false, false),
        Some(Err(e)) => {
            use crate::error::ErrorKind;
            let keep =
                matches!(e.kind, ErrorKind::InvalidArgument | ErrorKind::Unsupported | ErrorKind::PayloadTooLarge);
            (common.error(request::error_code(e.kind), &e.message), false, keep)
        }
    };
    fields.insert("final".into(), json!(true));
    fields.insert("index".into(), json!(sent));
    fields.insert("responses".into(), json!(sent));
    common.write(&mut fields);
    Ended { answer: Answer::fields(fields), ok, keep }
}

/// The request a prompt makes: a JSON object is read as the generate extension reads its body; any
/// other payload must be UTF-8 text and becomes `text_input`.
fn prompt_request(server: &Server, c: &Common<'_>, user: &[(String, String)], payload: &[u8]) -> Result<InferRequest> {
    let opts = request::Options::from_user(user)?;
    let body: Vec<u8> = if payload.trim_ascii_start().starts_with(b"{") {
        payload.to_vec()
    } else {
        let prompt = std::str::from_utf8(payload)
            .map_err(|_| Error::invalid("a generate payload must be UTF-8 text or a JSON object"))?;
        serde_json::to_vec(&json!({ "text_input": prompt }))
            .map_err(|e| Error::internal(format!("cannot encode the prompt: {e}")))?
    };
    let mut req = crate::frontend::decode_generate_request(server, c.model, opts.version, &body)?;
    if req.id.is_empty() {
        req.id = c.id.to_string();
    }
    Ok(req)
}

/// One response's fields: its outputs by name (a one-element output as a scalar), `model_name`,
/// `model_version` and `id`, as the generate extension writes them.
fn response_fields(resp: &crate::model_api::types::InferResponse) -> Result<Map<String, Value>> {
    let json = encode_generate(resp)?;
    serde_json::from_slice(&json).map_err(|e| Error::internal(format!("cannot encode the response: {e}")))
}
