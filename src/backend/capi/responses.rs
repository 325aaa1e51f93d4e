//! The TRITONBACKEND_Response* functions (exported, `exports.list`): a backend's responses, their
//! parameters and outputs, the checks an output passes before it is sent, and the response factories
//! of decoupled models.
//!
//! Contract for every `unsafe` block below: object pointers are dereferenced only after `is_live`
//! found them registered with the right kind (the host registers an object when it hands it out and
//! unregisters it before freeing it); out-pointers and C strings come from the backend, which the
//! API makes responsible for them being valid for the call (as Triton does).
#![allow(unsafe_code)]
#![allow(non_snake_case)]

use super::abi::*;
use super::guard::{guarded, invalid, new_error, obj, obj_mut, put, take_box, text, Err};
use crate::error::Error;
use crate::model_api::types::{ParamValue, Tensor};
use std::ffi::{c_char, c_void};

/// The largest output buffer a backend may ask for (4 GiB).
const MAX_OUTPUT_BYTES: usize = 4 << 30;

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
            Err(super::guard::to_error(e.code, &e.message.to_string_lossy()))
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
mod tests;
