//! The TRITONBACKEND_Request* and TRITONBACKEND_Input* functions (exported, `exports.list`): what a
//! backend reads from the requests handed to its `ModelInstanceExecute` (their ids, flags,
//! parameters, inputs and their buffers), and the release that hands a request back.
//!
//! Contract for every `unsafe` block below: object pointers are dereferenced only after `is_live`
//! found them registered with the right kind (the host registers an object when it hands it out and
//! unregisters it before freeing it); out-pointers and C strings come from the backend, which the
//! API makes responsible for them being valid for the call (as Triton does).
#![allow(unsafe_code)]
#![allow(non_snake_case)]

use super::abi::*;
use super::guard::{guarded, invalid, new_error, obj, put, text, Err};
use std::ffi::{c_char, c_void};

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
        let r = obj(request, Kind::Request, "request")?;
        let iterative = r.completion.origin.iterative;
        let reschedule = release_flags & REQUEST_RELEASE_RESCHEDULE != 0;
        if reschedule && !iterative {
            // tritonserver's words; the backend may then release the request with ALL.
            return Err(new_error(
                code::INVALID_ARG,
                "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured \
                 to handle such a flag.",
            ));
        }
        if !reschedule && release_flags & REQUEST_RELEASE_ALL == 0 {
            return Err(new_error(
                code::INVALID_ARG,
                "the release flags name neither TRITONSERVER_REQUEST_RELEASE_ALL nor _RESCHEDULE",
            ));
        }
        if reschedule && !r.completion.reschedule() {
            return Err(new_error(
                code::UNSUPPORTED,
                "a decoupled request can be rescheduled only from within TRITONBACKEND_ModelInstanceExecute",
            ));
        }
        unregister(request as *const c_void);
        // SAFETY: the request was live; the pointer is the backend's reference from Arc::into_raw
        // (see `host::submit`), given back once: it is unregistered first, so a second release fails.
        let r = unsafe { std::sync::Arc::from_raw(request as *const RequestObj) };
        if !reschedule {
            r.completion.release();
        }
        Ok(())
    })
}

/// An exported function and its `...ForHostPolicy` twin, which takes a host policy name after the
/// first argument and ignores it: tritonrs has one host policy.
macro_rules! with_host_policy {
    ($(#[$attr:meta])* pub extern "C" fn $name:ident($first:ident: $first_ty:ty $(, $arg:ident: $ty:ty)* $(,)?) -> Err $body:block
     $(#[$policy_attr:meta])* pub extern "C" fn $policy:ident($first_again:ident, $host_policy:ident: *const c_char, ..) -> Err;) => {
        $(#[$attr])*
        pub extern "C" fn $name($first: $first_ty $(, $arg: $ty)*) -> Err $body

        $(#[$policy_attr])*
        pub extern "C" fn $policy($first: $first_ty, $host_policy: *const c_char $(, $arg: $ty)*) -> Err {
            $name($first $(, $arg)*)
        }
    };
}

with_host_policy! {
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
    #[no_mangle] pub extern "C" fn TRITONBACKEND_InputPropertiesForHostPolicy(input, _host_policy_name: *const c_char, ..) -> Err;
}

with_host_policy! {
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
    #[no_mangle] pub extern "C" fn TRITONBACKEND_InputBufferForHostPolicy(input, _host_policy_name: *const c_char, ..) -> Err;
}
