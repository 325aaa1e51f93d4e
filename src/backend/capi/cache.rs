//! Response-cache libraries (`libtritoncache_<name>.so`, TRITONCACHE API 0.1) as the core's
//! [`ExternalCache`] (the TRITONCACHE_* functions they call back are in `cache_api.rs`). A library is
//! loaded once (RTLD_NOW | RTLD_LOCAL, never unloaded), initialized with its settings as JSON, and
//! finalized when the server goes.
//!
//! Contract for every `unsafe` block: the entry points were resolved from the library with the
//! signatures tritoncache.h documents for their names; the cache object is the one its
//! `TRITONCACHE_CacheInitialize` returned; entry and allocator objects are registered live for the
//! whole call; errors it returns are taken back with `take_error`.
#![allow(unsafe_code)]

use super::abi::*;
use super::cache_api::{CacheAllocatorObj, CacheEntryObj, CopyDirection, CACHE_API_MAJOR, CACHE_API_MINOR};
use super::guard::{take_error, to_error};
use crate::core::cache::ExternalCache;
use crate::error::{Error, ErrorKind, Result};
use parking_lot::Mutex;
use std::ffi::{c_char, c_void, CString};
use std::path::{Path, PathBuf};

type InitializeFn = unsafe extern "C" fn(*mut *mut c_void, *const c_char) -> *mut ErrorObj;
type FinalizeFn = unsafe extern "C" fn(*mut c_void) -> *mut ErrorObj;
type AccessFn =
    unsafe extern "C" fn(*mut c_void, *const c_char, *mut CacheEntryObj, *mut CacheAllocatorObj) -> *mut ErrorObj;

/// A loaded and initialized cache library.
pub struct CCache {
    name: String,
    path: PathBuf,
    /// The library's `TRITONCACHE_Cache`, as an address (it is opaque here).
    cache: usize,
    finalize: FinalizeFn,
    lookup: AccessFn,
    insert: AccessFn,
}

fn check(e: *mut ErrorObj, call: &str) -> Result<()> {
    match take_error(e) {
        None => Ok(()),
        Some((code, message)) => Err(to_error(code, &format!("{call}: {message}"))),
    }
}

impl std::fmt::Debug for CCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CCache({}, {})", self.name, self.path.display())
    }
}

impl CCache {
    /// Loads `path` as cache `name` and runs its `TRITONCACHE_CacheInitialize` with `config_json`.
    pub fn load(path: &Path, name: &str, config_json: &str) -> Result<CCache> {
        let fail = |why: String| Error::unavailable(format!("response cache '{name}' ({}): {why}", path.display()));
        if !path.is_file() {
            return Err(fail("not found (install it there, or set --cache-directory)".into()));
        }
        // The library's NEEDED libtritonserver.so, and the API where the executable exports none.
        let forwarding = super::library::forwarding();
        if !super::library::api_exported() {
            if let Err(why) = forwarding {
                return Err(fail(format!("needs Triton's C API, which this binary does not export, and {why}")));
            }
        }
        let lib = super::library::open_plugin(path).map_err(|e| fail(e.message))?;
        macro_rules! required {
            ($name:literal, $ty:ty) => {{
                // SAFETY: the symbol is the TRITONCACHE entry point of that name, whose documented
                // signature is the binding's type.
                let f: Option<$ty> = unsafe { super::library::entry_point(&lib, concat!($name, "\0")) };
                f.ok_or_else(|| fail(concat!("lacks ", $name, ", which every cache must export").into()))?
            }};
        }
        let initialize = required!("TRITONCACHE_CacheInitialize", InitializeFn);
        let finalize = required!("TRITONCACHE_CacheFinalize", FinalizeFn);
        let lookup = required!("TRITONCACHE_CacheLookup", AccessFn);
        let insert = required!("TRITONCACHE_CacheInsert", AccessFn);
        // Kept loaded for the process, as tritonserver keeps it.
        std::mem::forget(lib);
        let config = CString::new(config_json).map_err(|_| fail("its settings hold a NUL character".into()))?;
        let mut cache: *mut c_void = std::ptr::null_mut();
        // SAFETY: see the module's contract; `cache` is a writable out-pointer, `config` lives for the call.
        check(unsafe { initialize(&mut cache, config.as_ptr()) }, "TRITONCACHE_CacheInitialize")
            .map_err(|e| fail(e.message))?;
        if cache.is_null() {
            return Err(fail("TRITONCACHE_CacheInitialize returned no cache".into()));
        }
        tracing::info!(
            "Loaded response cache '{name}' from '{}' (TRITONCACHE API {CACHE_API_MAJOR}.{CACHE_API_MINOR}).",
            path.display()
        );
        Ok(CCache { name: name.to_string(), path: path.to_path_buf(), cache: cache as usize, finalize, lookup, insert })
    }

    /// Calls `f` (look-up or insert) with a registered entry and allocator, taking both back after.
    fn call(
        &self,
        f: AccessFn,
        call: &str,
        key: &str,
        entry: CacheEntryObj,
        alloc: CacheAllocatorObj,
    ) -> Result<CacheAllocatorObj> {
        let key = CString::new(key).map_err(|_| Error::internal("a cache key holds a NUL character"))?;
        let entry = Box::new(entry);
        let alloc = Box::new(alloc);
        let (e, a) = (
            &*entry as *const CacheEntryObj as *mut CacheEntryObj,
            &*alloc as *const CacheAllocatorObj as *mut CacheAllocatorObj,
        );
        register(e as *const c_void, Kind::CacheEntry);
        register(a as *const c_void, Kind::CacheAllocator);
        // SAFETY: see the module's contract; `key` lives for the call.
        let err = unsafe { f(self.cache as *mut c_void, key.as_ptr(), e, a) };
        unregister(e as *const c_void);
        unregister(a as *const c_void);
        check(err, call).map_err(|e| e.context(format!("response cache '{}'", self.name)))?;
        Ok(*alloc)
    }
}

impl ExternalCache for CCache {
    fn name(&self) -> &str {
        &self.name
    }

    fn lookup(&self, key: &str) -> Result<Option<Vec<Vec<u8>>>> {
        let alloc = CacheAllocatorObj { direction: CopyDirection::OutOf, copied: Mutex::new(None) };
        match self.call(self.lookup, "TRITONCACHE_CacheLookup", key, CacheEntryObj::default(), alloc) {
            // A cache answers a miss with an error (NOT_FOUND, by the header's advice).
            Err(e) if e.kind == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
            // Buffers it added but never had copied are gone with the call: nothing was found.
            Ok(alloc) => Ok(alloc.copied.into_inner().filter(|b| !b.is_empty())),
        }
    }

    fn insert(&self, key: &str, buffers: Vec<Vec<u8>>) -> Result<()> {
        // Placeholders of the packed sizes, for the cache to put buffers of its own in their place.
        let entry = CacheEntryObj { buffers: Mutex::new(buffers.iter().map(|b| (0, b.len())).collect()) };
        let alloc = CacheAllocatorObj { direction: CopyDirection::Into(buffers), copied: Mutex::new(None) };
        match self.call(self.insert, "TRITONCACHE_CacheInsert", key, entry, alloc) {
            Err(e) if e.kind == ErrorKind::AlreadyExists => Ok(()),
            other => other.map(drop),
        }
    }
}

impl Drop for CCache {
    fn drop(&mut self) {
        // SAFETY: see the module's contract; no call into the cache runs (it is being dropped).
        if let Err(e) = check(unsafe { (self.finalize)(self.cache as *mut c_void) }, "TRITONCACHE_CacheFinalize") {
            tracing::warn!("Response cache '{}': {}", self.name, e.message);
        }
    }
}
