//! Triton's generate extension over HTTP, as tritonserver 2.51 answers it: `POST
//! /v2/models/<m>[/versions/<v>]/generate` (one JSON object) and `.../generate_stream` (Server-Sent
//! Events, one `data:` event per response). The JSON <-> tensor mapping is `kserve::generate`'s and the
//! responses come from the core's streaming API; this file moves bytes, picks status codes and stamps
//! the HTTP side of a trace.

use super::{error_response, read_body, HttpState, St};
use crate::core::trace::{Activity, SharedTrace, Trace};
use crate::error::{Error, ErrorKind, Result};
use crate::kserve::generate::{encode_generate, encode_generate_error, NOT_ONE_RESPONSE};
use crate::model_api::types::{InferRequest, InferResponse, StreamResponse};
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use futures_util::stream::{BoxStream, Fuse, StreamExt};
use std::sync::Arc;
use std::time::Instant;

/// Adds the generate routes.
pub(super) fn routes(router: Router<Arc<HttpState>>) -> Router<Arc<HttpState>> {
    router
        .route("/v2/models/{name}/generate", post(generate).fallback(method_not_allowed))
        .route("/v2/models/{name}/versions/{version}/generate", post(generate_v).fallback(method_not_allowed))
        .route("/v2/models/{name}/generate_stream", post(stream).fallback(method_not_allowed))
        .route("/v2/models/{name}/versions/{version}/generate_stream", post(stream_v).fallback(method_not_allowed))
}

const SSE: &str = "text/event-stream; charset=utf-8";

async fn generate(State(s): St, Path(name): Path<String>, headers: HeaderMap, body: Body) -> Response {
    answer(&s, &name, "", &headers, body, false).await
}

async fn generate_v(
    State(s): St,
    Path((name, version)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    answer(&s, &name, &version, &headers, body, false).await
}

async fn stream(State(s): St, Path(name): Path<String>, headers: HeaderMap, body: Body) -> Response {
    answer(&s, &name, "", &headers, body, true).await
}

async fn stream_v(
    State(s): St,
    Path((name, version)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    answer(&s, &name, &version, &headers, body, true).await
}

/// tritonserver's answer to another method than POST.
async fn method_not_allowed() -> Response {
    let mut r = json_response(StatusCode::METHOD_NOT_ALLOWED, encode_generate_error("Method Not Allowed"));
    r.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST"));
    r
}

/// One generate request: read, decoded against the model's inputs, run through the core's streaming
/// API, answered as one JSON object or as events. Traced (when sampled) from before the body is read,
/// as tritonserver does, so a request that fails to decode still leaves its HTTP_RECV_* records.
#[tracing::instrument(name = "http_generate", level = "debug", skip_all)]
async fn answer(
    s: &HttpState,
    name: &str,
    version: &str,
    headers: &HeaderMap,
    body: Body,
    streaming: bool,
) -> Response {
    let version = match route_version(version) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let recv_start = s.server.tracer().enabled().then(Instant::now);
    let body = match read_body(s, headers, body).await {
        Ok(b) => b,
        Err(e) => return error_response(&e),
    };
    let context = headers.get("traceparent").and_then(|v| v.to_str().ok());
    let mut trace = recv_start.and_then(|start| sample(s, name, start, context));
    let req = match decode(s, name, version, &body) {
        Ok(r) => r,
        Err(e) => return error_response(&e),
    };
    drop(body);
    if let Some(t) = trace.as_mut() {
        t.set_request_id(&req.id);
    }
    let trace = trace.map(SharedTrace::new);
    let responses = match s.server.infer_stream_traced(req, trace.clone()).await {
        Ok(r) => r,
        Err(e) => return json_response(inference_status(&e), encode_generate_error(&e.message)),
    };
    let events = Events { responses: responses.fuse(), trace, sending: false };
    if streaming {
        events.into_sse().await
    } else {
        events.into_single().await
    }
}

/// The version in the path: tritonserver's routes take digits only (anything else is no route: 404
/// with its plain-text body), and a number too large for a version is a 400 with its words.
fn route_version(version: &str) -> std::result::Result<Option<i64>, Box<Response>> {
    if version.is_empty() {
        return Ok(None);
    }
    if !version.bytes().all(|b| b.is_ascii_digit()) {
        let mut r = (StatusCode::NOT_FOUND, r#"{"error":"Not Found"}"#).into_response();
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        return Err(Box::new(r));
    }
    version.parse::<i64>().map(Some).map_err(|_| {
        Box::new(error_response(&Error::invalid(format!(
            "failed to get model version from specified version string '{version}' (details: stol), version \
             should be an integral value > 0"
        ))))
    })
}

/// Samples the request for tracing (its id is not known yet) with HTTP_RECV_START at `start` and
/// HTTP_RECV_END now.
fn sample(s: &HttpState, name: &str, start: Instant, traceparent: Option<&str>) -> Option<Trace> {
    s.server.tracer().sample_in_context(name, "", traceparent).map(|mut t| {
        t.stamp(Activity::HttpRecvStart, start);
        t.stamp_now(Activity::HttpRecvEnd);
        t
    })
}

/// Decodes the body against the inputs the model's metadata lists (an unknown model or version is 404).
fn decode(s: &HttpState, name: &str, version: Option<i64>, body: &[u8]) -> Result<InferRequest> {
    crate::frontend::decode_generate_request(&s.server, name, version, body)
}

/// The status of a request that failed once it was handed to the core: 400, as tritonserver answers
/// every such failure, except an overloaded or unavailable model (503) and one that went away (404).
fn inference_status(e: &Error) -> StatusCode {
    match e.kind {
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        _ => StatusCode::BAD_REQUEST,
    }
}

fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// One event's body: a response's JSON object, or an error's.
struct Event {
    json: Vec<u8>,
    /// Set for an error: the status it gives the reply when it comes first.
    error: Option<StatusCode>,
}

/// A request's responses on their way out, with its trace: INFER_RESPONSE_COMPLETE as each arrives,
/// HTTP_SEND_START as its event goes to the connection and HTTP_SEND_END once the connection asks for
/// more (or the reply ends).
struct Events {
    /// Fused: polled again after its end (by the body after an empty reply), it stays ended.
    responses: Fuse<BoxStream<'static, Result<StreamResponse>>>,
    trace: Option<SharedTrace>,
    /// An event went out whose HTTP_SEND_END is not stamped yet.
    sending: bool,
}

impl Events {
    fn stamp(&self, activity: Activity) {
        if let Some(t) = &self.trace {
            t.stamp_now(activity);
        }
    }

    /// Stamps HTTP_SEND_END of the event that went out last.
    fn sent(&mut self) {
        if std::mem::take(&mut self.sending) {
            self.stamp(Activity::HttpSendEnd);
        }
    }

    /// The next response or error; a final flag without a response is no event, as in tritonserver.
    async fn next_event(&mut self) -> Option<Event> {
        self.sent();
        loop {
            let item = self.responses.next().await?;
            self.stamp(Activity::InferResponseComplete);
            let event = match item {
                Ok(r) if r.empty => continue,
                Ok(StreamResponse { error: Some(e), .. }) | Err(e) => error_event(&e),
                Ok(r) => match encode_generate(&r.response) {
                    Ok(json) => Event { json, error: None },
                    Err(e) => error_event(&e),
                },
            };
            return Some(event);
        }
    }

    /// Marks an event as handed to the connection.
    fn sending(&mut self) {
        self.stamp(Activity::HttpSendStart);
        self.sending = true;
    }

    /// `/generate_stream`: the reply starts with the first event (its status 400 when that is an error,
    /// as in tritonserver), then every event as it comes; a client that goes away drops the stream,
    /// which cancels the request.
    async fn into_sse(mut self) -> Response {
        let first = self.next_event().await;
        let status = first.as_ref().and_then(|e| e.error).unwrap_or(StatusCode::OK);
        let first = first.map(|e| {
            self.sending();
            sse_frame(e.json)
        });
        let rest = futures_util::stream::unfold(self, |mut events| async move {
            let event = events.next_event().await?;
            events.sending();
            Some((sse_frame(event.json), events))
        });
        let body = futures_util::stream::iter(first).chain(rest).map(Ok::<_, std::convert::Infallible>);
        let mut r = Response::new(Body::from_stream(body));
        *r.status_mut() = status;
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(SSE));
        r
    }

    /// `/generate`: exactly one response (tritonserver's error for a model that sends none or more) or
    /// the first error.
    async fn into_single(mut self) -> Response {
        let mut answer: Option<InferResponse> = None;
        while let Some(item) = self.responses.next().await {
            self.stamp(Activity::InferResponseComplete);
            match item {
                Ok(r) if r.empty => {}
                Ok(StreamResponse { error: Some(e), .. }) | Err(e) => return self.reply(error_event(&e)),
                Ok(_) if answer.is_some() => return self.reply(error_event(&Error::invalid(NOT_ONE_RESPONSE))),
                Ok(r) => answer = Some(r.response),
            }
        }
        let event = match answer.map(|r| encode_generate(&r)) {
            Some(Ok(json)) => Event { json, error: None },
            Some(Err(e)) => error_event(&e),
            None => error_event(&Error::invalid(NOT_ONE_RESPONSE)),
        };
        self.reply(event)
    }

    /// One JSON object as the whole reply; the trace's HTTP_SEND_END is stamped when it has gone.
    fn reply(mut self, event: Event) -> Response {
        let status = event.error.unwrap_or(StatusCode::OK);
        if self.trace.is_none() {
            return json_response(status, event.json);
        }
        self.sending();
        // The object, then (when the connection asks for more) the end, which stamps HTTP_SEND_END.
        let body = futures_util::stream::unfold((Some(event.json), self), |(json, mut events)| async move {
            match json {
                Some(j) => Some((Ok::<_, std::convert::Infallible>(Bytes::from(j)), (None, events))),
                None => {
                    events.sent();
                    None
                }
            }
        });
        let mut r = Response::new(Body::from_stream(body));
        *r.status_mut() = status;
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        r
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        self.sent();
    }
}

fn error_event(e: &Error) -> Event {
    Event { json: encode_generate_error(&e.message), error: Some(inference_status(e)) }
}

/// One Server-Sent Event: `data: <json>` and a blank line.
fn sse_frame(json: Vec<u8>) -> Bytes {
    let mut out = Vec::with_capacity(json.len() + 8);
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(&json);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}
