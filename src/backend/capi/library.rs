//! A backend library (`libtriton_<name>.so`) and the C objects of its models and instances: loading,
//! the entry points, and handing requests over. The only module of the host that calls into the
//! backend.
//!
//! Contract for every call into the library: the entry point was resolved from this library with
//! the signature the TRITONBACKEND API documents for it (`TRITONSERVER_Error* f(object*)`, and
//! `(instance*, request**, uint32_t)` for execute); every object pointer passed is registered live for
//! the whole call; an error the backend returns is taken back with `take_error` (it is the backend's
//! to hand over). The library is never unloaded (see [`Library`]).
#![allow(unsafe_code)]

use super::abi::*;
use super::exports::take_error;
use super::host::to_error;
use crate::error::{Error, Result};
use std::ffi::c_void;
use std::path::Path;
use std::sync::atomic::AtomicPtr;
use std::sync::Arc;

type ObjFn<T> = unsafe extern "C" fn(*mut T) -> *mut ErrorObj;
type ExecuteFn = unsafe extern "C" fn(*mut InstanceObj, *mut *mut RequestObj, u32) -> *mut ErrorObj;

/// A loaded backend library, initialized. It is never unloaded: models may keep pointers into it
/// (statics, threads it started), and Triton's own backends are not all safe to close.
pub struct Library {
    backend: Box<BackendObj>,
    finalize: Option<ObjFn<BackendObj>>,
    model_initialize: Option<ObjFn<ModelObj>>,
    model_finalize: Option<ObjFn<ModelObj>>,
    instance_initialize: Option<ObjFn<InstanceObj>>,
    instance_finalize: Option<ObjFn<InstanceObj>>,
    execute: ExecuteFn,
}

// SAFETY: the entry points may be called from any thread (the API's rule: the server calls them from
// its own threads); the backend object is only read through atomics and immutable fields.
unsafe impl Send for Library {}
// SAFETY: as above.
unsafe impl Sync for Library {}

/// Turns an error a backend call returned into ours, naming the call.
fn check(e: *mut ErrorObj, call: &str) -> Result<()> {
    match take_error(e) {
        None => Ok(()),
        Some((code, message)) => Err(to_error(code, &format!("{call}: {message}"))),
    }
}

/// Whether this executable exports the API to the libraries it loads (see `build.rs`: a linker that
/// takes no symbol list, as zig's in the glibc-2.27 builds, leaves it unexported).
pub fn api_exported() -> bool {
    static EXPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *EXPORTED.get_or_init(|| {
        let this = libloading::os::unix::Library::this();
        // SAFETY: only looks the symbol up in the executable's dynamic symbol table; nothing is called.
        unsafe { this.get::<*const c_void>(b"TRITONBACKEND_ApiVersion\0") }.is_ok()
    })
}

impl Library {
    /// Loads `path` as backend `name` and runs its `TRITONBACKEND_Initialize` with `config_json`.
    pub fn load(path: &Path, name: &str, config_json: String) -> Result<Library> {
        let fail = |why: String| Error::unavailable(format!("backend '{name}' ({}): {why}", path.display()));
        // SAFETY: loading a backend runs its initializers; it is a library the operator installed for
        // this purpose, as tritonserver loads it (RTLD_NOW | RTLD_LOCAL).
        let lib = unsafe {
            libloading::os::unix::Library::open(
                Some(path),
                libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL,
            )
        }
        .map_err(|e| {
            fail(format!(
                "cannot be loaded: {}",
                std::error::Error::source(&e).map_or_else(|| e.to_string(), |s| s.to_string())
            ))
        })?;
        macro_rules! entry {
            ($name:literal) => {{
                // SAFETY: the symbol is the TRITONBACKEND entry point of that name, whose documented
                // signature is the field's type.
                unsafe { lib.get(concat!($name, "\0").as_bytes()) }.ok().map(|s: libloading::os::unix::Symbol<_>| *s)
            }};
        }
        let initialize: Option<ObjFn<BackendObj>> = entry!("TRITONBACKEND_Initialize");
        let execute: Option<ExecuteFn> = entry!("TRITONBACKEND_ModelInstanceExecute");
        let execute = execute
            .ok_or_else(|| fail("lacks TRITONBACKEND_ModelInstanceExecute, which every backend must export".into()))?;
        let mut library = Library {
            backend: Box::new(BackendObj {
                name: cstring(name),
                config_json,
                state: AtomicPtr::new(std::ptr::null_mut()),
                location: cstring(&path.parent().map(|p| p.display().to_string()).unwrap_or_default()),
            }),
            finalize: entry!("TRITONBACKEND_Finalize"),
            model_initialize: entry!("TRITONBACKEND_ModelInitialize"),
            model_finalize: entry!("TRITONBACKEND_ModelFinalize"),
            instance_initialize: entry!("TRITONBACKEND_ModelInstanceInitialize"),
            instance_finalize: entry!("TRITONBACKEND_ModelInstanceFinalize"),
            execute,
        };
        // Kept loaded for the process (see the type's docs).
        std::mem::forget(lib);
        let b = library.backend_ptr();
        register(b as *const c_void, Kind::Backend);
        if let Some(init) = initialize {
            // SAFETY: see the module's contract; the backend object is registered.
            if let Err(e) = check(unsafe { init(b) }, "TRITONBACKEND_Initialize") {
                // Not initialized, so not finalized either (dropping it only unregisters it).
                library.finalize = None;
                return Err(fail(e.message));
            }
        }
        tracing::info!(
            "Loaded backend '{name}' from '{}' (TRITONBACKEND API {API_MAJOR}.{API_MINOR}).",
            path.display()
        );
        Ok(library)
    }

    fn backend_ptr(&self) -> *mut BackendObj {
        &*self.backend as *const BackendObj as *mut BackendObj
    }

    pub fn name(&self) -> String {
        self.backend.name.to_string_lossy().into_owned()
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        if let Some(fini) = self.finalize {
            // SAFETY: see the module's contract; every model of this library is gone (they hold it).
            if let Err(e) = check(unsafe { fini(self.backend_ptr()) }, "TRITONBACKEND_Finalize") {
                tracing::warn!("Backend '{}': {}", self.name(), e.message);
            }
        }
        unregister(self.backend_ptr() as *const c_void);
    }
}

/// A model version of a backend library, initialized; finalized when its last instance is gone.
pub struct Model {
    pub library: Arc<Library>,
    obj: Box<ModelObj>,
}

// SAFETY: the model object is read through atomics, a mutex and immutable fields.
unsafe impl Send for Model {}
// SAFETY: as above.
unsafe impl Sync for Model {}

impl Model {
    /// Runs `TRITONBACKEND_ModelInitialize` for model `name` version `version` in `repository`.
    pub fn new(
        library: Arc<Library>,
        name: &str,
        version: u64,
        repository: &Path,
        config_json: String,
        auto_complete: bool,
    ) -> Result<Model> {
        let obj = Box::new(ModelObj {
            name: cstring(name),
            version,
            repository: cstring(&repository.display().to_string()),
            config_json: parking_lot::Mutex::new(config_json),
            auto_complete,
            backend: &*library.backend as *const BackendObj,
            state: AtomicPtr::new(std::ptr::null_mut()),
        });
        let p = &*obj as *const ModelObj as *mut ModelObj;
        register(p as *const c_void, Kind::Model);
        if let Some(init) = library.model_initialize {
            // SAFETY: see the module's contract.
            if let Err(e) = check(unsafe { init(p) }, "TRITONBACKEND_ModelInitialize") {
                // Not initialized, so not finalized either.
                unregister(p as *const c_void);
                return Err(e);
            }
        }
        Ok(Model { library, obj })
    }

    fn ptr(&self) -> *mut ModelObj {
        &*self.obj as *const ModelObj as *mut ModelObj
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        if let Some(fini) = self.library.model_finalize {
            // SAFETY: see the module's contract; every instance of this model is gone (they hold it).
            if let Err(e) = check(unsafe { fini(self.ptr()) }, "TRITONBACKEND_ModelFinalize") {
                tracing::warn!("Model '{}': {}", self.obj.name.to_string_lossy(), e.message);
            }
        }
        unregister(self.ptr() as *const c_void);
    }
}

/// An instance of a model, initialized; finalized on drop.
pub struct Instance {
    pub model: Arc<Model>,
    obj: Box<InstanceObj>,
}

// SAFETY: an instance is driven by one thread at a time (`&mut` in the host); its object is read
// through atomics and immutable fields.
unsafe impl Send for Instance {}

impl Instance {
    pub fn new(model: Arc<Model>, name: &str, kind: u32, device_id: i32) -> Result<Instance> {
        let obj = Box::new(InstanceObj {
            name: cstring(name),
            kind,
            device_id,
            model: &*model.obj as *const ModelObj,
            state: AtomicPtr::new(std::ptr::null_mut()),
        });
        let p = &*obj as *const InstanceObj as *mut InstanceObj;
        register(p as *const c_void, Kind::Instance);
        if let Some(init) = model.library.instance_initialize {
            // SAFETY: see the module's contract.
            if let Err(e) = check(unsafe { init(p) }, "TRITONBACKEND_ModelInstanceInitialize") {
                unregister(p as *const c_void);
                return Err(e);
            }
        }
        Ok(Instance { model, obj })
    }

    fn ptr(&self) -> *mut InstanceObj {
        &*self.obj as *const InstanceObj as *mut InstanceObj
    }

    /// Hands `requests` to `TRITONBACKEND_ModelInstanceExecute`. On success the backend owns them
    /// and answers through their completions; on an error the requests are taken back and the error
    /// returned.
    pub fn execute(&mut self, requests: Vec<Arc<RequestObj>>) -> Result<()> {
        let mut ptrs: Vec<*mut RequestObj> = requests
            .into_iter()
            .map(|r| {
                for i in &r.inputs {
                    register(i as *const InputObj as *const c_void, Kind::Input);
                }
                let p = Arc::into_raw(r) as *mut RequestObj;
                register(p as *const c_void, Kind::Request);
                p
            })
            .collect();
        let n = u32::try_from(ptrs.len()).map_err(|_| Error::internal("too many requests in one execution"))?;
        // SAFETY: see the module's contract; `ptrs` holds `n` registered request pointers and stays
        // alive for the call (the backend copies what it keeps).
        let err = unsafe { (self.model.library.execute)(self.ptr(), ptrs.as_mut_ptr(), n) };
        let result = check(err, "TRITONBACKEND_ModelInstanceExecute");
        if result.is_err() {
            // The requests are still ours (the API's rule): take back those the backend did not
            // release anyway.
            for p in ptrs {
                if is_live(p as *const c_void, Kind::Request) {
                    unregister(p as *const c_void);
                    // SAFETY: a live request pointer from Arc::into_raw above, unregistered: taken once.
                    drop(unsafe { Arc::from_raw(p as *const RequestObj) });
                }
            }
        }
        result
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Some(fini) = self.model.library.instance_finalize {
            // SAFETY: see the module's contract; no execution is running (the instance is `&mut`).
            if let Err(e) = check(unsafe { fini(self.ptr()) }, "TRITONBACKEND_ModelInstanceFinalize") {
                tracing::warn!("Instance '{}': {}", self.obj.name.to_string_lossy(), e.message);
            }
        }
        unregister(self.ptr() as *const c_void);
    }
}

impl Drop for RequestObj {
    fn drop(&mut self) {
        for i in &self.inputs {
            unregister(i as *const InputObj as *const c_void);
        }
    }
}
