//! In-process tests of routing, status codes and body handling (no model runtime needed).

use super::*;
use crate::core::ServerOptions;
use crate::logging::LogSettings;
use axum::http::Request;
use std::io::Write;
use tower::ServiceExt;

async fn app(max_body: usize) -> Router {
    let repo = tempfile::tempdir().unwrap();
    let server = Server::new(ServerOptions::explicit(vec![repo.path().to_path_buf()]));
    server.startup().await.unwrap();
    let log = LogControl::detached(LogSettings::default());
    router(HttpState {
        server,
        log,
        max_body,
        restricted: Default::default(),
        deepstack_detection_model: None,
        header_forward: None,
    })
}

async fn call(app: &Router, req: Request<Body>) -> (StatusCode, Value) {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
    let v = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() };
    (status, v)
}

fn get(uri: &str) -> Request<Body> {
    Request::get(uri).body(Body::empty()).unwrap()
}

fn post(uri: &str, body: impl Into<Body>) -> Request<Body> {
    Request::post(uri).body(body.into()).unwrap()
}

#[tokio::test]
async fn health_and_metadata() {
    let app = app(1 << 20).await;
    assert_eq!(call(&app, get("/v2/health/live")).await.0, StatusCode::OK);
    assert_eq!(call(&app, get("/v2/health/ready")).await.0, StatusCode::OK);
    let (s, v) = call(&app, get("/v2")).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["name"], "triton");
    assert!(v["extensions"].as_array().unwrap().iter().any(|e| e == "binary_tensor_data"));
}

#[tokio::test]
async fn errors_are_json_with_the_right_status() {
    let app = app(1 << 20).await;
    let (s, v) = call(&app, get("/v2/models/nope")).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert!(v["error"].as_str().unwrap().contains("'nope'"));
    let (s, v) = call(&app, get("/v2/models/nope/versions/abc")).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(v["error"].as_str().unwrap().contains("not a valid model version"));
    assert_eq!(call(&app, get("/v2/nothing/here")).await.0, StatusCode::NOT_FOUND);
    let (s, _) = call(&app, post("/v2/models/nope/infer", r#"{"inputs":[]}"#)).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, v) = call(&app, post("/v2/models/nope/infer", "{bad")).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let (s, _) = call(&app, post("/v2/repository/models/nope/load", "")).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _) = call(&app, post("/v2/repository/index", "[1]")).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let req = Request::post("/v2/models/m/infer").header(HEADER_LEN, "x").body(Body::from("{}")).unwrap();
    assert_eq!(call(&app, req).await.0, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn body_limit_and_compression() {
    let app = app(64).await;
    let (s, v) = call(&app, post("/v2/repository/index", vec![b' '; 65])).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(v["error"].as_str().unwrap().contains("64 byte limit"));

    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(br#"{"ready": true}"#).unwrap();
    let req = Request::post("/v2/repository/index")
        .header("content-encoding", "gzip")
        .body(Body::from(gz.finish().unwrap()))
        .unwrap();
    let (s, v) = call(&app, req).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v, serde_json::json!([]));

    // A small compressed body that inflates past the limit is refused too.
    let mut zl = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    zl.write_all(&[b' '; 4096]).unwrap();
    let req = Request::post("/v2/repository/index")
        .header("content-encoding", "deflate")
        .body(Body::from(zl.finish().unwrap()))
        .unwrap();
    assert_eq!(call(&app, req).await.0, StatusCode::PAYLOAD_TOO_LARGE);

    let req = Request::post("/v2/repository/index").header("content-encoding", "br").body(Body::from("{}")).unwrap();
    assert_eq!(call(&app, req).await.0, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn logging_settings_round_trip() {
    let app = app(1 << 20).await;
    let (s, v) = call(&app, get("/v2/logging")).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["log_verbose_level"], 0);
    let (s, v) = call(&app, post("/v2/logging", r#"{"log_verbose_level": 2, "log_info": false}"#)).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["log_verbose_level"], 2);
    assert_eq!(v["log_info"], false);
    assert_eq!(call(&app, post("/v2/logging", r#"{"log_bogus": 1}"#)).await.0, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn trace_settings_shapes_and_errors() {
    let app = app(1 << 20).await;
    let (s, v) = call(&app, get("/v2/trace/setting")).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        v,
        serde_json::json!({"trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1",
                           "log_frequency": "0", "trace_file": "", "trace_mode": "triton"})
    );
    let (s, v) = call(&app, post("/v2/trace/setting", r#"{"trace_rate": "5", "trace_count": null}"#)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!((&v["trace_rate"], &v["trace_count"]), (&serde_json::json!("5"), &serde_json::json!("-1")));
    // Keys come in tritonserver's order.
    let resp = app.clone().oneshot(get("/v2/trace/setting")).await.unwrap();
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
    assert!(body.starts_with(br#"{"trace_level":["OFF"],"trace_rate":"5","#), "{body:?}");
    for bad in [
        r#"{"trace_rate": 5}"#,
        r#"{"trace_rate": "abc"}"#,
        r#"{"trace_count": "-2"}"#,
        r#"{"trace_level": ["OFF", "TIMESTAMPS"]}"#,
        r#"{"trace_level": [1]}"#,
        r#"{"trace_level": ["TIMESTAMPS"]}"#,
        r#"{"bogus": "1"}"#,
        "[]",
        "{bad",
    ] {
        let (s, v) = call(&app, post("/v2/trace/setting", bad)).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{bad}: {v}");
        assert!(v["error"].is_string());
    }
    let (s, _) = call(&app, post("/v2/trace/setting", r#"{"trace_file": "/tmp/x"}"#)).await;
    assert_eq!(s, StatusCode::NOT_IMPLEMENTED);
    assert_eq!(call(&app, get("/v2/models/nope/trace/setting")).await.0, StatusCode::NOT_FOUND);
    assert_eq!(call(&app, post("/v2/models/nope/trace/setting", "{}")).await.0, StatusCode::NOT_FOUND);
}
