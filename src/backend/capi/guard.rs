//! What every exported C API function shares, below all of them: the `TRITONSERVER_Error` and
//! `TRITONSERVER_Message` objects it hands out, the panic guard, the checked look-up of object
//! pointers, out-parameters and C strings, and the mapping between our errors and
//! `TRITONSERVER_Error_Code`s. It imports only `abi`, so the files of exported functions, the library
//! loader and the host all build on it without importing each other.
//!
//! Contract for every `unsafe` block below: object pointers are dereferenced only after `is_live`
//! found them registered with the right kind (the host registers an object when it hands it out and
//! unregisters it before freeing it); out-pointers and C strings come from the backend, which the
//! API makes responsible for them being valid for the call (as Triton does).
#![allow(unsafe_code)]

use super::abi::*;
use crate::error::{Error, ErrorKind};
use std::ffi::{c_char, c_void, CStr};
use std::ptr::null_mut;

pub(super) type Err = *mut ErrorObj;

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

/// A new `TRITONSERVER_Message` holding `json`, registered.
pub fn new_message(json: &str) -> *mut MessageObj {
    let p = Box::into_raw(Box::new(MessageObj { json: cstring(json) }));
    register(p as *const c_void, Kind::Message);
    p
}

/// Hands out a model's configuration as a new `TRITONSERVER_Message` (`TRITONBACKEND_ModelConfig`,
/// `TRITONREPOAGENT_ModelConfig`): only version 1 of the configuration exists.
pub(super) fn put_config(config_version: u32, config: *mut *mut MessageObj, json: &str) -> Result<(), Err> {
    if config_version != 1 {
        return Err(new_error(
            code::UNSUPPORTED,
            &format!("model configuration version {config_version} is not supported (only 1)"),
        ));
    }
    if config.is_null() {
        return Err(invalid("model_config is null"));
    }
    put(config, new_message(json));
    Ok(())
}

/// Our error for a `TRITONSERVER_Error_Code` and message.
pub fn to_error(code: u32, message: &str) -> Error {
    use super::abi::code;
    let kind = match code {
        code::INVALID_ARG => ErrorKind::InvalidArgument,
        code::NOT_FOUND => ErrorKind::NotFound,
        code::UNAVAILABLE => ErrorKind::Unavailable,
        code::UNSUPPORTED => ErrorKind::Unsupported,
        code::ALREADY_EXISTS => ErrorKind::AlreadyExists,
        code::CANCELLED => ErrorKind::Cancelled,
        _ => ErrorKind::Internal,
    };
    Error::new(kind, message)
}

/// The `TRITONSERVER_Error_Code` for our error.
pub fn code_of(e: &Error) -> u32 {
    use super::abi::code;
    match e.kind {
        ErrorKind::InvalidArgument | ErrorKind::PayloadTooLarge => code::INVALID_ARG,
        ErrorKind::NotFound => code::NOT_FOUND,
        ErrorKind::Unavailable => code::UNAVAILABLE,
        ErrorKind::Unsupported => code::UNSUPPORTED,
        ErrorKind::AlreadyExists => code::ALREADY_EXISTS,
        ErrorKind::Cancelled => code::CANCELLED,
        _ => code::INTERNAL,
    }
}

// The macros below write exported functions whose whole text (attribute, `pub extern "C"`, name and
// arguments) stays literal at the call site: scripts/capi-exports.sh and the linker test read the
// exported names from the source text.

/// An object kind's State / SetState pair (`TRITONBACKEND_ModelState`, `TRITONREPOAGENT_SetState`,
/// ...): the pointer the backend or agent keeps on the object, read and written once per kind here.
macro_rules! state_accessors {
    ($(#[$get_attr:meta])* pub extern "C" fn $get:ident($go:ident: *mut $gt:ident, $gs:ident: *mut *mut c_void) -> Err;
     $(#[$set_attr:meta])* pub extern "C" fn $set:ident($so:ident: *mut $st:ident, $ss:ident: *mut c_void) -> Err;
     of $kind:expr, $what:literal) => {
        $(#[$get_attr])*
        pub extern "C" fn $get($go: *mut $gt, $gs: *mut *mut ::std::ffi::c_void) -> $crate::backend::capi::guard::Err {
            use $crate::backend::capi::guard::{guarded, obj, put};
            guarded(stringify!($get), || {
                put($gs, obj($go, $kind, $what)?.state.load(::std::sync::atomic::Ordering::Acquire));
                Ok(())
            })
        }

        $(#[$set_attr])*
        pub extern "C" fn $set($so: *mut $st, $ss: *mut ::std::ffi::c_void) -> $crate::backend::capi::guard::Err {
            use $crate::backend::capi::guard::{guarded, obj};
            guarded(stringify!($set), || {
                obj($so, $kind, $what)?.state.store($ss, ::std::sync::atomic::Ordering::Release);
                Ok(())
            })
        }
    };
}
pub(super) use state_accessors;
