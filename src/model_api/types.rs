//! Transport-neutral request and response types that every front-end and backend shares. Tensors,
//! datatypes and parameters live in the tensor layer (`crate::tensor`) and are re-exported here, so a
//! backend sees one interface.

use crate::error::{Error, Result};
pub use crate::tensor::shm::{shm_ref, ShmRef, BYTE_SIZE, OFFSET, REGION};
pub use crate::tensor::{bytes_elements, element_count, serialize_bytes, DataType, ParamValue, Parameters, Tensor};

/// One output the client asked for.
#[derive(Debug, Clone, Default)]
pub struct RequestedOutput {
    pub name: String,
    /// Classification extension: return the top `class_count` classes as "score:index:label" strings.
    pub class_count: u32,
    /// Front-end specific hints (e.g. `binary_data`), passed through untouched.
    pub parameters: Parameters,
    /// The `shared_memory_*` parameters, parsed by [`RequestedOutput::from_parameters`]: the core maps
    /// them to `shared_memory`.
    pub shm: Option<ShmRef>,
    /// Where to write the output instead of returning it: set by the core from `shm` (see
    /// `core::shm_params`).
    pub shared_memory: Option<crate::memory::regions::ShmSlice>,
}

impl RequestedOutput {
    /// Builds a requested output from its protocol parameters: `classification` sets `class_count`;
    /// the `shared_memory_*` parameters are checked here and resolved by the core.
    pub fn from_parameters(name: String, parameters: Parameters) -> Result<RequestedOutput> {
        let shm = shm_ref(&parameters, &name)?;
        if shm.is_some() && parameters.contains_key("classification") {
            return Err(Error::invalid("Output can't set both 'shared_memory_region' and 'classification'"));
        }
        let class_count = match parameters.get("classification") {
            None => 0,
            Some(v) => v.as_i64().and_then(|c| u32::try_from(c).ok()).ok_or_else(|| {
                Error::invalid(format!("output '{name}': classification must be a non-negative integer"))
            })?,
        };
        Ok(RequestedOutput { name, class_count, parameters, shm, shared_memory: None })
    }
}

/// The trace of a request, as an opaque handle: the core spawns child traces from it for the requests
/// made on the request's behalf (ensemble steps, BLS calls). Backends only pass it on.
#[derive(Clone)]
pub struct TraceLink(pub std::sync::Arc<dyn std::any::Any + Send + Sync>);

impl std::fmt::Debug for TraceLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TraceLink")
    }
}

/// An inference request, decoded once from whichever transport it arrived on.
#[derive(Debug, Clone, Default)]
pub struct InferRequest {
    pub model_name: String,
    /// `None` lets the server pick (the highest ready version).
    pub model_version: Option<i64>,
    pub id: String,
    pub inputs: Vec<Tensor>,
    /// Empty means "all outputs".
    pub outputs: Vec<RequestedOutput>,
    pub parameters: Parameters,
    /// The model versions whose `execute` waits for this request, directly or through other models:
    /// set on BLS requests (and passed on to ensemble steps), empty for a client's request.
    pub callers: CallChain,
    /// The trace of the request this one runs on behalf of (an ensemble's step, a BLS request), from
    /// which the core spawns this request's child trace; `None` for a client's request.
    pub trace: Option<TraceLink>,
}

/// Model versions (name, version) waiting on a request; see [`InferRequest::callers`].
pub type CallChain = std::sync::Arc<[(String, i64)]>;

/// The answer to an [`InferRequest`].
#[derive(Debug, Clone)]
pub struct InferResponse {
    pub model_name: String,
    pub model_version: i64,
    pub id: String,
    pub outputs: Vec<Tensor>,
    pub parameters: Parameters,
}

/// One response of a streamed inference (gRPC `ModelStreamInfer`, a decoupled BLS request): a decoupled
/// model sends 0..n of them per request, the last one final.
#[derive(Debug, Clone)]
pub struct StreamResponse {
    /// The response; without outputs when `empty`.
    pub response: InferResponse,
    /// The last response of its request (Triton's `triton_final_response`).
    pub is_final: bool,
    /// Only the final flag, with no response from the model (sent to clients that ask for it with
    /// `triton_enable_empty_final_response`).
    pub empty: bool,
    /// An error response from the model (the request goes on until its final response); an `Err` in
    /// the stream instead ends the request.
    pub error: Option<crate::error::Error>,
}
