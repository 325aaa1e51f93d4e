//! The tower layers tonic's services run in (see `serve`): restricted protocols, tonic's size-limit code
//! rewritten to gRPC C++'s, the call deadline, and which calls get compressed replies.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tonic::{Code, Status};

/// A layer's future: the inner service's own when the layer passes the call through, a boxed one when it
/// does work of its own around it.
pub(super) type OrBoxed<F, R, E> =
    futures_util::future::Either<F, Pin<Box<dyn Future<Output = std::result::Result<R, E>> + Send>>>;

/// `--grpc-restricted-protocol`: a call to a restricted group without its metadata entry is answered
/// PERMISSION_DENIED with tritonserver's message, before any handler runs.
#[derive(Clone)]
pub(super) struct Restrict<S> {
    pub inner: S,
    pub rules: std::sync::Arc<crate::frontend::restrict::Restrictions>,
}

impl<S, B> tower::Service<axum::http::Request<B>> for Restrict<S>
where
    S: tower::Service<axum::http::Request<B>, Response = axum::http::Response<tonic::body::Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future =
        futures_util::future::Either<std::future::Ready<std::result::Result<S::Response, S::Error>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::result::Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: axum::http::Request<B>) -> Self::Future {
        if !self.rules.is_empty() {
            if let Some(api) = crate::frontend::restrict::grpc_api(req.uri().path()) {
                let headers = req.headers();
                if let Err(key) = self.rules.check(api, |k| headers.get(k).and_then(|v| v.to_str().ok())) {
                    let status = Status::permission_denied(crate::frontend::restrict::grpc_message(key));
                    return futures_util::future::Either::Left(std::future::ready(Ok(status.into_http())));
                }
            }
        }
        futures_util::future::Either::Right(self.inner.call(req))
    }
}

/// A call whose `grpc-timeout` passes before its response is answered DEADLINE_EXCEEDED, as gRPC C++
/// servers (tritonserver among them) and clients say. tonic's own timer, outside every layer, would answer
/// CANCELLED "Timeout expired" at the same moment; this one is set a millisecond earlier, so it is the one
/// that fires (tokio's timers tick in milliseconds, and tonic polls the call before its timer). Dropping
/// the call's future is what tells the model the client is gone, as before.
#[derive(Clone)]
pub(super) struct Deadline<S> {
    pub inner: S,
}

impl<S, B> tower::Service<axum::http::Request<B>> for Deadline<S>
where
    S: tower::Service<axum::http::Request<B>, Response = axum::http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = OrBoxed<S::Future, S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::result::Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: axum::http::Request<B>) -> Self::Future {
        let Some(timeout) = req.headers().get("grpc-timeout").and_then(|v| grpc_timeout(v.as_bytes())) else {
            return futures_util::future::Either::Left(self.inner.call(req));
        };
        let deadline = tokio::time::Instant::now() + timeout.saturating_sub(Duration::from_millis(1));
        let call = self.inner.call(req);
        futures_util::future::Either::Right(Box::pin(async move {
            match tokio::time::timeout_at(deadline, call).await {
                Ok(answer) => answer,
                Err(_) => Ok(Status::deadline_exceeded("Deadline Exceeded").into_http()),
            }
        }))
    }
}

/// A `grpc-timeout` header's value (at most 8 digits and a unit, from the gRPC HTTP/2 protocol); None
/// when malformed, which tonic ignores too.
pub(super) fn grpc_timeout(v: &[u8]) -> Option<Duration> {
    let (unit, digits) = v.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// gRPC clients list gzip and deflate in `grpc-accept-encoding` on every call, so tonic would compress
/// every response. As tritonserver does, only a call whose request is compressed gets a compressed
/// response: for the others the header is dropped before tonic reads it.
pub(super) fn compress_replies_to_compressed_calls<B>(mut req: axum::http::Request<B>) -> axum::http::Request<B> {
    let compressed = req.headers().get("grpc-encoding").is_some_and(|v| v.as_bytes() != b"identity");
    if !compressed {
        req.headers_mut().remove("grpc-accept-encoding");
    }
    req
}

/// tonic's decoder rejects a message over the size limit before any handler runs, with OUT_OF_RANGE; gRPC
/// C++ servers (Triton among them) say RESOURCE_EXHAUSTED, which is what clients retry or report on.
/// Such a rejection is a trailers-only response, so the code is in the headers and can be rewritten here.
pub(super) fn too_large_is_resource_exhausted(
    mut resp: axum::http::Response<tonic::body::Body>,
) -> axum::http::Response<tonic::body::Body> {
    let h = resp.headers();
    let code = h.get("grpc-status").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<i32>().ok());
    let message = h.get("grpc-message").and_then(|v| v.to_str().ok()).unwrap_or("");
    if code.is_some_and(|c| is_too_large(Code::from_i32(c), message)) {
        resp.headers_mut().insert("grpc-status", axum::http::HeaderValue::from(Code::ResourceExhausted as i32));
    }
    resp
}

/// Whether a status is tonic's "message over the size limit" (the message may be percent-encoded).
pub(super) fn is_too_large(code: Code, message: &str) -> bool {
    code == Code::OutOfRange && message.replace("%20", " ").contains("message length too large")
}
