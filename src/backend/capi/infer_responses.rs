//! The TRITONSERVER_InferenceResponse* functions (exported, `exports.list`): what a backend reads from
//! the responses of its in-process requests (error, model, id, parameters, outputs).
//!
//! Contract for every `unsafe` block: as in `guard.rs` (object pointers only after `is_live`,
//! out-pointers and buffers valid for the call as the API requires); callbacks are called with the
//! pointers the backend registered them with, which the API makes it keep valid until the request is
//! released.
#![allow(unsafe_code)]
#![allow(non_snake_case)]

use super::abi::*;
use super::guard::{guarded, invalid, new_error, obj, put, take_box, Err};
use super::infer_requests::release_output;
use std::ffi::{c_char, c_void};
use std::ptr::null_mut;
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
