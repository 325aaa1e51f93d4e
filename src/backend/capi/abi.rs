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
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// TRITONBACKEND_API_VERSION_MAJOR / _MINOR that tritonrs implements (as Triton 2.51).
pub const API_MAJOR: u32 = 1;
pub const API_MINOR: u32 = 19;

/// TRITONSERVER_API_VERSION_MAJOR / _MINOR of Triton 2.51.
pub const SERVER_API_MAJOR: u32 = 1;
pub const SERVER_API_MINOR: u32 = 34;

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

/// `TRITONSERVER_ParameterType` BYTES (only `TRITONSERVER_ParameterBytesNew` makes one).
pub const PARAMETER_BYTES: u32 = 4;

/// `TRITONSERVER_MetricKind`.
pub const METRIC_COUNTER: u32 = 0;
pub const METRIC_GAUGE: u32 = 1;
pub const METRIC_HISTOGRAM: u32 = 2;

/// `TRITONSERVER_ModelTxnPropertyFlag`.
pub const TXN_ONE_TO_ONE: u32 = 1;
pub const TXN_DECOUPLED: u32 = 2;

/// `TRITONSERVER_InstanceGroupKind`.
pub const INSTANCEGROUPKIND_CPU: u32 = 1;
pub const INSTANCEGROUPKIND_GPU: u32 = 2;
pub const INSTANCEGROUPKIND_MODEL: u32 = 3;

/// `TRITONSERVER_LogLevel`.
pub const LOG_INFO: u32 = 0;
pub const LOG_WARN: u32 = 1;
pub const LOG_ERROR: u32 = 2;

/// `TRITONSERVER_RequestReleaseFlag`, `TRITONSERVER_ResponseCompleteFlag`.
pub const REQUEST_RELEASE_ALL: u32 = 1;
pub const REQUEST_RELEASE_RESCHEDULE: u32 = 2;
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
    Server,
    MemoryManager,
    BufferAttributes,
    BackendAttribute,
    Parameter,
    MetricFamily,
    Metric,
    MetricArgs,
    InferRequest,
    InferResponse,
    Allocator,
    State,
    ResponseStatistics,
    Agent,
    AgentModel,
    CacheEntry,
    CacheAllocator,
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
    /// What `TRITONBACKEND_ModelServer` hands out.
    pub server: Arc<ServerObj>,
    /// What the backend reports with `TRITONBACKEND_ModelReportMemoryUsage` and the instance form.
    pub memory: Arc<crate::model_api::MemoryUsage>,
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
    /// What `TRITONBACKEND_InputBufferAttributes` points at: host memory of the data's size.
    pub attributes: BufferAttributesObj,
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
    /// The backend released the request with `TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`: this execution
    /// of it is over and it runs again (iterative sequences); it needs no final response yet.
    pub rescheduled: bool,
    /// The scheduler no longer waits on this execution (a decoupled request whose Execute returned): a
    /// reschedule now would come too late to be seen.
    pub settled: bool,
    /// The compute split the backend reported (`TRITONBACKEND_ModelInstanceReportStatistics`).
    pub reported: Option<crate::model_api::ExecTimings>,
    /// Implicit state the backend updated (`TRITONBACKEND_StateUpdate`), handed to the sequence
    /// batcher with the request's outputs.
    pub states: Vec<Tensor>,
}

/// Wakes an instance thread waiting on its backend. One per instance, rung whenever something it may
/// wait for happens: a request it handed over gets a response or is released, `Execute` returns, the
/// instance's thread ends, or the model is retired (which moves the deadlines). One bell for all of
/// them, so the thread waits on one thing however many it watches.
#[derive(Default)]
pub struct Bell {
    /// How often it rang: a waiter reads it before looking, and sleeps only while it is unchanged, so
    /// a ring between looking and sleeping is not lost.
    rings: Mutex<u64>,
    rung: Condvar,
}

impl Bell {
    pub fn ring(&self) {
        *self.rings.lock() += 1;
        self.rung.notify_all();
    }

    /// Waits until `ready` (true) or until `deadline` has passed (false). Both are asked again after
    /// each ring: a retirement moves the deadline closer. `ready` must not ring this bell.
    pub fn wait(&self, mut ready: impl FnMut() -> bool, deadline: impl Fn() -> Instant) -> bool {
        loop {
            let seen = *self.rings.lock();
            if ready() {
                return true;
            }
            let until = deadline();
            let mut rings = self.rings.lock();
            while *rings == seen {
                if self.rung.wait_until(&mut rings, until).timed_out() {
                    drop(rings);
                    return ready();
                }
            }
        }
    }
}

/// The model a request belongs to, for what the host says about its backend's answers.
#[derive(Default)]
pub struct Origin {
    pub model: String,
    pub backend: String,
    /// A response after a request's final one was logged already (once per model is enough).
    pub late_response_logged: AtomicBool,
    /// The model is an iterative sequence: its backend may release a request with
    /// `TRITONSERVER_REQUEST_RELEASE_RESCHEDULE` to have it run again.
    pub iterative: bool,
}

/// Shared by a request and its responses.
#[derive(Default)]
pub struct Completion {
    pub progress: Mutex<Progress>,
    /// The instance's bell, rung on every change of `progress`.
    pub bell: Arc<Bell>,
    /// A decoupled model's request: each response goes here as it is sent, not into `progress`.
    pub sink: Option<crate::model_api::ResponseSender>,
    pub origin: Arc<Origin>,
    /// The request's id, for messages.
    pub request_id: String,
    /// The request's cancellation (its client went away) and rescheduling.
    pub signals: crate::model_api::Signals,
}

impl Completion {
    /// Delivers a response (`None`: only the final flag) from the backend. Anything after the final
    /// flag is dropped: the request is answered already.
    pub fn deliver(&self, response: Option<crate::error::Result<(Vec<Tensor>, Parameters)>>, is_final: bool) {
        let mut p = self.progress.lock();
        if p.abandoned {
            return;
        }
        if p.done {
            drop(p);
            if !self.origin.late_response_logged.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "Model '{}': backend '{}' sent a response after the final response of request '{}'; it was \
                     dropped (said once per model).",
                    self.origin.model,
                    self.origin.backend,
                    self.request_id
                );
            }
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
        self.bell.ring();
    }

    /// `TRITONBACKEND_RequestRelease`: the backend is done with the request.
    pub fn release(&self) {
        self.progress.lock().released = true;
        self.bell.ring();
    }

    /// `TRITONBACKEND_RequestRelease` with `TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`: this execution of
    /// the request is over, and the scheduler runs it again. False (nothing changes) when it comes too
    /// late: a decoupled request is rescheduled from within `TRITONBACKEND_ModelInstanceExecute`.
    pub fn reschedule(&self) -> bool {
        {
            let mut p = self.progress.lock();
            if p.settled {
                return false;
            }
            p.released = true;
            p.rescheduled = true;
        }
        self.signals.reschedule();
        self.bell.ring();
        true
    }

    /// Whether the backend has sent the final response and released the request, or rescheduled it (or
    /// the server gave up).
    pub fn finished(&self) -> bool {
        let p = self.progress.lock();
        (p.done && p.released) || p.rescheduled || p.abandoned
    }

    /// Gives up on a request the backend has not finished: its client gets `why` as an error, and
    /// whatever the backend sends later is dropped.
    pub fn expire(&self, why: &str) {
        let mut p = self.progress.lock();
        if p.done || p.abandoned || p.rescheduled {
            return;
        }
        p.abandoned = true;
        if let Some(sink) = &self.sink {
            sink.send(Err(crate::error::Error::unavailable(why)));
        }
        drop(p);
        self.bell.ring();
    }

    /// Whether the client went away (or cancelled the request) or the server gave up on it.
    pub fn cancelled(&self) -> bool {
        self.signals.is_cancelled()
            || self.progress.lock().abandoned
            || self.sink.as_ref().is_some_and(|s| s.is_closed())
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
    /// The model's implicit state outputs (`sequence_batching.state[].output_name`).
    pub state_outputs: Arc<[String]>,
    /// The states the backend created for this request (`TRITONBACKEND_StateNew`); they live as long
    /// as the request.
    #[allow(clippy::vec_box)]
    pub states: Mutex<Vec<Box<StateObj>>>,
}

/// A parameter's value, where `TRITONBACKEND_RequestParameter` points.
pub enum ParamSlot {
    String(CString),
    Int(i64),
    Bool(bool),
    Double(f64),
}

impl ParamSlot {
    /// Where `TRITONBACKEND_RequestParameter` and friends point for the value.
    pub fn as_ptr(&self) -> *const c_void {
        match self {
            ParamSlot::String(s) => s.as_ptr().cast(),
            ParamSlot::Int(i) => (i as *const i64).cast(),
            ParamSlot::Bool(b) => (b as *const bool).cast(),
            ParamSlot::Double(d) => (d as *const f64).cast(),
        }
    }

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
    /// The name as `TRITONBACKEND_InferenceResponseOutput` hands it out.
    pub c_name: CString,
    pub datatype: DataType,
    pub shape: Vec<i64>,
    /// `None` until `TRITONBACKEND_OutputBuffer` gave it one.
    pub buffer: Option<Vec<u8>>,
    /// What `TRITONBACKEND_OutputBufferAttributes` points at, once the buffer exists.
    pub attributes: BufferAttributesObj,
}

/// `TRITONSERVER_BufferAttributes`.
#[derive(Debug, Clone, Default)]
pub struct BufferAttributesObj {
    pub memory_type: u32,
    pub memory_type_id: i64,
    pub byte_size: usize,
    /// A CUDA IPC handle's address (never set by tritonrs: buffers it hands out are host memory).
    pub cuda_ipc_handle: usize,
}

impl BufferAttributesObj {
    pub fn host(byte_size: usize) -> Self {
        BufferAttributesObj { memory_type: MEMORY_CPU, memory_type_id: 0, byte_size, cuda_ipc_handle: 0 }
    }
}

/// `TRITONSERVER_Server`: what a backend may ask of the server (BLS, model control).
pub struct ServerObj {
    pub api: Option<Arc<dyn crate::model_api::ServerApi>>,
    /// Where in-process requests run (the server's runtime), once known.
    pub runtime: Mutex<Option<tokio::runtime::Handle>>,
}

impl ServerObj {
    /// A new server object, registered while it lives.
    pub fn new(api: Option<Arc<dyn crate::model_api::ServerApi>>) -> Arc<ServerObj> {
        let s = Arc::new(ServerObj { api, runtime: Mutex::new(tokio::runtime::Handle::try_current().ok()) });
        register(Arc::as_ptr(&s) as *const c_void, Kind::Server);
        s
    }

    /// Remembers the runtime of the calling thread, when it has one and none is known yet.
    pub fn learn_runtime(&self) {
        let mut rt = self.runtime.lock();
        if rt.is_none() {
            *rt = tokio::runtime::Handle::try_current().ok();
        }
    }
}

impl Drop for ServerObj {
    fn drop(&mut self) {
        unregister(self as *const ServerObj as *const c_void);
    }
}

/// `TRITONBACKEND_BackendAttribute`: what a backend says about itself while loading.
#[derive(Debug, Default)]
pub struct BackendAttributeObj {
    /// Preferred instance groups: (kind, count, device ids).
    pub preferred_groups: Vec<(u32, u64, Vec<u64>)>,
    pub parallel_instance_loading: bool,
}

/// `TRITONSERVER_Parameter`.
pub struct ParameterObj {
    pub name: String,
    pub value: ParameterValue,
}

pub enum ParameterValue {
    Plain(ParamValue),
    Bytes(Vec<u8>),
}

/// `TRITONSERVER_MetricFamily`: a handle into the server's custom metrics.
pub struct MetricFamilyObj {
    pub id: u64,
    pub kind: u32,
    pub registry: Arc<crate::model_api::custom_metrics::CustomMetrics>,
}

/// `TRITONSERVER_Metric`.
pub struct MetricObj {
    pub id: u64,
    pub kind: u32,
    pub registry: Arc<crate::model_api::custom_metrics::CustomMetrics>,
}

/// `TRITONSERVER_MetricArgs`.
#[derive(Default)]
pub struct MetricArgsObj {
    pub buckets: Option<Vec<f64>>,
}

/// `TRITONSERVER_ResponseAllocator*Fn_t`.
pub type AllocFn = unsafe extern "C" fn(
    *mut AllocatorObj,
    *const std::ffi::c_char,
    usize,
    u32,
    i64,
    *mut c_void,
    *mut *mut c_void,
    *mut *mut c_void,
    *mut u32,
    *mut i64,
) -> *mut ErrorObj;
pub type AllocReleaseFn =
    unsafe extern "C" fn(*mut AllocatorObj, *mut c_void, *mut c_void, usize, u32, i64) -> *mut ErrorObj;
pub type AllocStartFn = unsafe extern "C" fn(*mut AllocatorObj, *mut c_void) -> *mut ErrorObj;
pub type AllocQueryFn = unsafe extern "C" fn(
    *mut AllocatorObj,
    *mut c_void,
    *const std::ffi::c_char,
    *mut usize,
    *mut u32,
    *mut i64,
) -> *mut ErrorObj;
/// `TRITONSERVER_InferenceRequestReleaseFn_t`, `TRITONSERVER_InferenceResponseCompleteFn_t`.
pub type RequestReleaseFn = unsafe extern "C" fn(*mut InferRequestObj, u32, *mut c_void);
pub type ResponseCompleteFn = unsafe extern "C" fn(*mut InferResponseObj, u32, *mut c_void);

/// `TRITONSERVER_ResponseAllocator`.
pub struct AllocatorObj {
    pub alloc: AllocFn,
    pub release: Option<AllocReleaseFn>,
    pub start: Option<AllocStartFn>,
    pub query: Option<AllocQueryFn>,
}

/// One input of an in-process request: its data is copied in as the backend appends it.
pub struct PendingInput {
    pub name: String,
    pub datatype: DataType,
    pub shape: Vec<i64>,
    pub data: Vec<u8>,
}

/// Where the responses of an in-process request go. Pointers are kept as addresses: they belong to the
/// backend, which the API makes keep them valid until the request is released.
#[derive(Clone, Copy)]
pub struct ResponseRoute {
    pub allocator: usize,
    pub allocator_userp: usize,
    pub response_fn: ResponseCompleteFn,
    pub response_userp: usize,
}

/// `TRITONSERVER_InferenceRequest`: an in-process request a backend builds (BLS).
pub struct InferRequestObj {
    pub server: Arc<ServerObj>,
    pub model: String,
    /// `None`: the server picks (the API's -1).
    pub version: Option<i64>,
    pub id: String,
    pub flags: u32,
    pub correlation: Option<crate::model_api::SequenceId>,
    pub timeout_us: u64,
    pub priority: u64,
    pub inputs: Vec<PendingInput>,
    pub outputs: Vec<String>,
    pub parameters: Parameters,
    pub release: Option<(RequestReleaseFn, usize)>,
    pub route: Option<ResponseRoute>,
    /// `TRITONSERVER_InferenceRequestCancel` trips it: the request in flight is then dropped (a queued
    /// one leaves its queue, a running one sees `is_cancelled()`) and answered CANCELLED.
    pub cancel: crate::model_api::Signals,
}

/// One output of an in-process response, in a buffer the backend's allocator gave.
pub struct ResponseOutputObj {
    pub name: CString,
    pub datatype: u32,
    pub shape: Vec<i64>,
    pub base: usize,
    pub byte_size: usize,
    pub memory_type: u32,
    pub memory_type_id: i64,
    pub userp: usize,
}

/// `TRITONSERVER_InferenceResponse`.
pub struct InferResponseObj {
    pub error: Option<(u32, String)>,
    pub model: CString,
    pub version: i64,
    pub id: CString,
    pub outputs: Vec<ResponseOutputObj>,
    pub parameters: Vec<(CString, u32, ParamSlot)>,
    /// The allocator whose release function frees the output buffers.
    pub allocator: usize,
    pub release: Option<AllocReleaseFn>,
}

/// `TRITONBACKEND_State`: one implicit state tensor a backend writes for a sequence's next request.
pub struct StateObj {
    pub completion: Arc<Completion>,
    pub name: String,
    pub datatype: DataType,
    pub shape: Vec<i64>,
    pub buffer: Vec<u8>,
    pub attributes: BufferAttributesObj,
}

/// `TRITONBACKEND_ModelInstanceResponseStatistics`: accepted and checked; tritonrs times responses
/// itself.
#[derive(Default)]
pub struct ResponseStatisticsObj {
    pub instance: usize,
    pub factory: usize,
    pub response_start: u64,
    pub compute_output_start: u64,
    pub response_end: u64,
    pub error: usize,
}

/// A C string from Rust text; an interior NUL (never in names the server checked) ends it there.
pub fn cstring(s: &str) -> CString {
    CString::new(s.split('\0').next().unwrap_or_default()).unwrap_or_default()
}
