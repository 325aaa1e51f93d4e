//! Triton's shared-memory extensions over HTTP: `/v2/systemsharedmemory[/region/<name>]/{status,register,
//! unregister}` and the same under `/v2/cudasharedmemory`.

use super::{json_ok, parse_json_body, read_body, ApiResult, HttpState, St};
use crate::error::{Error, Result};
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use base64::Engine;
use serde_json::{json, Value};
use std::sync::Arc;

/// Adds the shared-memory routes.
pub(super) fn routes(router: Router<Arc<HttpState>>) -> Router<Arc<HttpState>> {
    router
        .route("/v2/systemsharedmemory/status", get(system_status_all))
        .route("/v2/systemsharedmemory/region/{name}/status", get(system_status))
        .route("/v2/systemsharedmemory/region/{name}/register", post(system_register))
        .route("/v2/systemsharedmemory/region/{name}/unregister", post(system_unregister))
        .route("/v2/systemsharedmemory/unregister", post(system_unregister_all))
        .route("/v2/cudasharedmemory/status", get(cuda_status_all))
        .route("/v2/cudasharedmemory/region/{name}/status", get(cuda_status))
        .route("/v2/cudasharedmemory/region/{name}/register", post(cuda_register))
        .route("/v2/cudasharedmemory/region/{name}/unregister", post(cuda_unregister))
        .route("/v2/cudasharedmemory/unregister", post(cuda_unregister_all))
}

fn system_status_json(s: &HttpState, name: Option<&str>) -> ApiResult {
    let regions = s.server.shared_memory().system_status(name)?;
    json_ok(Value::Array(
        regions
            .into_iter()
            .map(|r| json!({ "name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size }))
            .collect(),
    ))
}

fn cuda_status_json(s: &HttpState, name: Option<&str>) -> ApiResult {
    let regions = s.server.shared_memory().cuda_status(name)?;
    json_ok(Value::Array(
        regions
            .into_iter()
            .map(|r| json!({ "name": r.name, "device_id": r.device_id, "byte_size": r.byte_size }))
            .collect(),
    ))
}

async fn system_status_all(State(s): St) -> ApiResult {
    system_status_json(&s, None)
}

async fn system_status(State(s): St, Path(name): Path<String>) -> ApiResult {
    system_status_json(&s, Some(&name))
}

async fn cuda_status_all(State(s): St) -> ApiResult {
    cuda_status_json(&s, None)
}

async fn cuda_status(State(s): St, Path(name): Path<String>) -> ApiResult {
    cuda_status_json(&s, Some(&name))
}

/// A field of a register request: missing is Triton's message, the wrong type says what was expected.
fn field<'a>(body: &'a Value, key: &str) -> Result<&'a Value> {
    body.get(key).ok_or_else(|| Error::invalid(format!("Shared memory register request has no '{key}' field")))
}

fn unsigned(body: &Value, key: &str) -> Result<u64> {
    field(body, key)?.as_u64().ok_or_else(|| {
        Error::invalid(format!("'{key}' of a shared memory register request must be a non-negative integer"))
    })
}

async fn system_register(State(s): St, Path(name): Path<String>, headers: HeaderMap, body: Body) -> ApiResult {
    let body = parse_json_body(&read_body(&s, &headers, body).await?)?;
    let key = field(&body, "key")?
        .as_str()
        .ok_or_else(|| Error::invalid("'key' of a shared memory register request must be a string"))?;
    let offset = if body.get("offset").is_some() { unsigned(&body, "offset")? } else { 0 };
    let byte_size = unsigned(&body, "byte_size")?;
    // Mapping is a few quick system calls on a file in /dev/shm, so it runs on the async worker.
    s.server.shared_memory().register_system(&name, key, offset, byte_size)?;
    Ok(StatusCode::OK.into_response())
}

async fn cuda_register(State(s): St, Path(name): Path<String>, headers: HeaderMap, body: Body) -> ApiResult {
    let body = parse_json_body(&read_body(&s, &headers, body).await?)?;
    let b64 = field(&body, "raw_handle")?
        .get("b64")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::invalid("'raw_handle' must be an object with a base64 string 'b64'"))?;
    let handle = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|_| Error::invalid("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"))?;
    let device_id = match body.get("device_id") {
        None => 0,
        Some(v) => v.as_i64().ok_or_else(|| Error::invalid("'device_id' must be an integer"))?,
    };
    let byte_size = unsigned(&body, "byte_size")?;
    s.server.shared_memory().register_cuda(&name, &handle, device_id, byte_size)?;
    Ok(StatusCode::OK.into_response())
}

async fn system_unregister(State(s): St, Path(name): Path<String>, headers: HeaderMap, body: Body) -> ApiResult {
    read_body(&s, &headers, body).await?;
    s.server.shared_memory().unregister_system(Some(&name))?;
    Ok(StatusCode::OK.into_response())
}

async fn system_unregister_all(State(s): St, headers: HeaderMap, body: Body) -> ApiResult {
    read_body(&s, &headers, body).await?;
    s.server.shared_memory().unregister_system(None)?;
    Ok(StatusCode::OK.into_response())
}

async fn cuda_unregister(State(s): St, Path(name): Path<String>, headers: HeaderMap, body: Body) -> ApiResult {
    read_body(&s, &headers, body).await?;
    s.server.shared_memory().unregister_cuda(Some(&name))?;
    Ok(StatusCode::OK.into_response())
}

async fn cuda_unregister_all(State(s): St, headers: HeaderMap, body: Body) -> ApiResult {
    read_body(&s, &headers, body).await?;
    s.server.shared_memory().unregister_cuda(None)?;
    Ok(StatusCode::OK.into_response())
}
