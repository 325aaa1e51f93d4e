//! The OpenAI-compatible routes on the HTTP port: `GET /v1/models[/{model}]`, `POST /v1/completions`
//! and `POST /v1/chat/completions`, with streamed answers as server-sent events. What they answer is
//! `crate::openai`'s; here bodies are read (size limit, content encoding), headers forwarded, and
//! answers framed. They sit behind the same TLS, restricted-API and header settings as the rest.

use super::{read_body, HttpState};
use crate::error::Error;
use crate::openai::{Answer, ApiError, Endpoint, Service};
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures_util::StreamExt;
use std::sync::Arc;

/// What the handlers share: the HTTP settings and the API.
#[derive(Clone)]
struct OpenAiState {
    http: Arc<HttpState>,
    api: Arc<Service>,
}

type St = State<OpenAiState>;

/// The routes, to merge into the HTTP router.
pub(super) fn router(http: Arc<HttpState>) -> Router<Arc<HttpState>> {
    let api = Arc::new(Service::new(http.server.clone()));
    Router::new()
        .route("/v1/models", get(models))
        .route("/v1/models/{model}", get(model))
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat))
        .with_state(OpenAiState { http, api })
}

/// Whether a path is one of these routes (the restricted-API check answers them in OpenAI's form).
pub(super) fn owns(path: &str) -> bool {
    path == "/v1/models"
        || path.starts_with("/v1/models/")
        || path == "/v1/completions"
        || path == "/v1/chat/completions"
}

/// An error in OpenAI's form, with its status.
pub(super) fn error_response(e: ApiError) -> Response {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, axum::Json(e.body())).into_response()
}

async fn models(State(s): St) -> Response {
    axum::Json(s.api.models()).into_response()
}

async fn model(State(s): St, Path(name): Path<String>) -> Response {
    match s.api.model(&name) {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => error_response(e),
    }
}

async fn completions(State(s): St, headers: HeaderMap, body: Body) -> Response {
    complete(&s, Endpoint::Completions, &headers, body).await
}

async fn chat(State(s): St, headers: HeaderMap, body: Body) -> Response {
    complete(&s, Endpoint::Chat, &headers, body).await
}

#[tracing::instrument(name = "openai", level = "debug", skip_all)]
async fn complete(s: &OpenAiState, endpoint: Endpoint, headers: &HeaderMap, body: Body) -> Response {
    let body = match read_body(&s.http, headers, body).await {
        Ok(b) => b,
        Err(e) => return refused(e),
    };
    let mut forwarded = crate::model_api::types::Parameters::new();
    crate::frontend::forward::forward(
        s.http.header_forward.as_ref(),
        headers.iter().map(|(k, v)| (k.as_str(), v.to_str().ok())),
        &mut forwarded,
    );
    match s.api.complete(endpoint, &body, forwarded).await {
        Ok(Answer::Json(v)) => axum::Json(v).into_response(),
        Ok(Answer::Stream(events)) => {
            let mut r = Response::new(Body::from_stream(events.map(Ok::<_, std::convert::Infallible>)));
            let h = r.headers_mut();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            r
        }
        Err(e) => error_response(e),
    }
}

/// A request refused before it reached the API (its body too large or unreadable).
fn refused(e: Error) -> Response {
    let close = e.kind == crate::error::ErrorKind::PayloadTooLarge;
    let mut r = error_response(e.into());
    if close {
        // The rest of the body is never read, so the connection cannot carry another request.
        r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}
