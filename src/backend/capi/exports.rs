//! The TRITONSERVER_* and TRITONBACKEND_* functions this executable exports for backend libraries
//! (`exports.list` names them for the linker). Each one:
//! - catches panics (a bug here must not unwind into C);
//! - checks every object pointer against the live registry (`abi::LIVE`) before using it: a null,
//!   stale or foreign pointer is TRITONSERVER_ERROR_INVALID_ARG, never a dereference;
//! - writes out-parameters only when they are not null.
//!
//! Contract for every `unsafe` block below: object pointers are dereferenced only after `is_live`
//! found them registered with the right kind (the host registers an object when it hands it out and
//! unregisters it before freeing it); out-pointers and C strings come from the backend, which the
//! API makes responsible for them being valid for the call (as Triton does).
#![allow(unsafe_code)]
#![allow(non_snake_case)]

use super::abi::*;
use crate::error::Error;
use crate::model_api::types::{ParamValue, Tensor};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr::null_mut;
use std::sync::atomic::Ordering;

pub(super) type Err = *mut ErrorObj;

/// The largest output buffer a backend may ask for (4 GiB).
const MAX_OUTPUT_BYTES: usize = 4 << 30;

/// A new `TRITONSERVER_Error`, registered.
pub fn new_error(code: u32, message: &str) -> Err {
    let p = Box::into_raw(Box::new(ErrorObj { code, message: cstring(message) }));
    register(p as *const c_void, Kind::Error);
    p
}

/// Takes back an error the backend returned (it owns none after returning it): its code and text.
pub fn take_error(e: Err) -> Option<(u32, String)> {
    if !is_live(e as *const c_void, Kind::Error) {
        return (!e.is_null()).then(|| (code::INTERNAL, "the backend returned an invalid error object".into()));
    }
    unregister(e as *const c_void);
    // SAFETY: a live Error object, created by `new_error` with Box::into_raw and now unregistered, so
    // it is freed once.
    let b = unsafe { Box::from_raw(e) };
    Some((b.code, b.message.to_string_lossy().into_owned()))
}

pub(super) fn invalid(what: &str) -> Err {
    new_error(code::INVALID_ARG, what)
}

/// Runs `f`, turning a panic into an INTERNAL error.
pub(super) fn guarded(name: &str, f: impl FnOnce() -> Result<(), Err>) -> Err {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => null_mut(),
        Ok(Err(e)) => e,
        Err(_) => new_error(code::INTERNAL, &format!("{name} failed inside tritonrs (a bug)")),
    }
}

/// The object behind `p`, when it is a live one of `kind`.
pub(super) fn obj<'a, T>(p: *const T, kind: Kind, what: &str) -> Result<&'a T, Err> {
    if is_live(p as *const c_void, kind) {
        // SAFETY: registered as a live object of this kind (see the module's contract).
        Ok(unsafe { &*p })
    } else {
        Err(invalid(&format!("{what} is not a valid {kind:?} object")))
    }
}

/// The object behind `p` for changing, when it is a live one of `kind`: for objects the backend owns
/// (responses and their outputs), which the API forbids it to use from two threads at once.
pub(super) fn obj_mut<'a, T>(p: *mut T, kind: Kind, what: &str) -> Result<&'a mut T, Err> {
    if is_live(p as *const c_void, kind) {
        // SAFETY: registered as a live object of this kind, owned by the backend that passes it and
        // not used concurrently (the API's rule for responses and outputs).
        Ok(unsafe { &mut *p })
    } else {
        Err(invalid(&format!("{what} is not a valid {kind:?} object")))
    }
}

/// Takes back an object the backend deletes: null is nothing to delete (as in Triton); a live object
/// of `kind` is unregistered and handed back to be dropped; anything else is INVALID_ARG.
pub(super) fn take_box<T>(p: *mut T, kind: Kind, what: &str) -> Result<Option<Box<T>>, Err> {
    if p.is_null() {
        return Ok(None);
    }
    obj(p as *const T, kind, what)?;
    unregister(p as *const c_void);
    // SAFETY: every object of the kinds deleted through here was made with Box::into_raw and
    // registered when handed out; it was live and is unregistered now, so it is freed once.
    Ok(Some(unsafe { Box::from_raw(p) }))
}

/// Writes `v` through `out` when it is not null.
pub(super) fn put<T>(out: *mut T, v: T) {
    if !out.is_null() {
        // SAFETY: the backend passes a writable out-pointer or null.
        unsafe { out.write(v) };
    }
}

/// A C string argument; null or non-UTF-8 is an error.
pub(super) fn text<'a>(p: *const c_char, what: &str) -> Result<&'a str, Err> {
    if p.is_null() {
        return Err(invalid(&format!("{what} is null")));
    }
    // SAFETY: a NUL-terminated string the backend passes for the call.
    unsafe { CStr::from_ptr(p) }.to_str().map_err(|_| invalid(&format!("{what} is not UTF-8")))
}

// ---- TRITONSERVER_Error ----

#[no_mangle]
pub extern "C" fn TRITONSERVER_ErrorNew(code: u32, msg: *const c_char) -> Err {
    let message = if msg.is_null() {
        String::new()
    } else {
        // SAFETY: a NUL-terminated string the backend passes for the call.
        unsafe { CStr::from_ptr(msg) }.to_string_lossy().into_owned()
    };
    new_error(code, &message)
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_ErrorDelete(error: Err) {
    let _ = take_error(error);
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_ErrorCode(error: Err) -> u32 {
    obj(error, Kind::Error, "error").map(|e| e.code).unwrap_or(code::INVALID_ARG)
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_ErrorCodeString(error: Err) -> *const c_char {
    let c = obj(error, Kind::Error, "error").map(|e| e.code).unwrap_or(code::UNKNOWN);
    match c {
        code::INTERNAL => c"Internal".as_ptr(),
        code::NOT_FOUND => c"Not found".as_ptr(),
        code::INVALID_ARG => c"Invalid argument".as_ptr(),
        code::UNAVAILABLE => c"Unavailable".as_ptr(),
        code::UNSUPPORTED => c"Unsupported".as_ptr(),
        code::ALREADY_EXISTS => c"Already exists".as_ptr(),
        code::CANCELLED => c"Cancelled".as_ptr(),
        _ => c"Unknown".as_ptr(),
    }
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_ErrorMessage(error: Err) -> *const c_char {
    if is_live(error as *const c_void, Kind::Error) {
        // SAFETY: a live Error object (see the module's contract).
        unsafe { (*error).message.as_ptr() }
    } else {
        c"not a TRITONSERVER_Error".as_ptr()
    }
}

// ---- TRITONSERVER_Message ----

/// A new `TRITONSERVER_Message` holding `json`, registered.
pub fn new_message(json: &str) -> *mut MessageObj {
    let p = Box::into_raw(Box::new(MessageObj { json: cstring(json) }));
    register(p as *const c_void, Kind::Message);
    p
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MessageNewFromSerializedJson(
    message: *mut *mut MessageObj,
    base: *const c_char,
    byte_size: usize,
) -> Err {
    guarded("TRITONSERVER_MessageNewFromSerializedJson", || {
        if message.is_null() || (base.is_null() && byte_size > 0) {
            return Err(invalid("message and base must not be null"));
        }
        let bytes = if byte_size == 0 {
            &[][..]
        } else {
            // SAFETY: the backend passes `byte_size` readable bytes at `base`.
            unsafe { std::slice::from_raw_parts(base.cast::<u8>(), byte_size) }
        };
        let json = std::str::from_utf8(bytes).map_err(|_| invalid("the message is not UTF-8"))?;
        serde_json::from_str::<serde_json::Value>(json)
            .map_err(|e| invalid(&format!("the message is not JSON: {e}")))?;
        put(message, new_message(json));
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MessageDelete(message: *mut MessageObj) -> Err {
    guarded("TRITONSERVER_MessageDelete", || {
        drop(take_box(message, Kind::Message, "message")?);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MessageSerializeToJson(
    message: *mut MessageObj,
    base: *mut *const c_char,
    byte_size: *mut usize,
) -> Err {
    guarded("TRITONSERVER_MessageSerializeToJson", || {
        let m = obj(message, Kind::Message, "message")?;
        put(base, m.json.as_ptr());
        put(byte_size, m.json.as_bytes().len());
        Ok(())
    })
}

// ---- logging and type names ----

#[no_mangle]
pub extern "C" fn TRITONSERVER_LogIsEnabled(level: u32) -> bool {
    match level {
        LOG_INFO => tracing::enabled!(tracing::Level::INFO),
        LOG_WARN => tracing::enabled!(tracing::Level::WARN),
        LOG_ERROR => tracing::enabled!(tracing::Level::ERROR),
        _ => tracing::enabled!(tracing::Level::DEBUG),
    }
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_LogMessage(level: u32, filename: *const c_char, line: c_int, msg: *const c_char) -> Err {
    guarded("TRITONSERVER_LogMessage", || {
        let msg = text(msg, "msg")?;
        let file = if filename.is_null() { "?" } else { text(filename, "filename").unwrap_or("?") };
        let file = file.rsplit('/').next().unwrap_or(file);
        match level {
            LOG_ERROR => tracing::error!(target: "backend", "{file}:{line}] {msg}"),
            LOG_WARN => tracing::warn!(target: "backend", "{file}:{line}] {msg}"),
            LOG_INFO => tracing::info!(target: "backend", "{file}:{line}] {msg}"),
            _ => tracing::debug!(target: "backend", "{file}:{line}] {msg}"),
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_DataTypeString(datatype: u32) -> *const c_char {
    match datatype_from_c(datatype) {
        Some(d) => {
            // `as_str` is static text; the C strings are spelled out once here.
            const NAMES: [&CStr; 14] = [
                c"BOOL", c"UINT8", c"UINT16", c"UINT32", c"UINT64", c"INT8", c"INT16", c"INT32", c"INT64", c"FP16",
                c"FP32", c"FP64", c"BYTES", c"BF16",
            ];
            NAMES.get(datatype_to_c(d) as usize - 1).map_or(c"<invalid>".as_ptr(), |n| n.as_ptr())
        }
        None => c"<invalid>".as_ptr(),
    }
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_DataTypeByteSize(datatype: u32) -> u32 {
    datatype_from_c(datatype).and_then(|d| d.byte_size()).map_or(0, |s| s as u32)
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MemoryTypeString(memtype: u32) -> *const c_char {
    match memtype {
        MEMORY_CPU => c"CPU".as_ptr(),
        MEMORY_CPU_PINNED => c"CPU_PINNED".as_ptr(),
        MEMORY_GPU => c"GPU".as_ptr(),
        _ => c"<invalid>".as_ptr(),
    }
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_ParameterTypeString(paramtype: u32) -> *const c_char {
    match paramtype {
        PARAMETER_STRING => c"STRING".as_ptr(),
        PARAMETER_INT => c"INT".as_ptr(),
        PARAMETER_BOOL => c"BOOL".as_ptr(),
        PARAMETER_DOUBLE => c"DOUBLE".as_ptr(),
        PARAMETER_BYTES => c"BYTES".as_ptr(),
        _ => c"<invalid>".as_ptr(),
    }
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InstanceGroupKindString(kind: u32) -> *const c_char {
    match kind {
        0 => c"AUTO".as_ptr(),
        INSTANCEGROUPKIND_CPU => c"CPU".as_ptr(),
        INSTANCEGROUPKIND_GPU => c"GPU".as_ptr(),
        3 => c"MODEL".as_ptr(),
        _ => c"<invalid>".as_ptr(),
    }
}

// ---- TRITONBACKEND: version, backend, model, instance ----

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ApiVersion(major: *mut u32, minor: *mut u32) -> Err {
    guarded("TRITONBACKEND_ApiVersion", || {
        put(major, API_MAJOR);
        put(minor, API_MINOR);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_BackendName(backend: *mut BackendObj, name: *mut *const c_char) -> Err {
    guarded("TRITONBACKEND_BackendName", || {
        put(name, obj(backend, Kind::Backend, "backend")?.name.as_ptr());
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_BackendConfig(backend: *mut BackendObj, config: *mut *mut MessageObj) -> Err {
    guarded("TRITONBACKEND_BackendConfig", || {
        let b = obj(backend, Kind::Backend, "backend")?;
        if config.is_null() {
            return Err(invalid("backend_config is null"));
        }
        put(config, new_message(&b.config_json));
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_BackendExecutionPolicy(backend: *mut BackendObj, policy: *mut u32) -> Err {
    guarded("TRITONBACKEND_BackendExecutionPolicy", || {
        obj(backend, Kind::Backend, "backend")?;
        put(policy, EXECUTION_BLOCKING);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_BackendSetExecutionPolicy(backend: *mut BackendObj, policy: u32) -> Err {
    guarded("TRITONBACKEND_BackendSetExecutionPolicy", || {
        obj(backend, Kind::Backend, "backend")?;
        // Both policies run one Execute at a time per instance on the instance's own thread here,
        // which is what TRITONBACKEND_EXECUTION_DEVICE_BLOCKING asks for and satisfies BLOCKING.
        if policy > 1 {
            return Err(invalid(&format!("execution policy {policy} does not exist")));
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_BackendArtifacts(
    backend: *mut BackendObj,
    artifact_type: *mut u32,
    location: *mut *const c_char,
) -> Err {
    guarded("TRITONBACKEND_BackendArtifacts", || {
        let b = obj(backend, Kind::Backend, "backend")?;
        put(artifact_type, ARTIFACT_FILESYSTEM);
        put(location, b.location.as_ptr());
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_BackendState(backend: *mut BackendObj, state: *mut *mut c_void) -> Err {
    guarded("TRITONBACKEND_BackendState", || {
        put(state, obj(backend, Kind::Backend, "backend")?.state.load(Ordering::Acquire));
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_BackendSetState(backend: *mut BackendObj, state: *mut c_void) -> Err {
    guarded("TRITONBACKEND_BackendSetState", || {
        obj(backend, Kind::Backend, "backend")?.state.store(state, Ordering::Release);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelName(model: *mut ModelObj, name: *mut *const c_char) -> Err {
    guarded("TRITONBACKEND_ModelName", || {
        put(name, obj(model, Kind::Model, "model")?.name.as_ptr());
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelVersion(model: *mut ModelObj, version: *mut u64) -> Err {
    guarded("TRITONBACKEND_ModelVersion", || {
        put(version, obj(model, Kind::Model, "model")?.version);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelRepository(
    model: *mut ModelObj,
    artifact_type: *mut u32,
    location: *mut *const c_char,
) -> Err {
    guarded("TRITONBACKEND_ModelRepository", || {
        let m = obj(model, Kind::Model, "model")?;
        put(artifact_type, ARTIFACT_FILESYSTEM);
        put(location, m.repository.as_ptr());
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelConfig(
    model: *mut ModelObj,
    config_version: u32,
    config: *mut *mut MessageObj,
) -> Err {
    guarded("TRITONBACKEND_ModelConfig", || {
        let m = obj(model, Kind::Model, "model")?;
        if config_version != 1 {
            return Err(new_error(
                code::UNSUPPORTED,
                &format!("model configuration version {config_version} is not supported (only 1)"),
            ));
        }
        if config.is_null() {
            return Err(invalid("model_config is null"));
        }
        put(config, new_message(&m.config_json.lock()));
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelAutoCompleteConfig(model: *mut ModelObj, auto_complete: *mut bool) -> Err {
    guarded("TRITONBACKEND_ModelAutoCompleteConfig", || {
        put(auto_complete, obj(model, Kind::Model, "model")?.auto_complete);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelSetConfig(
    model: *mut ModelObj,
    config_version: u32,
    config: *mut MessageObj,
) -> Err {
    guarded("TRITONBACKEND_ModelSetConfig", || {
        let m = obj(model, Kind::Model, "model")?;
        let c = obj(config, Kind::Message, "model_config")?;
        if config_version != 1 {
            return Err(new_error(
                code::UNSUPPORTED,
                &format!("model configuration version {config_version} is not supported (only 1)"),
            ));
        }
        let json = c.json.to_string_lossy().into_owned();
        crate::model_config::pbtxt::config_from_json(&json)
            .map_err(|e| invalid(&format!("the new model configuration is not valid: {e}")))?;
        *m.config_json.lock() = json;
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelBackend(model: *mut ModelObj, backend: *mut *mut BackendObj) -> Err {
    guarded("TRITONBACKEND_ModelBackend", || {
        put(backend, obj(model, Kind::Model, "model")?.backend as *mut BackendObj);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelState(model: *mut ModelObj, state: *mut *mut c_void) -> Err {
    guarded("TRITONBACKEND_ModelState", || {
        put(state, obj(model, Kind::Model, "model")?.state.load(Ordering::Acquire));
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelSetState(model: *mut ModelObj, state: *mut c_void) -> Err {
    guarded("TRITONBACKEND_ModelSetState", || {
        obj(model, Kind::Model, "model")?.state.store(state, Ordering::Release);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceName(instance: *mut InstanceObj, name: *mut *const c_char) -> Err {
    guarded("TRITONBACKEND_ModelInstanceName", || {
        put(name, obj(instance, Kind::Instance, "instance")?.name.as_ptr());
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceKind(instance: *mut InstanceObj, kind: *mut u32) -> Err {
    guarded("TRITONBACKEND_ModelInstanceKind", || {
        put(kind, obj(instance, Kind::Instance, "instance")?.kind);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceDeviceId(instance: *mut InstanceObj, device_id: *mut i32) -> Err {
    guarded("TRITONBACKEND_ModelInstanceDeviceId", || {
        put(device_id, obj(instance, Kind::Instance, "instance")?.device_id);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceIsPassive(instance: *mut InstanceObj, is_passive: *mut bool) -> Err {
    guarded("TRITONBACKEND_ModelInstanceIsPassive", || {
        obj(instance, Kind::Instance, "instance")?;
        put(is_passive, false);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceProfileCount(instance: *mut InstanceObj, count: *mut u32) -> Err {
    guarded("TRITONBACKEND_ModelInstanceProfileCount", || {
        obj(instance, Kind::Instance, "instance")?;
        put(count, 0);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceSecondaryDeviceCount(instance: *mut InstanceObj, count: *mut u32) -> Err {
    guarded("TRITONBACKEND_ModelInstanceSecondaryDeviceCount", || {
        obj(instance, Kind::Instance, "instance")?;
        put(count, 0);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceModel(instance: *mut InstanceObj, model: *mut *mut ModelObj) -> Err {
    guarded("TRITONBACKEND_ModelInstanceModel", || {
        put(model, obj(instance, Kind::Instance, "instance")?.model as *mut ModelObj);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceState(instance: *mut InstanceObj, state: *mut *mut c_void) -> Err {
    guarded("TRITONBACKEND_ModelInstanceState", || {
        put(state, obj(instance, Kind::Instance, "instance")?.state.load(Ordering::Acquire));
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceSetState(instance: *mut InstanceObj, state: *mut c_void) -> Err {
    guarded("TRITONBACKEND_ModelInstanceSetState", || {
        obj(instance, Kind::Instance, "instance")?.state.store(state, Ordering::Release);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceReportStatistics(
    instance: *mut InstanceObj,
    request: *mut RequestObj,
    _success: bool,
    exec_start_ns: u64,
    compute_start_ns: u64,
    compute_end_ns: u64,
    exec_end_ns: u64,
) -> Err {
    guarded("TRITONBACKEND_ModelInstanceReportStatistics", || {
        obj(instance, Kind::Instance, "instance")?;
        let r = obj(request, Kind::Request, "request")?;
        if !(exec_start_ns <= compute_start_ns && compute_start_ns <= compute_end_ns && compute_end_ns <= exec_end_ns) {
            return Err(invalid(
                "the reported timestamps are not in order (exec start <= compute start <= compute end <= exec end)",
            ));
        }
        // The request's compute_input / compute_infer / compute_output in the statistics extension and
        // the nv_inference_compute_* metrics come from the backend's split; queue and request times
        // are the server's own.
        r.completion.progress.lock().reported = Some(crate::model_api::ExecTimings {
            compute_input_ns: compute_start_ns - exec_start_ns,
            compute_infer_ns: compute_end_ns - compute_start_ns,
            compute_output_ns: exec_end_ns - compute_end_ns,
            started: None,
        });
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceReportBatchStatistics(
    instance: *mut InstanceObj,
    _batch_size: u64,
    _exec_start_ns: u64,
    _compute_start_ns: u64,
    _compute_end_ns: u64,
    _exec_end_ns: u64,
) -> Err {
    guarded("TRITONBACKEND_ModelInstanceReportBatchStatistics", || {
        obj(instance, Kind::Instance, "instance")?;
        Ok(())
    })
}

// ---- requests and inputs ----

#[no_mangle]
pub extern "C" fn TRITONBACKEND_RequestId(request: *mut RequestObj, id: *mut *const c_char) -> Err {
    guarded("TRITONBACKEND_RequestId", || {
        put(id, obj(request, Kind::Request, "request")?.id.as_ptr());
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_RequestCorrelationId(request: *mut RequestObj, id: *mut u64) -> Err {
    guarded("TRITONBACKEND_RequestCorrelationId", || {
        let r = obj(request, Kind::Request, "request")?;
        if !r.correlation_str.as_bytes().is_empty() {
            return Err(invalid("the correlation id is a string: use TRITONBACKEND_RequestCorrelationIdString"));
        }
        put(id, r.correlation_id);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_RequestCorrelationIdString(request: *mut RequestObj, id: *mut *const c_char) -> Err {
    guarded("TRITONBACKEND_RequestCorrelationIdString", || {
        let r = obj(request, Kind::Request, "request")?;
        if r.correlation_str.as_bytes().is_empty() && r.correlation_id != 0 {
            return Err(invalid("the correlation id is a number: use TRITONBACKEND_RequestCorrelationId"));
        }
        put(id, r.correlation_str.as_ptr());
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_RequestFlags(request: *mut RequestObj, flags: *mut u32) -> Err {
    guarded("TRITONBACKEND_RequestFlags", || {
        put(flags, obj(request, Kind::Request, "request")?.flags);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_RequestIsCancelled(request: *mut RequestObj, is_cancelled: *mut bool) -> Err {
    guarded("TRITONBACKEND_RequestIsCancelled", || {
        let r = obj(request, Kind::Request, "request")?;
        put(is_cancelled, r.completion.cancelled());
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_InferenceRequestTimeoutMicroseconds(
    request: *mut RequestObj,
    timeout: *mut u64,
) -> Err {
    guarded("TRITONBACKEND_InferenceRequestTimeoutMicroseconds", || {
        obj(request, Kind::Request, "request")?;
        // The server applies a request's timeout while it waits in the queue; none is left for the
        // backend to apply.
        put(timeout, 0);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_RequestParameterCount(request: *mut RequestObj, count: *mut u32) -> Err {
    guarded("TRITONBACKEND_RequestParameterCount", || {
        put(count, obj(request, Kind::Request, "request")?.parameters.len() as u32);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_RequestParameter(
    request: *mut RequestObj,
    index: u32,
    key: *mut *const c_char,
    kind: *mut u32,
    value: *mut *const c_void,
) -> Err {
    guarded("TRITONBACKEND_RequestParameter", || {
        let r = obj(request, Kind::Request, "request")?;
        let (k, t, v) = r
            .parameters
            .get(index as usize)
            .ok_or_else(|| invalid(&format!("parameter index {index} is out of range ({})", r.parameters.len())))?;
        put(key, k.as_ptr());
        put(kind, *t);
        put(value, v.as_ptr());
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_RequestInputCount(request: *mut RequestObj, count: *mut u32) -> Err {
    guarded("TRITONBACKEND_RequestInputCount", || {
        put(count, obj(request, Kind::Request, "request")?.inputs.len() as u32);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_RequestInputName(
    request: *mut RequestObj,
    index: u32,
    name: *mut *const c_char,
) -> Err {
    guarded("TRITONBACKEND_RequestInputName", || {
        let r = obj(request, Kind::Request, "request")?;
        let i = r.inputs.get(index as usize).ok_or_else(|| invalid(&format!("input index {index} is out of range")))?;
        put(name, i.name.as_ptr());
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_RequestInput(
    request: *mut RequestObj,
    name: *const c_char,
    input: *mut *mut InputObj,
) -> Err {
    guarded("TRITONBACKEND_RequestInput", || {
        let r = obj(request, Kind::Request, "request")?;
        let name = text(name, "name")?;
        let i = r
            .inputs
            .iter()
            .find(|i| i.name.as_bytes() == name.as_bytes())
            .ok_or_else(|| invalid(&format!("unknown request input name {name}")))?;
        put(input, i as *const InputObj as *mut InputObj);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_RequestInputByIndex(
    request: *mut RequestObj,
    index: u32,
    input: *mut *mut InputObj,
) -> Err {
    guarded("TRITONBACKEND_RequestInputByIndex", || {
        let r = obj(request, Kind::Request, "request")?;
        let i = r.inputs.get(index as usize).ok_or_else(|| invalid(&format!("input index {index} is out of range")))?;
        put(input, i as *const InputObj as *mut InputObj);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_RequestOutputCount(request: *mut RequestObj, count: *mut u32) -> Err {
    guarded("TRITONBACKEND_RequestOutputCount", || {
        put(count, obj(request, Kind::Request, "request")?.outputs.len() as u32);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_RequestOutputName(
    request: *mut RequestObj,
    index: u32,
    name: *mut *const c_char,
) -> Err {
    guarded("TRITONBACKEND_RequestOutputName", || {
        let r = obj(request, Kind::Request, "request")?;
        let o =
            r.outputs.get(index as usize).ok_or_else(|| invalid(&format!("output index {index} is out of range")))?;
        put(name, o.as_ptr());
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_RequestRelease(request: *mut RequestObj, release_flags: u32) -> Err {
    guarded("TRITONBACKEND_RequestRelease", || {
        obj(request, Kind::Request, "request")?;
        if release_flags & REQUEST_RELEASE_ALL == 0 {
            return Err(new_error(
                code::UNSUPPORTED,
                "only TRITONSERVER_REQUEST_RELEASE_ALL is supported (a request cannot be rescheduled)",
            ));
        }
        unregister(request as *const c_void);
        // SAFETY: the request was live; the pointer is the backend's reference from Arc::into_raw
        // (see `host::submit`), given back once: it is unregistered first, so a second release fails.
        let r = unsafe { std::sync::Arc::from_raw(request as *const RequestObj) };
        r.completion.release();
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_InputProperties(
    input: *mut InputObj,
    name: *mut *const c_char,
    datatype: *mut u32,
    shape: *mut *const i64,
    dims_count: *mut u32,
    byte_size: *mut u64,
    buffer_count: *mut u32,
) -> Err {
    guarded("TRITONBACKEND_InputProperties", || {
        let i = obj(input, Kind::Input, "input")?;
        put(name, i.name.as_ptr());
        put(datatype, i.datatype);
        put(shape, i.shape.as_ptr());
        put(dims_count, i.shape.len() as u32);
        put(byte_size, i.data.len() as u64);
        put(buffer_count, u32::from(!i.data.is_empty()));
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_InputPropertiesForHostPolicy(
    input: *mut InputObj,
    _host_policy_name: *const c_char,
    name: *mut *const c_char,
    datatype: *mut u32,
    shape: *mut *const i64,
    dims_count: *mut u32,
    byte_size: *mut u64,
    buffer_count: *mut u32,
) -> Err {
    TRITONBACKEND_InputProperties(input, name, datatype, shape, dims_count, byte_size, buffer_count)
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_InputBuffer(
    input: *mut InputObj,
    index: u32,
    buffer: *mut *const c_void,
    buffer_byte_size: *mut u64,
    memory_type: *mut u32,
    memory_type_id: *mut i64,
) -> Err {
    guarded("TRITONBACKEND_InputBuffer", || {
        let i = obj(input, Kind::Input, "input")?;
        if index != 0 || i.data.is_empty() {
            return Err(invalid(&format!("input buffer index {index} is out of range")));
        }
        put(buffer, i.data.as_ptr().cast());
        put(buffer_byte_size, i.data.len() as u64);
        put(memory_type, MEMORY_CPU);
        put(memory_type_id, 0);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_InputBufferForHostPolicy(
    input: *mut InputObj,
    _host_policy_name: *const c_char,
    index: u32,
    buffer: *mut *const c_void,
    buffer_byte_size: *mut u64,
    memory_type: *mut u32,
    memory_type_id: *mut i64,
) -> Err {
    TRITONBACKEND_InputBuffer(input, index, buffer, buffer_byte_size, memory_type, memory_type_id)
}

// ---- responses and outputs ----

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ResponseNew(response: *mut *mut ResponseObj, request: *mut RequestObj) -> Err {
    guarded("TRITONBACKEND_ResponseNew", || {
        let r = obj(request, Kind::Request, "request")?;
        if response.is_null() {
            return Err(invalid("response is null"));
        }
        let p = Box::into_raw(Box::new(ResponseObj {
            completion: r.completion.clone(),
            outputs: Vec::new(),
            parameters: Default::default(),
        }));
        register(p as *const c_void, Kind::Response);
        put(response, p);
        Ok(())
    })
}

/// Takes back a response: unregisters it and its outputs.
fn take_response(response: *mut ResponseObj) -> Result<Box<ResponseObj>, Err> {
    obj(response, Kind::Response, "response")?;
    unregister(response as *const c_void);
    // SAFETY: live, made by TRITONBACKEND_ResponseNew with Box::into_raw, unregistered: taken once.
    let r = unsafe { Box::from_raw(response) };
    for o in &r.outputs {
        unregister(&**o as *const OutputObj as *const c_void);
        unregister(&o.attributes as *const BufferAttributesObj as *const c_void);
    }
    Ok(r)
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ResponseDelete(response: *mut ResponseObj) -> Err {
    guarded("TRITONBACKEND_ResponseDelete", || take_response(response).map(drop))
}

fn set_parameter(response: *mut ResponseObj, name: *const c_char, value: ParamValue) -> Result<(), Err> {
    let r = obj_mut(response, Kind::Response, "response")?;
    let name = text(name, "name")?.to_string();
    r.parameters.insert(name, value);
    Ok(())
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ResponseSetStringParameter(
    response: *mut ResponseObj,
    name: *const c_char,
    value: *const c_char,
) -> Err {
    guarded("TRITONBACKEND_ResponseSetStringParameter", || {
        let v = text(value, "value")?.to_string();
        set_parameter(response, name, ParamValue::String(v))
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ResponseSetIntParameter(
    response: *mut ResponseObj,
    name: *const c_char,
    value: i64,
) -> Err {
    guarded("TRITONBACKEND_ResponseSetIntParameter", || set_parameter(response, name, ParamValue::Int(value)))
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ResponseSetBoolParameter(
    response: *mut ResponseObj,
    name: *const c_char,
    value: bool,
) -> Err {
    guarded("TRITONBACKEND_ResponseSetBoolParameter", || set_parameter(response, name, ParamValue::Bool(value)))
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ResponseSetDoubleParameter(
    response: *mut ResponseObj,
    name: *const c_char,
    value: f64,
) -> Err {
    guarded("TRITONBACKEND_ResponseSetDoubleParameter", || set_parameter(response, name, ParamValue::Double(value)))
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ResponseOutput(
    response: *mut ResponseObj,
    output: *mut *mut OutputObj,
    name: *const c_char,
    datatype: u32,
    shape: *const i64,
    dims_count: u32,
) -> Err {
    guarded("TRITONBACKEND_ResponseOutput", || {
        let r = obj_mut(response, Kind::Response, "response")?;
        let name = text(name, "name")?.to_string();
        let dt = datatype_from_c(datatype)
            .ok_or_else(|| invalid(&format!("output '{name}' has no valid datatype ({datatype})")))?;
        if shape.is_null() && dims_count > 0 {
            return Err(invalid("shape is null"));
        }
        if dims_count > 64 {
            return Err(invalid(&format!("output '{name}' has {dims_count} dimensions")));
        }
        let dims = if dims_count == 0 {
            Vec::new()
        } else {
            // SAFETY: the backend passes `dims_count` readable dims at `shape`.
            unsafe { std::slice::from_raw_parts(shape, dims_count as usize) }.to_vec()
        };
        if r.outputs.iter().any(|o| o.name == name) {
            return Err(new_error(code::ALREADY_EXISTS, &format!("output '{name}' already exists in the response")));
        }
        let o = Box::new(OutputObj {
            c_name: cstring(&name),
            name,
            datatype: dt,
            shape: dims,
            buffer: None,
            attributes: BufferAttributesObj::host(0),
        });
        let p = &*o as *const OutputObj as *mut OutputObj;
        r.outputs.push(o);
        register(p as *const c_void, Kind::Output);
        put(output, p);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_OutputBuffer(
    output: *mut OutputObj,
    buffer: *mut *mut c_void,
    buffer_byte_size: u64,
    memory_type: *mut u32,
    memory_type_id: *mut i64,
) -> Err {
    guarded("TRITONBACKEND_OutputBuffer", || {
        let o = obj_mut(output, Kind::Output, "output")?;
        let size = usize::try_from(buffer_byte_size).map_err(|_| invalid("the buffer is too large"))?;
        if size > MAX_OUTPUT_BYTES {
            return Err(new_error(code::UNAVAILABLE, &format!("an output buffer of {size} bytes is too large")));
        }
        // A second buffer would free the first under a backend that may still write into it (Triton
        // refuses it too).
        if o.buffer.is_some() {
            return Err(new_error(
                code::ALREADY_EXISTS,
                &format!("output '{}' has a buffer already (TRITONBACKEND_OutputBuffer was called twice)", o.name),
            ));
        }
        let b = o.buffer.insert(vec![0u8; size]);
        o.attributes = BufferAttributesObj::host(size);
        // Host memory, whatever type was asked for: the API lets the server choose.
        put(buffer, b.as_mut_ptr().cast());
        put(memory_type, MEMORY_CPU);
        put(memory_type_id, 0);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ResponseSend(response: *mut ResponseObj, send_flags: u32, error: Err) -> Err {
    guarded("TRITONBACKEND_ResponseSend", || {
        let r = take_response(response)?;
        let result = if error.is_null() {
            let backend = &r.completion.origin.backend;
            let mut outputs = Vec::with_capacity(r.outputs.len());
            let mut bad = None;
            for o in r.outputs {
                match check_output(&o) {
                    Ok(()) => outputs.push(Tensor::new(
                        o.name,
                        o.datatype,
                        o.shape,
                        bytes::Bytes::from(o.buffer.unwrap_or_default()),
                    )),
                    Err(why) => {
                        bad = Some(Error::internal(format!("backend '{backend}' sent {why}.")));
                        break;
                    }
                }
            }
            match bad {
                None => Ok((outputs, r.parameters)),
                Some(e) => Err(e),
            }
        } else {
            // The caller keeps the error; only its text travels.
            let e = obj(error, Kind::Error, "error")?;
            Err(super::host::to_error(e.code, &e.message.to_string_lossy()))
        };
        r.completion.deliver(Some(result), send_flags & RESPONSE_COMPLETE_FINAL != 0);
        Ok(())
    })
}

/// Checks an output against the datatype and shape its backend declared, so that no client gets a
/// tensor whose bytes do not match its shape: a fixed-size datatype needs exactly elements × element
/// size bytes, BYTES well-formed length-prefixed elements, as many as the shape has. The error is the
/// object of "backend '<name>' sent ...".
fn check_output(o: &OutputObj) -> std::result::Result<(), String> {
    let (name, dt) = (&o.name, o.datatype.as_str());
    let shape = format!("{:?}", o.shape);
    let too_many = || format!("output '{name}' of shape {shape}, too many elements to hold");
    if o.shape.iter().any(|&d| d < 0) {
        return Err(format!("output '{name}' of shape {shape}, which has a negative dimension"));
    }
    let count = crate::tensor::element_count(&o.shape).ok_or_else(too_many)?;
    let Some(buffer) = &o.buffer else {
        // An empty tensor needs no buffer.
        if count == 0 {
            return Ok(());
        }
        return Err(format!("output '{name}' ({dt}, shape {shape}) without a buffer (no TRITONBACKEND_OutputBuffer)"));
    };
    match o.datatype.byte_size() {
        Some(size) => {
            let need = count.checked_mul(size).ok_or_else(too_many)?;
            if buffer.len() != need {
                return Err(format!(
                    "output '{name}' ({dt}, shape {shape}) with {} bytes where its shape needs {need}",
                    buffer.len()
                ));
            }
        }
        None => {
            let elements = crate::tensor::bytes_elements(buffer).map_err(|e| {
                format!(
                    "BYTES output '{name}' (shape {shape}) that is not a list of length-prefixed elements: {}",
                    e.message
                )
            })?;
            if elements.len() != count {
                return Err(format!(
                    "BYTES output '{name}' (shape {shape}) holding {} element(s) where its shape needs {count}",
                    elements.len()
                ));
            }
        }
    }
    Ok(())
}

// ---- response factories (decoupled models) ----

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ResponseFactoryNew(factory: *mut *mut FactoryObj, request: *mut RequestObj) -> Err {
    guarded("TRITONBACKEND_ResponseFactoryNew", || {
        let r = obj(request, Kind::Request, "request")?;
        if factory.is_null() {
            return Err(invalid("factory is null"));
        }
        let p = Box::into_raw(Box::new(FactoryObj { completion: r.completion.clone() }));
        register(p as *const c_void, Kind::Factory);
        put(factory, p);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ResponseFactoryDelete(factory: *mut FactoryObj) -> Err {
    guarded("TRITONBACKEND_ResponseFactoryDelete", || {
        drop(take_box(factory, Kind::Factory, "factory")?);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ResponseFactorySendFlags(factory: *mut FactoryObj, send_flags: u32) -> Err {
    guarded("TRITONBACKEND_ResponseFactorySendFlags", || {
        let f = obj(factory, Kind::Factory, "factory")?;
        f.completion.deliver(None, send_flags & RESPONSE_COMPLETE_FINAL != 0);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ResponseFactoryIsCancelled(factory: *mut FactoryObj, is_cancelled: *mut bool) -> Err {
    guarded("TRITONBACKEND_ResponseFactoryIsCancelled", || {
        put(is_cancelled, obj(factory, Kind::Factory, "factory")?.completion.cancelled());
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ResponseNewFromFactory(
    response: *mut *mut ResponseObj,
    factory: *mut FactoryObj,
) -> Err {
    guarded("TRITONBACKEND_ResponseNewFromFactory", || {
        let f = obj(factory, Kind::Factory, "factory")?;
        if response.is_null() {
            return Err(invalid("response is null"));
        }
        let p = Box::into_raw(Box::new(ResponseObj {
            completion: f.completion.clone(),
            outputs: Vec::new(),
            parameters: Default::default(),
        }));
        register(p as *const c_void, Kind::Response);
        put(response, p);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model_api::types::DataType;

    fn output(datatype: DataType, shape: &[i64], buffer: Option<&[u8]>) -> OutputObj {
        OutputObj {
            name: "OUT".into(),
            c_name: cstring("OUT"),
            datatype,
            shape: shape.to_vec(),
            buffer: buffer.map(<[u8]>::to_vec),
            attributes: BufferAttributesObj::host(0),
        }
    }

    #[test]
    fn outputs_must_match_the_shape_and_datatype_their_backend_declared() {
        assert_eq!(check_output(&output(DataType::Fp32, &[2, 2], Some(&[0; 16]))), Ok(()));
        // An empty tensor needs no buffer; any other does.
        assert_eq!(check_output(&output(DataType::Fp32, &[0, 4], None)), Ok(()));
        let e = check_output(&output(DataType::Int64, &[3], None)).unwrap_err();
        assert!(e.contains("without a buffer"), "{e}");
        let e = check_output(&output(DataType::Fp32, &[2, 2], Some(&[0; 15]))).unwrap_err();
        assert!(e.contains("with 15 bytes where its shape needs 16"), "{e}");
        let e = check_output(&output(DataType::Fp32, &[-1, 2], Some(&[]))).unwrap_err();
        assert!(e.contains("negative dimension"), "{e}");
        // The element count fits, its byte size does not.
        let e = check_output(&output(DataType::Fp64, &[1 << 62], Some(&[]))).unwrap_err();
        assert!(e.contains("too many elements"), "{e}");
        let e = check_output(&output(DataType::Fp32, &[i64::MAX, i64::MAX], None)).unwrap_err();
        assert!(e.contains("too many elements"), "{e}");
    }

    #[test]
    fn bytes_outputs_must_hold_as_many_well_formed_elements_as_their_shape() {
        let two = crate::tensor::serialize_bytes([&b"ab"[..], &b""[..]]);
        assert_eq!(check_output(&output(DataType::Bytes, &[2], Some(&two))), Ok(()));
        let e = check_output(&output(DataType::Bytes, &[3], Some(&two))).unwrap_err();
        assert!(e.contains("holding 2 element(s) where its shape needs 3"), "{e}");
        let e = check_output(&output(DataType::Bytes, &[1], Some(&[9, 0, 0, 0, b'x']))).unwrap_err();
        assert!(e.contains("not a list of length-prefixed elements"), "{e}");
        let e = check_output(&output(DataType::Bytes, &[1], Some(&[1, 0]))).unwrap_err();
        assert!(e.contains("not a list of length-prefixed elements"), "{e}");
    }
}
