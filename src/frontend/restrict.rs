//! Restricted APIs, as tritonserver does them: `--http-restricted-api=<api>[,<api>...]:<key>=<value>`
//! and `--grpc-restricted-protocol=<protocol>[,...]:<key>=<value>`. A request to a restricted group
//! must carry the header `<key>: <value>` (HTTP) or the metadata entry
//! `triton-grpc-protocol-<key>: <value>` (gRPC); otherwise it gets 403 / PERMISSION_DENIED with
//! tritonserver's message (tritonserver itself answers gRPC with UNAVAILABLE).

use crate::error::{Error, Result};

/// The API groups a restriction names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Health,
    Metadata,
    Inference,
    SharedMemory,
    ModelConfig,
    ModelRepository,
    Statistics,
    Trace,
    Logging,
}

const ALL: [(Api, &str); 9] = [
    (Api::Health, "health"),
    (Api::Metadata, "metadata"),
    (Api::Inference, "inference"),
    (Api::SharedMemory, "shared-memory"),
    (Api::ModelConfig, "model-config"),
    (Api::ModelRepository, "model-repository"),
    (Api::Statistics, "statistics"),
    (Api::Trace, "trace"),
    (Api::Logging, "logging"),
];

/// Which header (lower-case name) and value each restricted group needs.
#[derive(Clone, Debug, Default)]
pub struct Restrictions {
    rules: Vec<(Api, String, String)>,
}

impl Restrictions {
    /// Parses the flag values; `flag` names the flag in errors. The header name of a gRPC rule gets
    /// tritonserver's `triton-grpc-protocol-` prefix.
    pub fn parse(specs: &[String], flag: &str, grpc: bool) -> Result<Self> {
        let mut rules: Vec<(Api, String, String)> = Vec::new();
        for spec in specs {
            let bad = |why: &str| {
                Error::invalid(format!("invalid {flag}='{spec}': {why} (expected <api>[,<api>...]:<key>=<value>)"))
            };
            let (apis, header) = spec.split_once(':').ok_or_else(|| bad("no ':'"))?;
            let (key, value) = header.split_once('=').ok_or_else(|| bad("no '=' after the key"))?;
            let key = key.trim();
            if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
                return Err(bad("the key must be a header name"));
            }
            let key = if grpc { format!("triton-grpc-protocol-{key}") } else { key.to_string() }.to_ascii_lowercase();
            for name in apis.split(',').map(str::trim) {
                let Some((api, _)) = ALL.iter().find(|(_, n)| *n == name) else {
                    let known: Vec<&str> = ALL.iter().map(|(_, n)| *n).collect();
                    return Err(bad(&format!("unknown API '{name}'; known: {}", known.join(", "))));
                };
                if rules.iter().any(|(a, _, _)| a == api) {
                    return Err(bad(&format!("'{name}' is restricted twice")));
                }
                rules.push((*api, key.clone(), value.to_string()));
            }
        }
        Ok(Restrictions { rules })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// `Err(header name)` when `api` is restricted and `header` (a lookup by lower-case name) does not
    /// give the expected value.
    pub fn check<'a>(&self, api: Api, header: impl Fn(&str) -> Option<&'a str>) -> Result<(), &str> {
        match self.rules.iter().find(|(a, _, _)| *a == api) {
            Some((_, key, value)) if header(key) != Some(value.as_str()) => Err(key),
            _ => Ok(()),
        }
    }
}

/// The group of an HTTP request path (KServe v2 and Triton's extensions); `None` for paths no group
/// covers (unknown ones, which answer 404 anyway).
pub fn http_api(path: &str) -> Option<Api> {
    let p: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    Some(match p.as_slice() {
        ["v2", "health", ..] => Api::Health,
        ["v2"] => Api::Metadata,
        ["v2", "logging"] => Api::Logging,
        ["v2", "trace", ..] => Api::Trace,
        ["v2", "repository", ..] => Api::ModelRepository,
        ["v2", "systemsharedmemory", ..] | ["v2", "cudasharedmemory", ..] => Api::SharedMemory,
        ["v2", "models", "stats"] => Api::Statistics,
        // DeepStack's image endpoints run models.
        ["v1", "vision", ..] => Api::Inference,
        // The OpenAI-compatible API, grouped as Triton's OpenAI front-end groups it.
        ["v1", "completions"] | ["v1", "chat", "completions"] => Api::Inference,
        ["v1", "models", ..] => Api::ModelRepository,
        ["v2", "models", _, rest @ ..] => {
            let rest = match rest {
                ["versions", _, tail @ ..] => tail,
                other => other,
            };
            match rest {
                [] => Api::Metadata,
                ["ready"] => Api::Health,
                ["infer"] | ["generate"] | ["generate_stream"] => Api::Inference,
                ["config"] => Api::ModelConfig,
                ["stats"] => Api::Statistics,
                ["trace", ..] => Api::Trace,
                _ => return None,
            }
        }
        _ => return None,
    })
}

/// The group of a gRPC method path (`/inference.GRPCInferenceService/ModelInfer`).
pub fn grpc_api(path: &str) -> Option<Api> {
    let (service, method) = path.trim_start_matches('/').split_once('/')?;
    if service == "grpc.health.v1.Health" {
        return Some(Api::Health);
    }
    Some(match method {
        "ServerLive" | "ServerReady" | "ModelReady" => Api::Health,
        "ServerMetadata" | "ModelMetadata" => Api::Metadata,
        "ModelInfer" | "ModelStreamInfer" => Api::Inference,
        "ModelConfig" => Api::ModelConfig,
        "ModelStatistics" => Api::Statistics,
        "RepositoryIndex" | "RepositoryModelLoad" | "RepositoryModelUnload" => Api::ModelRepository,
        "SystemSharedMemoryStatus"
        | "SystemSharedMemoryRegister"
        | "SystemSharedMemoryUnregister"
        | "CudaSharedMemoryStatus"
        | "CudaSharedMemoryRegister"
        | "CudaSharedMemoryUnregister" => Api::SharedMemory,
        "TraceSetting" => Api::Trace,
        "LogSettings" => Api::Logging,
        _ => return None,
    })
}

/// tritonserver's answer to a request without the header.
pub fn http_message(key: &str) -> String {
    format!("This API is restricted, expecting header '{key}'")
}

pub fn grpc_message(key: &str) -> String {
    format!("This protocol is restricted, expecting header '{key}'")
}

#[cfg(test)]
mod tests;
