//! The TRITONSERVER_InferenceRequest* functions and `TRITONSERVER_ServerInferAsync` (exported,
//! `exports.list`): a backend's in-process (BLS) requests, run through the server's normal inference
//! path, and the delivery of their responses through the backend's allocator and callbacks.
//!
//! Threads: `TRITONSERVER_ServerInferAsync` returns at once; the request runs on the server's runtime,
//! and the backend's callbacks (allocator, response, release) are called from a runtime worker, in
//! order: each response (its allocations first), then the request's release.
//!
//! Contract for every `unsafe` block: as in `guard.rs` (object pointers only after `is_live`,
//! out-pointers and buffers valid for the call as the API requires); callbacks are called with the
//! pointers the backend registered them with, which the API makes it keep valid until the request is
//! released.
#![allow(unsafe_code)]
#![allow(non_snake_case)]

use super::abi::*;
use super::guard::{code_of, guarded, invalid, new_error, obj, obj_mut, put, take_box, take_error, text, Err};
use super::inprocess::server_api;
use crate::error::{Error, Result};
use crate::model_api::types::{InferRequest, ParamValue, RequestedOutput, StreamResponse, Tensor};
use crate::model_api::SequenceId;
use bytes::Bytes;
use futures_util::StreamExt;
use std::ffi::{c_char, c_void};
use std::ptr::null_mut;
use std::sync::Arc;
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
            cancel: Default::default(),
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

/// Exported functions that read their arguments (the `let`s, in order), then change a request the
/// backend owns (`|r| ...`): the request setters, written once here.
macro_rules! request_setters {
    ($($(#[$attr:meta])* pub extern "C" fn $name:ident($request:ident: *mut InferRequestObj $(, $arg:ident: $ty:ty)* $(,)?) -> Err {
        $(let $v:ident = $e:expr;)* |$r:ident| $body:expr
    })*) => {
        $($(#[$attr])*
        pub extern "C" fn $name($request: *mut InferRequestObj $(, $arg: $ty)*) -> Err {
            guarded(stringify!($name), || {
                $(let $v = $e;)*
                with_request($request, |$r| {
                    $body;
                    Ok(())
                })
            })
        })*
    };
}

request_setters! {
    #[no_mangle] pub extern "C" fn TRITONSERVER_InferenceRequestSetId(request: *mut InferRequestObj, id: *const c_char) -> Err {
        let id = text(id, "id")?.to_string(); |r| r.id = id
    }
    #[no_mangle] pub extern "C" fn TRITONSERVER_InferenceRequestSetFlags(request: *mut InferRequestObj, flags: u32) -> Err {
        |r| r.flags = flags
    }
    #[no_mangle] pub extern "C" fn TRITONSERVER_InferenceRequestSetCorrelationId(request: *mut InferRequestObj, id: u64) -> Err {
        |r| r.correlation = (id != 0).then_some(SequenceId::U64(id))
    }
    #[no_mangle] pub extern "C" fn TRITONSERVER_InferenceRequestSetCorrelationIdString(request: *mut InferRequestObj, id: *const c_char) -> Err {
        let id = text(id, "correlation_id")?.to_string(); |r| r.correlation = (!id.is_empty()).then_some(SequenceId::Str(id))
    }
    #[no_mangle] pub extern "C" fn TRITONSERVER_InferenceRequestSetTimeoutMicroseconds(request: *mut InferRequestObj, us: u64) -> Err {
        |r| r.timeout_us = us
    }
    #[no_mangle] pub extern "C" fn TRITONSERVER_InferenceRequestSetPriorityUInt64(request: *mut InferRequestObj, priority: u64) -> Err {
        |r| r.priority = priority
    }
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceRequestSetPriority(request: *mut InferRequestObj, priority: u32) -> Err {
    TRITONSERVER_InferenceRequestSetPriorityUInt64(request, u64::from(priority))
}

request_setters! {
    #[no_mangle] pub extern "C" fn TRITONSERVER_InferenceRequestSetBoolParameter(request: *mut InferRequestObj, key: *const c_char, value: bool) -> Err {
        let key = text(key, "key")?.to_string(); |r| r.parameters.insert(key, ParamValue::Bool(value))
    }
    #[no_mangle] pub extern "C" fn TRITONSERVER_InferenceRequestSetIntParameter(request: *mut InferRequestObj, key: *const c_char, value: i64) -> Err {
        let key = text(key, "key")?.to_string(); |r| r.parameters.insert(key, ParamValue::Int(value))
    }
    #[no_mangle] pub extern "C" fn TRITONSERVER_InferenceRequestSetDoubleParameter(request: *mut InferRequestObj, key: *const c_char, value: f64) -> Err {
        let key = text(key, "key")?.to_string(); |r| r.parameters.insert(key, ParamValue::Double(value))
    }
    #[no_mangle] pub extern "C" fn TRITONSERVER_InferenceRequestSetStringParameter(request: *mut InferRequestObj, key: *const c_char, value: *const c_char) -> Err {
        let value = text(value, "value")?.to_string(); let key = text(key, "key")?.to_string();
        |r| r.parameters.insert(key, ParamValue::String(value))
    }
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

request_setters! {
    #[no_mangle] pub extern "C" fn TRITONSERVER_InferenceRequestRemoveAllInputData(request: *mut InferRequestObj, name: *const c_char) -> Err {
        let name = text(name, "name")?.to_string();
        |r| r.inputs.iter_mut().find(|i| i.name == name)
            .ok_or_else(|| invalid(&format!("input '{name}' does not exist in the request")))?.data.clear()
    }
    #[no_mangle] pub extern "C" fn TRITONSERVER_InferenceRequestRemoveAllInputs(request: *mut InferRequestObj) -> Err {
        |r| r.inputs.clear()
    }
    #[no_mangle] pub extern "C" fn TRITONSERVER_InferenceRequestAddRequestedOutput(request: *mut InferRequestObj, name: *const c_char) -> Err {
        let name = text(name, "name")?.to_string();
        |r| if !r.outputs.contains(&name) {
            r.outputs.push(name)
        }
    }
    #[no_mangle] pub extern "C" fn TRITONSERVER_InferenceRequestRemoveAllRequestedOutputs(request: *mut InferRequestObj) -> Err {
        |r| r.outputs.clear()
    }
    #[no_mangle] pub extern "C" fn TRITONSERVER_InferenceRequestSetReleaseCallback(request: *mut InferRequestObj, release_fn: Option<RequestReleaseFn>, userp: *mut c_void) -> Err {
        let f = release_fn.ok_or_else(|| invalid("request_release_fn is null"))?; |r| r.release = Some((f, userp as usize))
    }
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
        obj(request, Kind::InferRequest, "inference_request")?.cancel.cancel();
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceRequestIsCancelled(request: *mut InferRequestObj, cancelled: *mut bool) -> Err {
    guarded("TRITONSERVER_InferenceRequestIsCancelled", || {
        let r = obj(request, Kind::InferRequest, "inference_request")?;
        put(cancelled, r.cancel.is_cancelled());
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
        trace: None,
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
        let cancel = r.cancel.clone();
        let request = request as usize;
        rt.spawn(async move {
            let (model, version) = (req.model_name.clone(), req.model_version.unwrap_or(-1));
            tokio::select! {
                biased;
                () = run(api, req, route) => {}
                // Dropping the request's future cancels it in the server; the backend gets the error.
                () = cancel.cancelled() => {
                    let e = Error::cancelled("the in-process request was cancelled (TRITONSERVER_InferenceRequestCancel)");
                    deliver_error(&route, &model, version, &e);
                }
            }
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

pub(super) fn release_output(release: Option<AllocReleaseFn>, allocator: *mut AllocatorObj, o: &ResponseOutputObj) {
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
