use super::*;

fn specs(s: &[&str]) -> Vec<String> {
    s.iter().map(|x| x.to_string()).collect()
}

#[test]
fn flags_parse_as_tritonserver_writes_them() {
    let r = Restrictions::parse(&specs(&["model-repository,health:Admin-Key=s3cret", "inference:k=v"]), "--x", false)
        .unwrap();
    let headers = |want: &'static str| move |name: &str| (name == "admin-key").then_some(want);
    assert_eq!(r.check(Api::ModelRepository, headers("s3cret")), Ok(()));
    assert_eq!(r.check(Api::Health, headers("wrong")), Err("admin-key"));
    assert_eq!(r.check(Api::Inference, headers("s3cret")), Err("k"));
    assert_eq!(r.check(Api::Metadata, |_| None), Ok(()), "not restricted");
    let g = Restrictions::parse(&specs(&["inference:k=v"]), "--x", true).unwrap();
    assert_eq!(g.check(Api::Inference, |n| (n == "triton-grpc-protocol-k").then_some("v")), Ok(()));
}

#[test]
fn bad_flags_say_what_is_wrong() {
    let err = |s: &str| Restrictions::parse(&specs(&[s]), "--http-restricted-api", false).unwrap_err().message;
    assert!(err("health").contains("no ':'"));
    assert!(err("health:key").contains("no '='"));
    assert!(err("helth:k=v").contains("unknown API 'helth'"));
    assert!(err("health,health:k=v").contains("restricted twice"));
    assert!(err("health:bad key=v").contains("header name"));
}

#[test]
fn every_endpoint_has_its_group() {
    for (path, api) in [
        ("/v2/health/live", Api::Health),
        ("/v2/models/m/ready", Api::Health),
        ("/v2/models/m/versions/1/ready", Api::Health),
        ("/v2", Api::Metadata),
        ("/v2/models/m", Api::Metadata),
        ("/v2/models/m/versions/2", Api::Metadata),
        ("/v2/models/m/infer", Api::Inference),
        ("/v2/models/m/versions/1/infer", Api::Inference),
        ("/v2/models/m/config", Api::ModelConfig),
        ("/v2/repository/index", Api::ModelRepository),
        ("/v2/repository/models/m/load", Api::ModelRepository),
        ("/v2/models/stats", Api::Statistics),
        ("/v2/models/m/stats", Api::Statistics),
        ("/v2/trace/setting", Api::Trace),
        ("/v2/models/m/trace/setting", Api::Trace),
        ("/v2/logging", Api::Logging),
        ("/v2/systemsharedmemory/status", Api::SharedMemory),
        ("/v1/vision/detection", Api::Inference),
        ("/v1/vision/custom/m", Api::Inference),
        ("/v1/completions", Api::Inference),
        ("/v1/chat/completions", Api::Inference),
        ("/v1/models", Api::ModelRepository),
        ("/v1/models/m", Api::ModelRepository),
    ] {
        assert_eq!(http_api(path), Some(api), "{path}");
    }
    assert_eq!(http_api("/metrics"), None);
    assert_eq!(grpc_api("/inference.GRPCInferenceService/ModelStreamInfer"), Some(Api::Inference));
    assert_eq!(grpc_api("/inference.GRPCInferenceService/RepositoryModelLoad"), Some(Api::ModelRepository));
    assert_eq!(grpc_api("/grpc.health.v1.Health/Check"), Some(Api::Health));
    assert_eq!(grpc_api("/inference.GRPCInferenceService/Nope"), None);
}
