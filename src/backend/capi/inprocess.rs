//! The TRITONSERVER functions a backend uses to talk to the server it runs in: in-process inference
//! (BLS: requests, the response allocator, responses), model control and readiness, parameters,
//! custom metrics, buffer attributes and traces. Every request runs through the server's normal
//! inference path (`ServerApi`), so validation, schedulers, statistics and decoupled streaming behave
//! as for a client's request.
//!
//! Threads: `TRITONSERVER_ServerInferAsync` returns at once; the request runs on the server's runtime,
//! and the backend's callbacks (allocator, response, release) are called from a runtime worker, in
//! order: each response (its allocations first), then the request's release. The model-control
//! functions block the calling thread (a backend thread, never a runtime worker) until done.
//!
//! Contract for every `unsafe` block: as in `exports.rs` (object pointers only after `is_live`,
//! out-pointers and buffers valid for the call as the API requires); callbacks are called with the
//! pointers the backend registered them with, which the API makes it keep valid until the request is
//! released.
#![allow(unsafe_code)]
#![allow(non_snake_case)]

use super::abi::*;
use super::exports::{guarded, invalid, new_error, obj, obj_mut, put, take_box, take_error, text, Err};
use super::host::code_of;
use crate::error::{Error, Result};
use crate::model_api::custom_metrics::{MetricKind, MetricOp};
use crate::model_api::types::{InferRequest, ParamValue, RequestedOutput, StreamResponse, Tensor};
use crate::model_api::{LoadOptions, SequenceId};
use bytes::Bytes;
use futures_util::StreamExt;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_void, CStr};
use std::ptr::null_mut;
use std::sync::Arc;

/// The newest server object, for the API functions that name no server (custom metrics).
static CURRENT: parking_lot::Mutex<std::sync::Weak<ServerObj>> = parking_lot::Mutex::new(std::sync::Weak::new());

pub fn set_current(server: &Arc<ServerObj>) {
    *CURRENT.lock() = Arc::downgrade(server);
}

/// The newest server object, while it lives.
pub fn current() -> Option<Arc<ServerObj>> {
    CURRENT.lock().upgrade()
}

fn server_api(s: &ServerObj) -> Result<Arc<dyn crate::model_api::ServerApi>, Err> {
    s.api.clone().ok_or_else(|| new_error(code::UNAVAILABLE, "this server takes no in-process requests"))
}

/// Runs `work` on the server's runtime and waits for it on the calling (backend) thread.
fn block<T: Send + 'static>(
    s: &ServerObj,
    work: futures_util::future::BoxFuture<'static, Result<T>>,
) -> Result<T, Err> {
    let rt = s.runtime.lock().clone().ok_or_else(|| new_error(code::UNAVAILABLE, "the server is not running"))?;
    let (tx, rx) = std::sync::mpsc::channel();
    rt.spawn(async move {
        let _ = tx.send(work.await);
    });
    rx.recv()
        .unwrap_or_else(|_| Err(Error::unavailable("the server stopped before answering")))
        .map_err(|e| new_error(code_of(&e), &e.message))
}

fn c_text(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: a NUL-terminated string the backend passes for the call.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

// ---- server: model control and properties ----

#[no_mangle]
pub extern "C" fn TRITONSERVER_ServerModelIsReady(
    server: *mut ServerObj,
    model_name: *const c_char,
    model_version: i64,
    ready: *mut bool,
) -> Err {
    guarded("TRITONSERVER_ServerModelIsReady", || {
        let s = obj(server, Kind::Server, "server")?;
        let name = text(model_name, "model_name")?.to_string();
        let version = if model_version < 0 { String::new() } else { model_version.to_string() };
        let f = server_api(s)?.model_ready(name, version);
        // An unknown model is simply not ready.
        let r = block(s, Box::pin(async move { Ok(f.await.unwrap_or(false)) }))?;
        put(ready, r);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_ServerModelTransactionProperties(
    server: *mut ServerObj,
    model_name: *const c_char,
    model_version: i64,
    txn_flags: *mut u32,
    voidp: *mut *mut c_void,
) -> Err {
    guarded("TRITONSERVER_ServerModelTransactionProperties", || {
        let s = obj(server, Kind::Server, "server")?;
        let name = text(model_name, "model_name")?;
        let decoupled = server_api(s)?
            .is_decoupled(name, (model_version >= 0).then_some(model_version))
            .map_err(|e| new_error(code_of(&e), &e.message))?;
        put(txn_flags, if decoupled { TXN_DECOUPLED } else { TXN_ONE_TO_ONE });
        put(voidp, null_mut());
        Ok(())
    })
}

fn load(server: *mut ServerObj, model_name: *const c_char, opts: LoadOptions) -> Result<(), Err> {
    let s = obj(server, Kind::Server, "server")?;
    let name = text(model_name, "model_name")?.to_string();
    block(s, server_api(s)?.load_model(name, opts))
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_ServerLoadModel(server: *mut ServerObj, model_name: *const c_char) -> Err {
    guarded("TRITONSERVER_ServerLoadModel", || load(server, model_name, LoadOptions::default()))
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_ServerLoadModelWithParameters(
    server: *mut ServerObj,
    model_name: *const c_char,
    parameters: *const *const ParameterObj,
    parameter_count: u64,
) -> Err {
    guarded("TRITONSERVER_ServerLoadModelWithParameters", || {
        if parameters.is_null() && parameter_count > 0 {
            return Err(invalid("parameters is null"));
        }
        let mut opts = LoadOptions::default();
        for i in 0..parameter_count as usize {
            // SAFETY: the backend passes `parameter_count` parameter pointers.
            let p = obj(unsafe { *parameters.add(i) }, Kind::Parameter, "parameter")?;
            match (&p.value, p.name.as_str()) {
                (ParameterValue::Plain(ParamValue::String(json)), "config") => opts.config_json = Some(json.clone()),
                (ParameterValue::Bytes(b), n) if n.starts_with("file:") => {
                    opts.files.push((n["file:".len()..].to_string(), b.clone()))
                }
                (_, n) => {
                    return Err(invalid(&format!(
                        "load parameter '{n}' is not supported: give 'config' (a string) or 'file:<path>' (bytes)"
                    )))
                }
            }
        }
        if !opts.files.is_empty() && opts.config_json.is_none() {
            return Err(invalid("model files need a 'config' parameter"));
        }
        load(server, model_name, opts)
    })
}

fn unload(server: *mut ServerObj, model_name: *const c_char) -> Result<(), Err> {
    let s = obj(server, Kind::Server, "server")?;
    let name = text(model_name, "model_name")?.to_string();
    block(s, server_api(s)?.unload_model(name))
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_ServerUnloadModel(server: *mut ServerObj, model_name: *const c_char) -> Err {
    guarded("TRITONSERVER_ServerUnloadModel", || unload(server, model_name))
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_ServerUnloadModelAndDependents(
    server: *mut ServerObj,
    model_name: *const c_char,
) -> Err {
    guarded("TRITONSERVER_ServerUnloadModelAndDependents", || unload(server, model_name))
}

// ---- parameters ----

fn new_parameter(name: &str, value: ParameterValue) -> *mut ParameterObj {
    let p = Box::into_raw(Box::new(ParameterObj { name: name.to_string(), value }));
    register(p as *const c_void, Kind::Parameter);
    p
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_ParameterNew(name: *const c_char, kind: u32, value: *const c_void) -> *mut ParameterObj {
    let made = std::panic::catch_unwind(|| {
        if name.is_null() || value.is_null() {
            return null_mut();
        }
        let name = c_text(name);
        // SAFETY: `value` points at a value of the type `kind` names, as the API requires.
        let v = unsafe {
            match kind {
                PARAMETER_STRING => ParamValue::String(c_text(value.cast())),
                PARAMETER_INT => ParamValue::Int(*value.cast::<i64>()),
                PARAMETER_BOOL => ParamValue::Bool(*value.cast::<u8>() != 0),
                PARAMETER_DOUBLE => ParamValue::Double(*value.cast::<f64>()),
                _ => return null_mut(),
            }
        };
        new_parameter(&name, ParameterValue::Plain(v))
    });
    made.unwrap_or(null_mut())
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_ParameterBytesNew(
    name: *const c_char,
    byte_ptr: *const c_void,
    size: u64,
) -> *mut ParameterObj {
    let made = std::panic::catch_unwind(|| {
        if name.is_null() || (byte_ptr.is_null() && size > 0) {
            return null_mut();
        }
        let Ok(size) = usize::try_from(size) else { return null_mut() };
        let bytes = if size == 0 {
            Vec::new()
        } else {
            // SAFETY: the backend passes `size` readable bytes at `byte_ptr`.
            unsafe { std::slice::from_raw_parts(byte_ptr.cast::<u8>(), size) }.to_vec()
        };
        new_parameter(&c_text(name), ParameterValue::Bytes(bytes))
    });
    made.unwrap_or(null_mut())
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_ParameterDelete(parameter: *mut ParameterObj) {
    let _ = std::panic::catch_unwind(|| {
        // Nothing to answer: a bad pointer is left alone.
        let _ = take_box(parameter, Kind::Parameter, "parameter");
    });
}

// ---- custom metrics ----

fn metrics_registry() -> Result<Arc<crate::model_api::custom_metrics::CustomMetrics>, Err> {
    CURRENT
        .lock()
        .upgrade()
        .and_then(|s| s.api.as_ref().and_then(|a| a.custom_metrics()))
        .ok_or_else(|| new_error(code::UNAVAILABLE, "metrics are not available: the server is not running"))
}

fn failed(e: Error) -> Err {
    new_error(code_of(&e), &e.message)
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MetricFamilyNew(
    family: *mut *mut MetricFamilyObj,
    kind: u32,
    name: *const c_char,
    description: *const c_char,
) -> Err {
    guarded("TRITONSERVER_MetricFamilyNew", || {
        if family.is_null() {
            return Err(invalid("family is null"));
        }
        let k = match kind {
            METRIC_COUNTER => MetricKind::Counter,
            METRIC_GAUGE => MetricKind::Gauge,
            METRIC_HISTOGRAM => MetricKind::Histogram,
            _ => return Err(invalid(&format!("metric kind {kind} does not exist"))),
        };
        let name = text(name, "name")?;
        let description = if description.is_null() { String::new() } else { c_text(description) };
        let registry = metrics_registry()?;
        let id = registry.family(name, &description, k).map_err(failed)?;
        let p = Box::into_raw(Box::new(MetricFamilyObj { id, kind, registry }));
        register(p as *const c_void, Kind::MetricFamily);
        put(family, p);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MetricFamilyDelete(family: *mut MetricFamilyObj) -> Err {
    guarded("TRITONSERVER_MetricFamilyDelete", || {
        let Some(f) = take_box(family, Kind::MetricFamily, "family")? else { return Ok(()) };
        f.registry.release(f.id);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_GetMetricFamilyKind(family: *mut MetricFamilyObj, kind: *mut u32) -> Err {
    guarded("TRITONSERVER_GetMetricFamilyKind", || {
        put(kind, obj(family, Kind::MetricFamily, "family")?.kind);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MetricArgsNew(args: *mut *mut MetricArgsObj) -> Err {
    guarded("TRITONSERVER_MetricArgsNew", || {
        if args.is_null() {
            return Err(invalid("args is null"));
        }
        let p = Box::into_raw(Box::<MetricArgsObj>::default());
        register(p as *const c_void, Kind::MetricArgs);
        put(args, p);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MetricArgsSetHistogram(
    args: *mut MetricArgsObj,
    buckets: *const f64,
    buckets_count: u64,
) -> Err {
    guarded("TRITONSERVER_MetricArgsSetHistogram", || {
        let a = obj_mut(args, Kind::MetricArgs, "args")?;
        if buckets.is_null() && buckets_count > 0 {
            return Err(invalid("buckets is null"));
        }
        if buckets_count > 1 << 16 {
            return Err(invalid(&format!("{buckets_count} histogram buckets are too many")));
        }
        a.buckets = Some(if buckets_count == 0 {
            Vec::new()
        } else {
            // SAFETY: the backend passes `buckets_count` readable doubles.
            unsafe { std::slice::from_raw_parts(buckets, buckets_count as usize) }.to_vec()
        });
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MetricArgsDelete(args: *mut MetricArgsObj) -> Err {
    guarded("TRITONSERVER_MetricArgsDelete", || {
        drop(take_box(args, Kind::MetricArgs, "args")?);
        Ok(())
    })
}

fn new_metric(
    metric: *mut *mut MetricObj,
    family: *mut MetricFamilyObj,
    labels: *const *const ParameterObj,
    label_count: u64,
    buckets: Option<Vec<f64>>,
) -> Result<(), Err> {
    let f = obj(family, Kind::MetricFamily, "family")?;
    if metric.is_null() || (labels.is_null() && label_count > 0) {
        return Err(invalid("metric and labels must not be null"));
    }
    let mut map = BTreeMap::new();
    for i in 0..label_count as usize {
        // SAFETY: the backend passes `label_count` parameter pointers.
        let p = obj(unsafe { *labels.add(i) }, Kind::Parameter, "label")?;
        match &p.value {
            ParameterValue::Plain(ParamValue::String(v)) => {
                map.insert(p.name.clone(), v.clone());
            }
            _ => return Err(invalid(&format!("label '{}' must be a string parameter", p.name))),
        }
    }
    let id = f.registry.metric(f.id, map, buckets).map_err(failed)?;
    let p = Box::into_raw(Box::new(MetricObj { id, kind: f.kind, registry: f.registry.clone() }));
    register(p as *const c_void, Kind::Metric);
    put(metric, p);
    Ok(())
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MetricNew(
    metric: *mut *mut MetricObj,
    family: *mut MetricFamilyObj,
    labels: *const *const ParameterObj,
    label_count: u64,
) -> Err {
    guarded("TRITONSERVER_MetricNew", || new_metric(metric, family, labels, label_count, None))
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MetricNewWithArgs(
    metric: *mut *mut MetricObj,
    family: *mut MetricFamilyObj,
    labels: *const *const ParameterObj,
    label_count: u64,
    args: *const MetricArgsObj,
) -> Err {
    guarded("TRITONSERVER_MetricNewWithArgs", || {
        let buckets = if args.is_null() { None } else { obj(args, Kind::MetricArgs, "args")?.buckets.clone() };
        new_metric(metric, family, labels, label_count, buckets)
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MetricDelete(metric: *mut MetricObj) -> Err {
    guarded("TRITONSERVER_MetricDelete", || {
        let Some(m) = take_box(metric, Kind::Metric, "metric")? else { return Ok(()) };
        m.registry.release(m.id);
        Ok(())
    })
}

/// Applies `op` when the metric's kind allows it (UNSUPPORTED otherwise, as Triton answers).
fn metric_op(metric: *mut MetricObj, allowed: &[u32], op: MetricOp) -> Result<(), Err> {
    let m = obj(metric, Kind::Metric, "metric")?;
    if !allowed.contains(&m.kind) {
        return Err(new_error(code::UNSUPPORTED, &format!("{op:?} is not supported on this kind of metric")));
    }
    m.registry.update(m.id, op).map_err(failed)
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MetricValue(metric: *mut MetricObj, value: *mut f64) -> Err {
    guarded("TRITONSERVER_MetricValue", || {
        let m = obj(metric, Kind::Metric, "metric")?;
        if m.kind == METRIC_HISTOGRAM {
            return Err(new_error(code::UNSUPPORTED, "a histogram has no single value"));
        }
        put(value, m.registry.value(m.id).map_err(failed)?);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MetricIncrement(metric: *mut MetricObj, value: f64) -> Err {
    guarded("TRITONSERVER_MetricIncrement", || {
        metric_op(metric, &[METRIC_COUNTER, METRIC_GAUGE], MetricOp::Increment(value))
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MetricSet(metric: *mut MetricObj, value: f64) -> Err {
    guarded("TRITONSERVER_MetricSet", || metric_op(metric, &[METRIC_GAUGE], MetricOp::Set(value)))
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MetricObserve(metric: *mut MetricObj, value: f64) -> Err {
    guarded("TRITONSERVER_MetricObserve", || metric_op(metric, &[METRIC_HISTOGRAM], MetricOp::Observe(value)))
}

// ---- buffer attributes ----

#[no_mangle]
pub extern "C" fn TRITONSERVER_BufferAttributesNew(attributes: *mut *mut BufferAttributesObj) -> Err {
    guarded("TRITONSERVER_BufferAttributesNew", || {
        if attributes.is_null() {
            return Err(invalid("buffer_attributes is null"));
        }
        let p = Box::into_raw(Box::<BufferAttributesObj>::default());
        OWNED.lock().insert(p as usize);
        register(p as *const c_void, Kind::BufferAttributes);
        put(attributes, p);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_BufferAttributesDelete(attributes: *mut BufferAttributesObj) -> Err {
    guarded("TRITONSERVER_BufferAttributesDelete", || {
        if !attributes.is_null() {
            obj(attributes, Kind::BufferAttributes, "buffer_attributes")?;
            if !owned_attributes(attributes) {
                return Err(invalid("these buffer attributes belong to the server, not to the backend"));
            }
            OWNED.lock().remove(&(attributes as usize));
        }
        drop(take_box(attributes, Kind::BufferAttributes, "buffer_attributes")?);
        Ok(())
    })
}

/// Buffer attributes the backend created (and may delete), as opposed to those of inputs and outputs.
static OWNED: parking_lot::Mutex<std::collections::BTreeSet<usize>> =
    parking_lot::Mutex::new(std::collections::BTreeSet::new());

fn owned_attributes(p: *mut BufferAttributesObj) -> bool {
    OWNED.lock().contains(&(p as usize))
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_BufferAttributesSetMemoryTypeId(attributes: *mut BufferAttributesObj, id: i64) -> Err {
    guarded("TRITONSERVER_BufferAttributesSetMemoryTypeId", || {
        obj_mut(attributes, Kind::BufferAttributes, "buffer_attributes")?.memory_type_id = id;
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_BufferAttributesSetMemoryType(attributes: *mut BufferAttributesObj, t: u32) -> Err {
    guarded("TRITONSERVER_BufferAttributesSetMemoryType", || {
        if t > MEMORY_GPU {
            return Err(invalid(&format!("memory type {t} does not exist")));
        }
        obj_mut(attributes, Kind::BufferAttributes, "buffer_attributes")?.memory_type = t;
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_BufferAttributesSetCudaIpcHandle(
    attributes: *mut BufferAttributesObj,
    handle: *mut c_void,
) -> Err {
    guarded("TRITONSERVER_BufferAttributesSetCudaIpcHandle", || {
        obj_mut(attributes, Kind::BufferAttributes, "buffer_attributes")?.cuda_ipc_handle = handle as usize;
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_BufferAttributesSetByteSize(attributes: *mut BufferAttributesObj, size: usize) -> Err {
    guarded("TRITONSERVER_BufferAttributesSetByteSize", || {
        obj_mut(attributes, Kind::BufferAttributes, "buffer_attributes")?.byte_size = size;
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_BufferAttributesMemoryTypeId(attributes: *mut BufferAttributesObj, id: *mut i64) -> Err {
    guarded("TRITONSERVER_BufferAttributesMemoryTypeId", || {
        put(id, obj(attributes, Kind::BufferAttributes, "buffer_attributes")?.memory_type_id);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_BufferAttributesMemoryType(attributes: *mut BufferAttributesObj, t: *mut u32) -> Err {
    guarded("TRITONSERVER_BufferAttributesMemoryType", || {
        put(t, obj(attributes, Kind::BufferAttributes, "buffer_attributes")?.memory_type);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_BufferAttributesCudaIpcHandle(
    attributes: *mut BufferAttributesObj,
    handle: *mut *mut c_void,
) -> Err {
    guarded("TRITONSERVER_BufferAttributesCudaIpcHandle", || {
        put(handle, obj(attributes, Kind::BufferAttributes, "buffer_attributes")?.cuda_ipc_handle as *mut c_void);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_BufferAttributesByteSize(attributes: *mut BufferAttributesObj, size: *mut usize) -> Err {
    guarded("TRITONSERVER_BufferAttributesByteSize", || {
        put(size, obj(attributes, Kind::BufferAttributes, "buffer_attributes")?.byte_size);
        Ok(())
    })
}

// ---- traces: tritonrs hands backends no trace objects (TRITONBACKEND_RequestTrace gives null) ----

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceTraceContext(trace: *mut c_void, context: *mut *const c_char) -> Err {
    guarded("TRITONSERVER_InferenceTraceContext", || {
        put(context, std::ptr::null());
        Err(invalid(&format!("{trace:?} is not a trace tritonrs handed out (it hands backends none)")))
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceTraceSpawnChildTrace(trace: *mut c_void, child: *mut *mut c_void) -> Err {
    guarded("TRITONSERVER_InferenceTraceSpawnChildTrace", || {
        put(child, null_mut());
        Err(invalid(&format!("{trace:?} is not a trace tritonrs handed out (it hands backends none)")))
    })
}

// ---- the response allocator ----

#[no_mangle]
pub extern "C" fn TRITONSERVER_ResponseAllocatorNew(
    allocator: *mut *mut AllocatorObj,
    alloc_fn: Option<AllocFn>,
    release_fn: Option<AllocReleaseFn>,
    start_fn: Option<AllocStartFn>,
) -> Err {
    guarded("TRITONSERVER_ResponseAllocatorNew", || {
        let alloc = alloc_fn.ok_or_else(|| invalid("alloc_fn is null"))?;
        if allocator.is_null() {
            return Err(invalid("allocator is null"));
        }
        let p = Box::into_raw(Box::new(AllocatorObj { alloc, release: release_fn, start: start_fn, query: None }));
        register(p as *const c_void, Kind::Allocator);
        put(allocator, p);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_ResponseAllocatorSetQueryFunction(
    allocator: *mut AllocatorObj,
    query_fn: Option<AllocQueryFn>,
) -> Err {
    guarded("TRITONSERVER_ResponseAllocatorSetQueryFunction", || {
        obj_mut(allocator, Kind::Allocator, "allocator")?.query = query_fn;
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_ResponseAllocatorDelete(allocator: *mut AllocatorObj) -> Err {
    guarded("TRITONSERVER_ResponseAllocatorDelete", || {
        drop(take_box(allocator, Kind::Allocator, "allocator")?);
        Ok(())
    })
}

// ---- in-process requests ----

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceRequestNew(
    request: *mut *mut InferRequestObj,
    server: *mut ServerObj,
    model_name: *const c_char,
    model_version: i64,
) -> Err {
    guarded("TRITONSERVER_InferenceRequestNew", || {
        obj(server, Kind::Server, "server")?;
        if request.is_null() {
            return Err(invalid("inference_request is null"));
        }
        let model = text(model_name, "model_name")?.to_string();
        // SAFETY: a live server object (checked above): an `Arc` the backend host keeps, so its strong
        // count can be raised for the request.
        let server = unsafe {
            Arc::increment_strong_count(server as *const ServerObj);
            Arc::from_raw(server as *const ServerObj)
        };
        let p = Box::into_raw(Box::new(InferRequestObj {
            server,
            model,
            version: (model_version >= 0).then_some(model_version),
            id: String::new(),
            flags: 0,
            correlation: None,
            timeout_us: 0,
            priority: 0,
            inputs: Vec::new(),
            outputs: Vec::new(),
            parameters: Default::default(),
            release: None,
            route: None,
        }));
        register(p as *const c_void, Kind::InferRequest);
        put(request, p);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceRequestDelete(request: *mut InferRequestObj) -> Err {
    guarded("TRITONSERVER_InferenceRequestDelete", || {
        drop(take_box(request, Kind::InferRequest, "inference_request")?);
        Ok(())
    })
}

/// Changes a request the backend owns.
fn with_request(
    request: *mut InferRequestObj,
    f: impl FnOnce(&mut InferRequestObj) -> Result<(), Err>,
) -> Result<(), Err> {
    f(obj_mut(request, Kind::InferRequest, "inference_request")?)
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceRequestSetId(request: *mut InferRequestObj, id: *const c_char) -> Err {
    guarded("TRITONSERVER_InferenceRequestSetId", || {
        let id = text(id, "id")?.to_string();
        with_request(request, |r| {
            r.id = id;
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceRequestSetFlags(request: *mut InferRequestObj, flags: u32) -> Err {
    guarded("TRITONSERVER_InferenceRequestSetFlags", || {
        with_request(request, |r| {
            r.flags = flags;
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceRequestSetCorrelationId(request: *mut InferRequestObj, id: u64) -> Err {
    guarded("TRITONSERVER_InferenceRequestSetCorrelationId", || {
        with_request(request, |r| {
            r.correlation = (id != 0).then_some(SequenceId::U64(id));
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceRequestSetCorrelationIdString(
    request: *mut InferRequestObj,
    id: *const c_char,
) -> Err {
    guarded("TRITONSERVER_InferenceRequestSetCorrelationIdString", || {
        let id = text(id, "correlation_id")?.to_string();
        with_request(request, |r| {
            r.correlation = (!id.is_empty()).then_some(SequenceId::Str(id));
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceRequestSetTimeoutMicroseconds(request: *mut InferRequestObj, us: u64) -> Err {
    guarded("TRITONSERVER_InferenceRequestSetTimeoutMicroseconds", || {
        with_request(request, |r| {
            r.timeout_us = us;
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceRequestSetPriorityUInt64(request: *mut InferRequestObj, priority: u64) -> Err {
    guarded("TRITONSERVER_InferenceRequestSetPriorityUInt64", || {
        with_request(request, |r| {
            r.priority = priority;
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceRequestSetPriority(request: *mut InferRequestObj, priority: u32) -> Err {
    TRITONSERVER_InferenceRequestSetPriorityUInt64(request, u64::from(priority))
}

fn set_request_parameter(request: *mut InferRequestObj, key: *const c_char, v: ParamValue) -> Result<(), Err> {
    let key = text(key, "key")?.to_string();
    with_request(request, |r| {
        r.parameters.insert(key, v);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceRequestSetBoolParameter(
    request: *mut InferRequestObj,
    key: *const c_char,
    value: bool,
) -> Err {
    guarded("TRITONSERVER_InferenceRequestSetBoolParameter", || {
        set_request_parameter(request, key, ParamValue::Bool(value))
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceRequestSetIntParameter(
    request: *mut InferRequestObj,
    key: *const c_char,
    value: i64,
) -> Err {
    guarded("TRITONSERVER_InferenceRequestSetIntParameter", || {
        set_request_parameter(request, key, ParamValue::Int(value))
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceRequestSetDoubleParameter(
    request: *mut InferRequestObj,
    key: *const c_char,
    value: f64,
) -> Err {
    guarded("TRITONSERVER_InferenceRequestSetDoubleParameter", || {
        set_request_parameter(request, key, ParamValue::Double(value))
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceRequestSetStringParameter(
    request: *mut InferRequestObj,
    key: *const c_char,
    value: *const c_char,
) -> Err {
    guarded("TRITONSERVER_InferenceRequestSetStringParameter", || {
        let v = text(value, "value")?.to_string();
        set_request_parameter(request, key, ParamValue::String(v))
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceRequestAddInput(
    request: *mut InferRequestObj,
    name: *const c_char,
    datatype: u32,
    shape: *const i64,
    dim_count: u64,
) -> Err {
    guarded("TRITONSERVER_InferenceRequestAddInput", || {
        let name = text(name, "name")?.to_string();
        let dt = datatype_from_c(datatype)
            .ok_or_else(|| invalid(&format!("input '{name}' has no valid datatype ({datatype})")))?;
        if (shape.is_null() && dim_count > 0) || dim_count > 64 {
            return Err(invalid(&format!("input '{name}' has a bad shape")));
        }
        let dims = if dim_count == 0 {
            Vec::new()
        } else {
            // SAFETY: the backend passes `dim_count` readable dims at `shape`.
            unsafe { std::slice::from_raw_parts(shape, dim_count as usize) }.to_vec()
        };
        with_request(request, |r| {
            if r.inputs.iter().any(|i| i.name == name) {
                return Err(new_error(code::ALREADY_EXISTS, &format!("input '{name}' already exists in the request")));
            }
            r.inputs.push(PendingInput { name, datatype: dt, shape: dims, data: Vec::new() });
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceRequestAddRawInput(request: *mut InferRequestObj, name: *const c_char) -> Err {
    guarded("TRITONSERVER_InferenceRequestAddRawInput", || {
        let name = text(name, "name")?;
        obj(request, Kind::InferRequest, "inference_request")?;
        Err(new_error(
            code::UNSUPPORTED,
            &format!("raw input '{name}': give the input's datatype and shape (TRITONSERVER_InferenceRequestAddInput)"),
        ))
    })
}

fn append(
    request: *mut InferRequestObj,
    name: *const c_char,
    base: *const c_void,
    size: usize,
    memory_type: u32,
) -> Result<(), Err> {
    let name = text(name, "name")?.to_string();
    if memory_type == MEMORY_GPU {
        return Err(new_error(
            code::UNSUPPORTED,
            &format!("input '{name}': tritonrs takes in-process request data in host memory only"),
        ));
    }
    if base.is_null() && size > 0 {
        return Err(invalid("base is null"));
    }
    with_request(request, |r| {
        let i = r
            .inputs
            .iter_mut()
            .find(|i| i.name == name)
            .ok_or_else(|| invalid(&format!("input '{name}' does not exist in the request")))?;
        if size > 0 {
            // SAFETY: the backend passes `size` readable bytes at `base`.
            i.data.extend_from_slice(unsafe { std::slice::from_raw_parts(base.cast::<u8>(), size) });
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceRequestAppendInputData(
    request: *mut InferRequestObj,
    name: *const c_char,
    base: *const c_void,
    byte_size: usize,
    memory_type: u32,
    _memory_type_id: i64,
) -> Err {
    guarded("TRITONSERVER_InferenceRequestAppendInputData", || append(request, name, base, byte_size, memory_type))
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceRequestAppendInputDataWithBufferAttributes(
    request: *mut InferRequestObj,
    name: *const c_char,
    base: *const c_void,
    attributes: *mut BufferAttributesObj,
) -> Err {
    guarded("TRITONSERVER_InferenceRequestAppendInputDataWithBufferAttributes", || {
        let a = obj(attributes, Kind::BufferAttributes, "buffer_attributes")?.clone();
        append(request, name, base, a.byte_size, a.memory_type)
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceRequestRemoveAllInputData(
    request: *mut InferRequestObj,
    name: *const c_char,
) -> Err {
    guarded("TRITONSERVER_InferenceRequestRemoveAllInputData", || {
        let name = text(name, "name")?.to_string();
        with_request(request, |r| {
            let i = r
                .inputs
                .iter_mut()
                .find(|i| i.name == name)
                .ok_or_else(|| invalid(&format!("input '{name}' does not exist in the request")))?;
            i.data.clear();
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceRequestRemoveAllInputs(request: *mut InferRequestObj) -> Err {
    guarded("TRITONSERVER_InferenceRequestRemoveAllInputs", || {
        with_request(request, |r| {
            r.inputs.clear();
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceRequestAddRequestedOutput(
    request: *mut InferRequestObj,
    name: *const c_char,
) -> Err {
    guarded("TRITONSERVER_InferenceRequestAddRequestedOutput", || {
        let name = text(name, "name")?.to_string();
        with_request(request, |r| {
            if !r.outputs.contains(&name) {
                r.outputs.push(name);
            }
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceRequestRemoveAllRequestedOutputs(request: *mut InferRequestObj) -> Err {
    guarded("TRITONSERVER_InferenceRequestRemoveAllRequestedOutputs", || {
        with_request(request, |r| {
            r.outputs.clear();
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceRequestSetReleaseCallback(
    request: *mut InferRequestObj,
    release_fn: Option<RequestReleaseFn>,
    userp: *mut c_void,
) -> Err {
    guarded("TRITONSERVER_InferenceRequestSetReleaseCallback", || {
        let f = release_fn.ok_or_else(|| invalid("request_release_fn is null"))?;
        with_request(request, |r| {
            r.release = Some((f, userp as usize));
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceRequestSetResponseCallback(
    request: *mut InferRequestObj,
    allocator: *mut AllocatorObj,
    allocator_userp: *mut c_void,
    response_fn: Option<ResponseCompleteFn>,
    response_userp: *mut c_void,
) -> Err {
    guarded("TRITONSERVER_InferenceRequestSetResponseCallback", || {
        obj(allocator, Kind::Allocator, "response_allocator")?;
        let response_fn = response_fn.ok_or_else(|| invalid("response_fn is null"))?;
        with_request(request, |r| {
            r.route = Some(ResponseRoute {
                allocator: allocator as usize,
                allocator_userp: allocator_userp as usize,
                response_fn,
                response_userp: response_userp as usize,
            });
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceRequestCancel(request: *mut InferRequestObj) -> Err {
    guarded("TRITONSERVER_InferenceRequestCancel", || {
        obj(request, Kind::InferRequest, "inference_request")?;
        Err(new_error(code::UNSUPPORTED, "in-process requests cannot be cancelled yet; they end with their model"))
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceRequestIsCancelled(request: *mut InferRequestObj, cancelled: *mut bool) -> Err {
    guarded("TRITONSERVER_InferenceRequestIsCancelled", || {
        obj(request, Kind::InferRequest, "inference_request")?;
        put(cancelled, false);
        Ok(())
    })
}

/// The server's request for what the backend built (inputs copied once, here).
fn to_infer_request(r: &InferRequestObj) -> InferRequest {
    let mut parameters = r.parameters.clone();
    crate::model_api::set_control_parameters(&mut parameters, r.correlation.clone(), r.flags, r.timeout_us);
    if r.priority > 0 {
        parameters.insert("priority".into(), ParamValue::Uint(r.priority));
    }
    InferRequest {
        model_name: r.model.clone(),
        model_version: r.version,
        id: r.id.clone(),
        inputs: r
            .inputs
            .iter()
            .map(|i| Tensor::new(i.name.clone(), i.datatype, i.shape.clone(), Bytes::copy_from_slice(&i.data)))
            .collect(),
        outputs: r.outputs.iter().map(|n| RequestedOutput { name: n.clone(), ..Default::default() }).collect(),
        parameters,
        callers: Arc::from(Vec::new()),
    }
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_ServerInferAsync(
    server: *mut ServerObj,
    request: *mut InferRequestObj,
    trace: *mut c_void,
) -> Err {
    guarded("TRITONSERVER_ServerInferAsync", || {
        let s = obj(server, Kind::Server, "server")?;
        let r = obj(request, Kind::InferRequest, "inference_request")?;
        if !std::ptr::eq(Arc::as_ptr(&r.server), s) {
            return Err(invalid("the request was made for another server"));
        }
        if !trace.is_null() {
            return Err(invalid("trace is not a trace tritonrs handed out (it hands backends none)"));
        }
        let route = r.route.ok_or_else(|| {
            invalid("the request has no response callback (TRITONSERVER_InferenceRequestSetResponseCallback)")
        })?;
        let release = r.release.ok_or_else(|| {
            invalid("the request has no release callback (TRITONSERVER_InferenceRequestSetReleaseCallback)")
        })?;
        let api = server_api(s)?;
        let rt = s.runtime.lock().clone().ok_or_else(|| new_error(code::UNAVAILABLE, "the server is not running"))?;
        let req = to_infer_request(r);
        let request = request as usize;
        rt.spawn(async move {
            run(api, req, route).await;
            // SAFETY: the release callback the backend registered, with the request and userp it gave;
            // the request stays the backend's until this call hands it back.
            unsafe { (release.0)(request as *mut InferRequestObj, REQUEST_RELEASE_ALL, release.1 as *mut c_void) };
        });
        Ok(())
    })
}

/// Runs the request and hands each response to the backend; the last one carries the final flag.
async fn run(api: Arc<dyn crate::model_api::ServerApi>, req: InferRequest, route: ResponseRoute) {
    let (model, version) = (req.model_name.clone(), req.model_version.unwrap_or(-1));
    let mut responses = match api.infer_stream(req).await {
        Ok(s) => s,
        Err(e) => return deliver_error(&route, &model, version, &e),
    };
    while let Some(item) = responses.next().await {
        match item {
            Ok(r) if r.empty => return complete(&route, null_mut(), RESPONSE_COMPLETE_FINAL),
            Ok(r) => {
                let is_final = r.is_final;
                let response = response_object(&route, r);
                complete(&route, response, if is_final { RESPONSE_COMPLETE_FINAL } else { 0 });
                if is_final {
                    return;
                }
            }
            Err(e) => return deliver_error(&route, &model, version, &e),
        }
    }
    complete(&route, null_mut(), RESPONSE_COMPLETE_FINAL);
}

fn complete(route: &ResponseRoute, response: *mut InferResponseObj, flags: u32) {
    // SAFETY: the response callback the backend registered, with its userp; the response (or null for
    // a final flag alone) is registered and the backend's to delete.
    unsafe { (route.response_fn)(response, flags, route.response_userp as *mut c_void) };
}

fn deliver_error(route: &ResponseRoute, model: &str, version: i64, e: &Error) {
    let r = error_response(route, model, version, "", (code_of(e), e.message.clone()));
    complete(route, r, RESPONSE_COMPLETE_FINAL);
}

fn error_response(
    route: &ResponseRoute,
    model: &str,
    version: i64,
    id: &str,
    error: (u32, String),
) -> *mut InferResponseObj {
    register_response(InferResponseObj {
        error: Some(error),
        model: cstring(model),
        version,
        id: cstring(id),
        outputs: Vec::new(),
        parameters: Vec::new(),
        allocator: route.allocator,
        release: None,
    })
}

fn register_response(r: InferResponseObj) -> *mut InferResponseObj {
    let p = Box::into_raw(Box::new(r));
    register(p as *const c_void, Kind::InferResponse);
    p
}

/// A response for the backend: each output copied into a buffer its allocator gives.
fn response_object(route: &ResponseRoute, r: StreamResponse) -> *mut InferResponseObj {
    let resp = r.response;
    if let Some(e) = r.error {
        return error_response(route, &resp.model_name, resp.model_version, &resp.id, (code_of(&e), e.message));
    }
    let allocator = route.allocator as *mut AllocatorObj;
    let Ok(alloc) = obj(allocator, Kind::Allocator, "allocator") else {
        let why = "the request's response allocator was deleted before its responses arrived".to_string();
        return error_response(route, &resp.model_name, resp.model_version, &resp.id, (code::INTERNAL, why));
    };
    let mut out = InferResponseObj {
        error: None,
        model: cstring(&resp.model_name),
        version: resp.model_version,
        id: cstring(&resp.id),
        outputs: Vec::with_capacity(resp.outputs.len()),
        parameters: resp
            .parameters
            .iter()
            .map(|(k, v)| {
                let (t, slot) = ParamSlot::from_value(v);
                (cstring(k), t, slot)
            })
            .collect(),
        allocator: route.allocator,
        release: alloc.release,
    };
    let userp = route.allocator_userp as *mut c_void;
    if let Some(start) = alloc.start {
        // SAFETY: the backend's start function, with its allocator and userp.
        if let Some((c, m)) = take_error(unsafe { start(allocator, userp) }) {
            out.error = Some((c, format!("the response allocator's start function failed: {m}")));
            return register_response(out);
        }
    }
    for t in &resp.outputs {
        match allocate(alloc, allocator, userp, t) {
            Ok(o) => out.outputs.push(o),
            Err(e) => {
                out.error = Some(e);
                break;
            }
        }
    }
    register_response(out)
}

fn allocate(
    alloc: &AllocatorObj,
    allocator: *mut AllocatorObj,
    userp: *mut c_void,
    t: &Tensor,
) -> Result<ResponseOutputObj, (u32, String)> {
    let data = t.data.to_host().map_err(|e| (code_of(&e), e.message))?;
    let name = cstring(&t.name);
    let (mut buffer, mut buffer_userp, mut mt, mut mt_id) =
        (null_mut::<c_void>(), null_mut::<c_void>(), MEMORY_CPU, 0i64);
    // SAFETY: the backend's allocation function with its allocator and userp; the out-pointers are
    // locals.
    let e = unsafe {
        (alloc.alloc)(
            allocator,
            name.as_ptr(),
            data.len(),
            MEMORY_CPU,
            0,
            userp,
            &mut buffer,
            &mut buffer_userp,
            &mut mt,
            &mut mt_id,
        )
    };
    if let Some((c, m)) = take_error(e) {
        return Err((c, format!("allocating output '{}' failed: {m}", t.name)));
    }
    let mut o = ResponseOutputObj {
        name,
        datatype: datatype_to_c(t.datatype),
        shape: t.shape.clone(),
        base: buffer as usize,
        byte_size: data.len(),
        memory_type: mt,
        memory_type_id: mt_id,
        userp: buffer_userp as usize,
    };
    if !data.is_empty() {
        if buffer.is_null() || mt == MEMORY_GPU {
            // Nothing to copy into (tritonrs copies to host memory only): give back what it gave.
            if buffer.is_null() {
                o.byte_size = 0;
            }
            release_output(alloc.release, allocator, &o);
            return Err((
                code::UNSUPPORTED,
                format!(
                    "output '{}': the allocator gave no host buffer (tritonrs returns outputs in host memory)",
                    t.name
                ),
            ));
        }
        // SAFETY: the allocator gave `buffer` for `data.len()` bytes of host memory.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buffer.cast::<u8>(), data.len()) };
    }
    Ok(o)
}

fn release_output(release: Option<AllocReleaseFn>, allocator: *mut AllocatorObj, o: &ResponseOutputObj) {
    if let Some(f) = release {
        if o.base != 0 || o.userp != 0 {
            // SAFETY: the backend's release function, given back what its allocation function gave.
            let e = unsafe {
                f(
                    allocator,
                    o.base as *mut c_void,
                    o.userp as *mut c_void,
                    o.byte_size,
                    o.memory_type,
                    o.memory_type_id,
                )
            };
            if let Some((_, m)) = take_error(e) {
                tracing::warn!("Releasing an in-process response's output buffer failed: {m}");
            }
        }
    }
}

// ---- in-process responses ----

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceResponseDelete(response: *mut InferResponseObj) -> Err {
    guarded("TRITONSERVER_InferenceResponseDelete", || {
        let Some(r) = take_box(response, Kind::InferResponse, "inference_response")? else { return Ok(()) };
        for o in &r.outputs {
            release_output(r.release, r.allocator as *mut AllocatorObj, o);
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceResponseError(response: *mut InferResponseObj) -> Err {
    match obj(response, Kind::InferResponse, "inference_response") {
        Ok(r) => r.error.as_ref().map_or(null_mut(), |(c, m)| new_error(*c, m)),
        Err(e) => e,
    }
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceResponseModel(
    response: *mut InferResponseObj,
    model_name: *mut *const c_char,
    model_version: *mut i64,
) -> Err {
    guarded("TRITONSERVER_InferenceResponseModel", || {
        let r = obj(response, Kind::InferResponse, "inference_response")?;
        put(model_name, r.model.as_ptr());
        put(model_version, r.version);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceResponseId(response: *mut InferResponseObj, id: *mut *const c_char) -> Err {
    guarded("TRITONSERVER_InferenceResponseId", || {
        put(id, obj(response, Kind::InferResponse, "inference_response")?.id.as_ptr());
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceResponseParameterCount(
    response: *mut InferResponseObj,
    count: *mut u32,
) -> Err {
    guarded("TRITONSERVER_InferenceResponseParameterCount", || {
        put(count, obj(response, Kind::InferResponse, "inference_response")?.parameters.len() as u32);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceResponseParameter(
    response: *mut InferResponseObj,
    index: u32,
    name: *mut *const c_char,
    kind: *mut u32,
    value: *mut *const c_void,
) -> Err {
    guarded("TRITONSERVER_InferenceResponseParameter", || {
        let r = obj(response, Kind::InferResponse, "inference_response")?;
        let (k, t, v) = r
            .parameters
            .get(index as usize)
            .ok_or_else(|| invalid(&format!("parameter index {index} is out of range ({})", r.parameters.len())))?;
        put(name, k.as_ptr());
        put(kind, *t);
        put(value, v.as_ptr());
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceResponseOutputCount(response: *mut InferResponseObj, count: *mut u32) -> Err {
    guarded("TRITONSERVER_InferenceResponseOutputCount", || {
        put(count, obj(response, Kind::InferResponse, "inference_response")?.outputs.len() as u32);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceResponseOutput(
    response: *mut InferResponseObj,
    index: u32,
    name: *mut *const c_char,
    datatype: *mut u32,
    shape: *mut *const i64,
    dim_count: *mut u64,
    base: *mut *const c_void,
    byte_size: *mut usize,
    memory_type: *mut u32,
    memory_type_id: *mut i64,
    userp: *mut *mut c_void,
) -> Err {
    guarded("TRITONSERVER_InferenceResponseOutput", || {
        let r = obj(response, Kind::InferResponse, "inference_response")?;
        let o = r
            .outputs
            .get(index as usize)
            .ok_or_else(|| invalid(&format!("output index {index} is out of range ({})", r.outputs.len())))?;
        put(name, o.name.as_ptr());
        put(datatype, o.datatype);
        put(shape, o.shape.as_ptr());
        put(dim_count, o.shape.len() as u64);
        put(base, o.base as *const c_void);
        put(byte_size, o.byte_size);
        put(memory_type, o.memory_type);
        put(memory_type_id, o.memory_type_id);
        put(userp, o.userp as *mut c_void);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceResponseOutputClassificationLabel(
    response: *mut InferResponseObj,
    _index: u32,
    _class_index: usize,
    label: *mut *const c_char,
) -> Err {
    guarded("TRITONSERVER_InferenceResponseOutputClassificationLabel", || {
        obj(response, Kind::InferResponse, "inference_response")?;
        put(label, std::ptr::null());
        Ok(())
    })
}
