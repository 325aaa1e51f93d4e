//! Unit tests of `frontend/grpc/mod.rs` and its layers (`layers.rs`).

use super::*;
use layers::grpc_timeout;
use pb::log_settings_request::setting_value::ParameterChoice as P;
use pb::log_settings_request::SettingValue;

#[test]
fn only_compressed_calls_may_get_compressed_replies() {
    let call = |encoding: Option<&str>| {
        let mut b = axum::http::Request::builder().header("grpc-accept-encoding", "identity,deflate,gzip");
        if let Some(e) = encoding {
            b = b.header("grpc-encoding", e);
        }
        compress_replies_to_compressed_calls(b.body(()).unwrap())
    };
    assert!(call(Some("gzip")).headers().contains_key("grpc-accept-encoding"));
    assert!(call(Some("deflate")).headers().contains_key("grpc-accept-encoding"));
    assert!(!call(Some("identity")).headers().contains_key("grpc-accept-encoding"));
    assert!(!call(None).headers().contains_key("grpc-accept-encoding"));
}

#[test]
fn an_answer_too_large_to_send_becomes_that_request_s_error() {
    let resp = pb::ModelInferResponse {
        model_name: "m".into(),
        id: "7".into(),
        raw_output_contents: vec![bytes::Bytes::from(vec![0u8; 100])],
        ..Default::default()
    };
    let answer = stream_answer(resp, true);
    let kept = within_limit(answer.clone(), 1000, "7");
    assert_eq!(kept, answer);
    let error = within_limit(answer, 50, "7");
    assert!(error.error_message.contains("over the gRPC message limit of 50 bytes"), "{}", error.error_message);
    let r = error.infer_response.expect("an error answer names its request");
    assert_eq!(r.id, "7");
    assert!(r.raw_output_contents.is_empty());
    // A decoupled request's final response keeps saying it is the last one.
    assert!(r.parameters.contains_key("triton_final_response"));
}

#[test]
fn status_uses_the_error_code_mapping() {
    assert_eq!(status(Error::not_found("x")).code(), Code::NotFound);
    assert_eq!(status(Error::invalid("x")).code(), Code::InvalidArgument);
    assert_eq!(status(Error::unavailable("x")).code(), Code::Unavailable);
    assert_eq!(status(Error::unsupported("x")).message(), "x");
}

#[test]
fn log_settings_map_to_the_http_update() {
    let v = |p: P| SettingValue { parameter_choice: Some(p) };
    let u = log_update_from_proto(HashMap::from([
        ("log_info".to_string(), v(P::BoolParam(false))),
        ("log_verbose_level".to_string(), v(P::Uint32Param(2))),
    ]))
    .unwrap();
    assert_eq!((u.log_info, u.log_verbose_level, u.log_file), (Some(false), Some(2), None));
    let wrong_type = HashMap::from([("log_info".to_string(), v(P::Uint32Param(1)))]);
    assert!(log_update_from_proto(wrong_type).is_err());
    let unknown = HashMap::from([("log_color".to_string(), v(P::BoolParam(true)))]);
    assert!(log_update_from_proto(unknown).is_err());
    let all = log_settings_to_proto(LogSettings::default());
    assert_eq!(all.len(), 6);
}

#[test]
fn trace_settings_map_to_the_http_update() {
    use pb::trace_setting_request::SettingValue as V;
    let v = |xs: &[&str]| V { value: xs.iter().map(|x| x.to_string()).collect() };
    let u = trace_update_from_proto(HashMap::from([
        ("trace_rate".to_string(), v(&["4"])),
        // An empty list is what tritonclient sends for None: clear the setting.
        ("trace_count".to_string(), v(&[])),
        ("trace_level".to_string(), v(&["TIMESTAMPS", "TENSORS"])),
    ]))
    .unwrap();
    assert_eq!((u.rate, u.count), (Some(Some(4)), Some(None)));
    let two = HashMap::from([("trace_rate".to_string(), v(&["1", "2"]))]);
    assert_eq!(status(trace_update_from_proto(two).unwrap_err()).code(), Code::InvalidArgument);
    let file = HashMap::from([("trace_file".to_string(), v(&["/x"]))]);
    assert_eq!(status(trace_update_from_proto(file).unwrap_err()).code(), Code::Unimplemented);
    let all = trace_settings_to_proto(TraceSettings::default());
    assert_eq!(all["trace_level"].value, vec!["OFF"]);
    assert_eq!(all["trace_mode"].value, vec!["triton"]);
    assert_eq!(all.len(), 6);
}

#[test]
fn grpc_timeout_headers_parse_as_the_protocol_says() {
    use std::time::Duration;
    assert_eq!(grpc_timeout(b"999m"), Some(Duration::from_millis(999)));
    assert_eq!(grpc_timeout(b"2S"), Some(Duration::from_secs(2)));
    assert_eq!(grpc_timeout(b"1H"), Some(Duration::from_secs(3600)));
    assert_eq!(grpc_timeout(b"3M"), Some(Duration::from_secs(180)));
    assert_eq!(grpc_timeout(b"15u"), Some(Duration::from_micros(15)));
    assert_eq!(grpc_timeout(b"99999999n"), Some(Duration::from_nanos(99_999_999)));
    for bad in [&b""[..], b"m", b"123456789m", b"12x", b"-1S", b"1.5S", b"\xff\xffS"] {
        assert_eq!(grpc_timeout(bad), None, "{bad:?}");
    }
}

#[tokio::test]
async fn a_call_past_its_grpc_timeout_is_answered_deadline_exceeded() {
    use tower::{Service as _, ServiceExt as _};
    let never = tower::service_fn(|_req: axum::http::Request<()>| {
        std::future::pending::<std::result::Result<axum::http::Response<tonic::body::Body>, std::convert::Infallible>>()
    });
    let mut svc = Deadline { inner: never };
    let req = axum::http::Request::builder().header("grpc-timeout", "20m").body(()).unwrap();
    let started = std::time::Instant::now();
    let resp = svc.ready().await.unwrap().call(req).await.unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    assert_eq!(resp.headers()["grpc-status"], (Code::DeadlineExceeded as i32).to_string().as_str());
    // Without the header the call is left alone.
    let req = axum::http::Request::builder().body(()).unwrap();
    let waited = tokio::time::timeout(std::time::Duration::from_millis(50), svc.ready().await.unwrap().call(req)).await;
    assert!(waited.is_err());
}
