//! The OpenAI-compatible API (`/v1/models`, `/v1/completions`, `/v1/chat/completions`) without a
//! transport: a request body becomes one inference through the core's streaming API (the one gRPC
//! streaming uses), and its responses OpenAI's JSON, or server-sent events when the client streams.
//! The HTTP front-end routes, reads bodies and frames what this module answers.

mod request;
mod response;
mod template;

pub use request::{Endpoint, DEFAULT_MAX_TOKENS, TEXT_INPUT, TEXT_OUTPUT};
pub use template::strftime;

use crate::core::Server;
use crate::error::{Error, ErrorKind};
use crate::model_api::types::{Parameters, StreamResponse};
use bytes::Bytes;
use futures_util::stream::{BoxStream, StreamExt};
use request::{Parsed, Prompt};
use response::{Meta, Usage};
use serde_json::{json, Value};
use std::time::{SystemTime, UNIX_EPOCH};

/// Who `/v1/models` says owns the models.
const OWNED_BY: &str = "tritonrs";

/// The API over one server: the templates it has read, and when it started (the models' `created`).
pub struct Service {
    server: Server,
    created: u64,
    templates: template::Cache,
}

/// A successful answer: one JSON object, or a stream of server-sent events (`text/event-stream`), each
/// item one whole event.
pub enum Answer {
    Json(Value),
    Stream(BoxStream<'static, Bytes>),
}

/// An error as OpenAI's API answers one: a status and `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug)]
pub struct ApiError {
    pub error: Error,
    /// The request field at fault.
    pub param: Option<&'static str>,
    /// OpenAI's machine-readable code, where it has one (`model_not_found`).
    pub code: Option<&'static str>,
}

impl From<Error> for ApiError {
    fn from(error: Error) -> Self {
        ApiError { error, param: None, code: None }
    }
}

impl From<request::FieldError> for ApiError {
    fn from(e: request::FieldError) -> Self {
        ApiError { error: e.error, param: e.param, code: None }
    }
}

impl ApiError {
    pub fn status(&self) -> u16 {
        self.error.http_status()
    }

    /// OpenAI's error object.
    pub fn body(&self) -> Value {
        json!({ "error": {
            "message": self.error.message,
            "type": error_type(self.error.kind),
            "param": self.param,
            "code": self.code,
        }})
    }

    /// The error as the event that ends a stream already under way.
    fn event(&self) -> Bytes {
        response::event(&self.body())
    }
}

/// OpenAI's `type` for an error kind.
fn error_type(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidArgument | ErrorKind::NotFound | ErrorKind::PayloadTooLarge | ErrorKind::AlreadyExists => {
            "invalid_request_error"
        }
        ErrorKind::PermissionDenied => "permission_error",
        ErrorKind::Unsupported => "not_supported_error",
        ErrorKind::Unavailable => "service_unavailable_error",
        ErrorKind::Internal => "server_error",
        ErrorKind::Cancelled => "cancelled_error",
    }
}

/// A model the client named that does not serve.
fn unknown_model(e: Error) -> ApiError {
    let code = (e.kind == ErrorKind::NotFound).then_some("model_not_found");
    ApiError { error: e, param: Some("model"), code }
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A fresh completion id: OpenAI's prefix and 128 random bits.
fn completion_id(endpoint: Endpoint) -> String {
    let prefix = match endpoint {
        Endpoint::Chat => "chatcmpl",
        Endpoint::Completions => "cmpl",
    };
    format!("{prefix}-{:032x}", fastrand::u128(..))
}

impl Service {
    pub fn new(server: Server) -> Service {
        Service { server, created: unix_now(), templates: template::Cache::default() }
    }

    fn model_json(&self, name: &str) -> Value {
        json!({ "id": name, "object": "model", "created": self.created, "owned_by": OWNED_BY })
    }

    /// `GET /v1/models`: every model with a version ready to serve.
    pub fn models(&self) -> Value {
        let names: std::collections::BTreeSet<String> =
            self.server.repository_index(true).into_iter().map(|e| e.name).collect();
        json!({ "object": "list", "data": names.iter().map(|n| self.model_json(n)).collect::<Vec<_>>() })
    }

    /// `GET /v1/models/{name}`.
    pub fn model(&self, name: &str) -> Result<Value, ApiError> {
        self.server.model_folder(name, None).map_err(unknown_model)?;
        Ok(self.model_json(name))
    }

    /// `POST /v1/completions` and `/v1/chat/completions`: `extra` holds the forwarded headers (request
    /// parameters). A stream starts only once the model's first response is there, so a request that
    /// fails before it gets an HTTP error status rather than an error event.
    pub async fn complete(&self, endpoint: Endpoint, body: &[u8], extra: Parameters) -> Result<Answer, ApiError> {
        let parsed = request::parse(endpoint, body)?;
        let (cfg, folder) = self.server.model_folder(&parsed.model, None).map_err(unknown_model)?;
        let Parsed { model, stream, include_usage, prompt, add_generation_prompt, tools, fields } = parsed;
        let text = match prompt {
            Prompt::Text(t) => t,
            Prompt::Messages(messages) => self.templates.get(&model, &cfg, folder.as_deref())?.render(
                &model,
                &messages,
                add_generation_prompt,
                tools.as_ref(),
            )?,
        };
        let id = completion_id(endpoint);
        let req = request::infer_request(&cfg, &model, &id, text, fields, extra)?;
        let meta = Meta { endpoint, id, created: unix_now(), model };
        let mut responses = self.server.infer_stream(req).await?;
        if !stream {
            return collect(&meta, responses).await.map(Answer::Json);
        }
        let first = match responses.next().await {
            Some(item) => Some(checked(item)?),
            None => None,
        };
        Ok(Answer::Stream(events(meta, first, responses, include_usage)))
    }
}

/// A response that the model sent as an error is an error like any other.
fn checked(item: crate::error::Result<StreamResponse>) -> Result<StreamResponse, ApiError> {
    let r = item?;
    match r.error {
        Some(e) => Err(e.into()),
        None => Ok(r),
    }
}

/// A non-streamed completion: every response's text, joined per choice (a decoupled model's answer).
async fn collect(
    meta: &Meta,
    mut responses: BoxStream<'static, crate::error::Result<StreamResponse>>,
) -> Result<Value, ApiError> {
    let mut texts: Vec<String> = Vec::new();
    let mut usage = Usage::default();
    let mut finish = "stop".to_string();
    while let Some(item) = responses.next().await {
        let r = checked(item)?;
        if r.empty {
            continue;
        }
        for (i, t) in response::texts(&r.response)?.into_iter().enumerate() {
            match texts.get_mut(i) {
                Some(all) => all.push_str(&t),
                None => texts.push(t),
            }
        }
        usage.add(&r.response);
        finish = response::finish_reason(&r.response);
    }
    if texts.is_empty() {
        texts.push(String::new());
    }
    Ok(response::whole(meta, &texts, &finish, &usage))
}

/// Where a streamed completion is.
struct Events {
    meta: Meta,
    /// The model's first response, read before the stream started.
    first: Option<StreamResponse>,
    responses: BoxStream<'static, crate::error::Result<StreamResponse>>,
    include_usage: bool,
    usage: Usage,
    /// The chat's opening chunk (the role) is out.
    opened: bool,
    /// The last chunk went out (a final response, the end of the responses, or an error).
    finished: bool,
    /// `data: [DONE]` went out: nothing follows.
    done: bool,
}

/// The events of a streamed completion: (for a chat, the role first, then) a chunk per response, the
/// last with its finish reason, the usage when asked for and known, and `data: [DONE]`. An error once
/// the stream is under way is an error event before `data: [DONE]`.
fn events(
    meta: Meta,
    first: Option<StreamResponse>,
    responses: BoxStream<'static, crate::error::Result<StreamResponse>>,
    include_usage: bool,
) -> BoxStream<'static, Bytes> {
    let opened = meta.endpoint != Endpoint::Chat;
    let state =
        Events { meta, first, responses, include_usage, usage: Usage::default(), opened, finished: false, done: false };
    futures_util::stream::unfold(state, |mut s| async move {
        let batch = s.next_events().await?;
        Some((futures_util::stream::iter(batch), s))
    })
    .flatten()
    .boxed()
}

impl Events {
    /// The next events to send; `None` once `data: [DONE]` is out.
    async fn next_events(&mut self) -> Option<Vec<Bytes>> {
        if self.done {
            return None;
        }
        let mut out = Vec::new();
        if !self.opened {
            self.opened = true;
            out.push(response::event(&response::role_chunk(&self.meta)));
        }
        if self.finished {
            if self.include_usage {
                out.extend(response::usage_chunk(&self.meta, &self.usage).map(|u| response::event(&u)));
            }
            out.push(Bytes::from_static(response::DONE));
            self.done = true;
            return Some(out);
        }
        let item = match self.first.take() {
            Some(r) => Some(Ok(r)),
            None => self.responses.next().await.map(checked),
        };
        match item.map(|r| r.and_then(|r| self.chunk(&r))) {
            Some(Ok(Some(c))) => out.push(response::event(&c)),
            Some(Ok(None)) => {}
            Some(Err(e)) => {
                out.push(e.event());
                self.finished = true;
                self.include_usage = false;
            }
            // The responses ended without one marked final: the completion ends here.
            None => {
                out.extend(response::chunk(&self.meta, &[], Some("stop")).map(|c| response::event(&c)));
                self.finished = true;
            }
        }
        Some(out)
    }

    /// The chunk of one response (none for a response with nothing to say).
    fn chunk(&mut self, r: &StreamResponse) -> Result<Option<Value>, ApiError> {
        let texts = if r.empty { Vec::new() } else { response::texts(&r.response)? };
        if !r.empty {
            self.usage.add(&r.response);
        }
        let finish = r.is_final.then(|| response::finish_reason(&r.response));
        if r.is_final {
            self.finished = true;
        }
        Ok(response::chunk(&self.meta, &texts, finish.as_deref()))
    }
}

#[cfg(test)]
mod tests;
