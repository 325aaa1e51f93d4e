//! The TRITONSERVER functions a backend uses to talk to the server it runs in: the current server
//! object and the helpers the in-process functions share, model control and readiness, parameters,
//! buffer attributes, traces and the response allocator. In-process inference (BLS) is in
//! `infer_requests.rs` and `infer_responses.rs`, custom metrics in `metrics.rs`; every request runs
//! through the server's normal inference path (`ServerApi`), so validation, schedulers, statistics and
//! decoupled streaming behave as for a client's request.
//!
//! Threads: the model-control functions block the calling thread (a backend thread, never a runtime
//! worker) until done.
//!
//! Contract for every `unsafe` block: as in `guard.rs` (object pointers only after `is_live`,
//! out-pointers and buffers valid for the call as the API requires); callbacks are called with the
//! pointers the backend registered them with, which the API makes it keep valid until the request is
//! released.
#![allow(unsafe_code)]
#![allow(non_snake_case)]

use super::abi::*;
use super::guard::{code_of, guarded, invalid, new_error, obj, obj_mut, put, take_box, text, Err};
use crate::error::{Error, Result};
use crate::model_api::types::ParamValue;
use crate::model_api::LoadOptions;
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

pub(super) fn server_api(s: &ServerObj) -> Result<Arc<dyn crate::model_api::ServerApi>, Err> {
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

pub(super) fn c_text(p: *const c_char) -> String {
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
