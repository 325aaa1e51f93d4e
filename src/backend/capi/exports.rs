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
use super::guard::{
    guarded, invalid, new_error, new_message, obj, put, put_config, state_accessors, take_box, take_error, text, Err,
};
use std::ffi::{c_char, c_int, c_void, CStr};

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

state_accessors! {
    #[no_mangle] pub extern "C" fn TRITONBACKEND_BackendState(backend: *mut BackendObj, state: *mut *mut c_void) -> Err;
    #[no_mangle] pub extern "C" fn TRITONBACKEND_BackendSetState(backend: *mut BackendObj, state: *mut c_void) -> Err;
    of Kind::Backend, "backend"
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
        put_config(config_version, config, &m.config_json.lock())
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

state_accessors! {
    #[no_mangle] pub extern "C" fn TRITONBACKEND_ModelState(model: *mut ModelObj, state: *mut *mut c_void) -> Err;
    #[no_mangle] pub extern "C" fn TRITONBACKEND_ModelSetState(model: *mut ModelObj, state: *mut c_void) -> Err;
    of Kind::Model, "model"
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

state_accessors! {
    #[no_mangle] pub extern "C" fn TRITONBACKEND_ModelInstanceState(instance: *mut InstanceObj, state: *mut *mut c_void) -> Err;
    #[no_mangle] pub extern "C" fn TRITONBACKEND_ModelInstanceSetState(instance: *mut InstanceObj, state: *mut c_void) -> Err;
    of Kind::Instance, "instance"
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
            ..Default::default()
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
