//! The TRITONSERVER / TRITONBACKEND C ABI as tritonrs hosts it: enum values and flags (facts of the
//! documented API 1.19, written here, no Triton header copied), and the Rust objects that stand
//! behind the API's opaque pointers. Every pointer handed to a backend names one of these objects and
//! is registered in [`LIVE`] while it may be used, so the exported functions can refuse a null,
//! stale or foreign pointer with TRITONSERVER_ERROR_INVALID_ARG instead of dereferencing it.

use crate::model_api::types::{DataType, ParamValue, Parameters, Tensor};
use bytes::Bytes;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::atomic::AtomicPtr;
use std::sync::Arc;

/// TRITONBACKEND_API_VERSION_MAJOR / _MINOR that tritonrs implements (as Triton 2.51).
pub const API_MAJOR: u32 = 1;
pub const API_MINOR: u32 = 19;

/// `TRITONSERVER_Error_Code`.
pub mod code {
    pub const UNKNOWN: u32 = 0;
    pub const INTERNAL: u32 = 1;
    pub const NOT_FOUND: u32 = 2;
    pub const INVALID_ARG: u32 = 3;
    pub const UNAVAILABLE: u32 = 4;
    pub const UNSUPPORTED: u32 = 5;
    pub const ALREADY_EXISTS: u32 = 6;
    pub const CANCELLED: u32 = 7;
}

/// `TRITONSERVER_MemoryType`.
pub const MEMORY_CPU: u32 = 0;
pub const MEMORY_CPU_PINNED: u32 = 1;
pub const MEMORY_GPU: u32 = 2;

/// `TRITONSERVER_ParameterType`.
pub const PARAMETER_STRING: u32 = 0;
pub const PARAMETER_INT: u32 = 1;
pub const PARAMETER_BOOL: u32 = 2;
pub const PARAMETER_DOUBLE: u32 = 3;

/// `TRITONSERVER_InstanceGroupKind`.
pub const INSTANCEGROUPKIND_CPU: u32 = 1;
pub const INSTANCEGROUPKIND_GPU: u32 = 2;

/// `TRITONSERVER_LogLevel`.
pub const LOG_INFO: u32 = 0;
pub const LOG_WARN: u32 = 1;
pub const LOG_ERROR: u32 = 2;

/// `TRITONSERVER_RequestReleaseFlag`, `TRITONSERVER_ResponseCompleteFlag`.
pub const REQUEST_RELEASE_ALL: u32 = 1;
pub const RESPONSE_COMPLETE_FINAL: u32 = 1;

/// `TRITONBACKEND_ExecutionPolicy`, `TRITONBACKEND_ArtifactType`.
pub const EXECUTION_BLOCKING: u32 = 0;
pub const ARTIFACT_FILESYSTEM: u32 = 0;

/// `TRITONSERVER_DataType` uses the model configuration's numbering (BOOL 1 ... BF16 14; 0 invalid).
pub fn datatype_from_c(v: u32) -> Option<DataType> {
    i32::try_from(v).ok().and_then(DataType::from_config)
}

pub fn datatype_to_c(d: DataType) -> u32 {
    d.to_config() as u32
}

/// What kind of object a registered pointer names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Error,
    Message,
    Backend,
    Model,
    Instance,
    Request,
    Input,
    Response,
    Output,
    Factory,
}

/// Every pointer currently handed out, with what it names.
pub static LIVE: Mutex<Option<HashMap<usize, Kind>>> = Mutex::new(None);

pub fn register(p: *const c_void, kind: Kind) {
    LIVE.lock().get_or_insert_with(HashMap::new).insert(p as usize, kind);
}

pub fn unregister(p: *const c_void) {
    if let Some(m) = LIVE.lock().as_mut() {
        m.remove(&(p as usize));
    }
}

/// Whether `p` is a live object of `kind`.
pub fn is_live(p: *const c_void, kind: Kind) -> bool {
    !p.is_null() && LIVE.lock().as_ref().and_then(|m| m.get(&(p as usize))) == Some(&kind)
}

/// `TRITONSERVER_Error`.
pub struct ErrorObj {
    pub code: u32,
    pub message: CString,
}

/// `TRITONSERVER_Message`: serialized JSON.
pub struct MessageObj {
    pub json: CString,
}

/// `TRITONBACKEND_Backend`: one loaded backend library.
pub struct BackendObj {
    pub name: CString,
    /// `{"cmdline": {...}}`: its `--backend-config` settings.
    pub config_json: String,
    pub state: AtomicPtr<c_void>,
    /// The directory the library was found in (`TRITONBACKEND_BackendArtifacts`).
    pub location: CString,
}

/// `TRITONBACKEND_Model`: one model version served by a C backend.
pub struct ModelObj {
    pub name: CString,
    pub version: u64,
    /// The model's folder (`TRITONBACKEND_ModelRepository`).
    pub repository: CString,
    /// The configuration as JSON; `TRITONBACKEND_ModelSetConfig` may replace it while initializing.
    pub config_json: Mutex<String>,
    pub auto_complete: bool,
    pub backend: *const BackendObj,
    pub state: AtomicPtr<c_void>,
}

/// `TRITONBACKEND_ModelInstance`.
pub struct InstanceObj {
    pub name: CString,
    pub kind: u32,
    pub device_id: i32,
    pub model: *const ModelObj,
    pub state: AtomicPtr<c_void>,
}

/// `TRITONBACKEND_Input`: one input tensor of a request, in host memory.
pub struct InputObj {
    pub name: CString,
    pub datatype: u32,
    pub shape: Vec<i64>,
    pub data: Bytes,
}

/// What the backend has done with a request so far; the instance thread waits on it.
#[derive(Default)]
pub struct Progress {
    /// Responses sent, in order (an error response is an `Err`).
    pub responses: Vec<crate::error::Result<(Vec<Tensor>, Parameters)>>,
    /// A response (or flags) with TRITONSERVER_RESPONSE_COMPLETE_FINAL arrived.
    pub done: bool,
    /// TRITONBACKEND_RequestRelease was called.
    pub released: bool,
    /// The server gave up waiting; later responses are dropped.
    pub abandoned: bool,
}

/// Shared by a request and its responses.
#[derive(Default)]
pub struct Completion {
    pub progress: Mutex<Progress>,
    pub changed: Condvar,
    /// A decoupled model's request: each response goes here as it is sent, not into `progress`.
    pub sink: Option<crate::model_api::ResponseSender>,
}

impl Completion {
    /// Delivers a response (`None`: only the final flag) from the backend.
    pub fn deliver(&self, response: Option<crate::error::Result<(Vec<Tensor>, Parameters)>>, is_final: bool) {
        let mut p = self.progress.lock();
        if p.abandoned || (p.done && self.sink.is_some()) {
            return;
        }
        match (&self.sink, response) {
            (Some(sink), r) => {
                use crate::model_api::DecoupledResponse;
                sink.send(Ok(match r {
                    None => DecoupledResponse { is_final, empty: true, ..Default::default() },
                    Some(Ok((outputs, parameters))) => {
                        DecoupledResponse { outputs, parameters, is_final, ..Default::default() }
                    }
                    Some(Err(e)) => DecoupledResponse { is_final, error: Some(e), ..Default::default() },
                }));
            }
            (None, Some(r)) => p.responses.push(r),
            (None, None) => {}
        }
        if is_final {
            p.done = true;
        }
        drop(p);
        self.changed.notify_all();
    }

    /// Whether the client went away or the server gave up on the request.
    pub fn cancelled(&self) -> bool {
        self.progress.lock().abandoned || self.sink.as_ref().is_some_and(|s| s.is_closed())
    }
}

/// `TRITONBACKEND_ResponseFactory`: makes responses for one request, also after it was released.
pub struct FactoryObj {
    pub completion: Arc<Completion>,
}

/// `TRITONBACKEND_Request`.
pub struct RequestObj {
    pub id: CString,
    pub correlation_id: u64,
    pub correlation_str: CString,
    pub flags: u32,
    pub inputs: Vec<InputObj>,
    pub outputs: Vec<CString>,
    /// Parameters as the API hands them out: (key, type, value).
    pub parameters: Vec<(CString, u32, ParamSlot)>,
    pub completion: Arc<Completion>,
}

/// A parameter's value, where `TRITONBACKEND_RequestParameter` points.
pub enum ParamSlot {
    String(CString),
    Int(i64),
    Bool(bool),
    Double(f64),
}

impl ParamSlot {
    pub fn from_value(v: &ParamValue) -> (u32, ParamSlot) {
        match v {
            ParamValue::Bool(b) => (PARAMETER_BOOL, ParamSlot::Bool(*b)),
            ParamValue::Int(i) => (PARAMETER_INT, ParamSlot::Int(*i)),
            ParamValue::Uint(u) => match i64::try_from(*u) {
                Ok(i) => (PARAMETER_INT, ParamSlot::Int(i)),
                Err(_) => (PARAMETER_STRING, ParamSlot::String(cstring(&u.to_string()))),
            },
            ParamValue::Double(d) => (PARAMETER_DOUBLE, ParamSlot::Double(*d)),
            ParamValue::String(s) => (PARAMETER_STRING, ParamSlot::String(cstring(s))),
        }
    }
}

/// `TRITONBACKEND_Response`.
pub struct ResponseObj {
    pub completion: Arc<Completion>,
    /// Boxed so each output's address (the backend's `TRITONBACKEND_Output*`) stays put when the
    /// vector grows.
    #[allow(clippy::vec_box)]
    pub outputs: Vec<Box<OutputObj>>,
    pub parameters: Parameters,
}

/// `TRITONBACKEND_Output`: its buffer is allocated by `TRITONBACKEND_OutputBuffer`.
pub struct OutputObj {
    pub name: String,
    pub datatype: DataType,
    pub shape: Vec<i64>,
    pub buffer: Vec<u8>,
}

/// A C string from Rust text; an interior NUL (never in names the server checked) ends it there.
pub fn cstring(s: &str) -> CString {
    CString::new(s.split('\0').next().unwrap_or_default()).unwrap_or_default()
}
