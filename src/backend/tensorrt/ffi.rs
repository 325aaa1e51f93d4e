//! TensorRT at run time: libnvinfer is dlopened (`libnvinfer.so.10`, then `.so.8`), its version read
//! with `getInferLibVersion()`, and every call goes through our C-ABI shim (`shim/trt_shim.h`):
//! linked into this binary for TensorRT 10 (when the build found TensorRT 10 headers), or
//! `libtritonrs_trt8.so`, built on the device by `jetson/build-trt8-shim.sh`, for TensorRT 8.2-8.6.
//! Both shims export the same functions, held here in one table. This is the only module of the
//! backend with unsafe code.
#![allow(unsafe_code)]

use super::engine::{EngineDesc, IoDesc, Range};
use super::run::{self, Faults, Faulty, Memory, Readback, Stream};
use super::{Context, Engine, RunInput, RunOutput, Runtime};
use crate::error::{Error, Result};
use crate::memory::pool::Pools;
use std::cell::RefCell;
use std::ffi::{c_char, c_void, CStr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

const ABI_VERSION: i32 = 1; // TRS_ABI_VERSION
const MAX_DIMS: usize = 8; // TRS_MAX_DIMS
const IO_INPUT: i32 = 1;
const IO_SHAPE_TENSOR: i32 = 2;
const IO_HOST: i32 = 4;
const IO_NOT_LINEAR: i32 = 8;

#[repr(C)]
struct RawRuntime {
    _private: [u8; 0],
}
#[repr(C)]
struct RawEngine {
    _private: [u8; 0],
}
#[repr(C)]
struct RawContext {
    _private: [u8; 0],
}

type LogFn = extern "C" fn(i32, *const c_char);
type CreateRuntimeFn = unsafe extern "C" fn(*mut c_void, i32) -> *mut c_void;

/// The shim's functions (trt_shim.h), from the linked TensorRT 10 shim or a dlopened TensorRT 8 one.
#[derive(Clone, Copy)]
struct Shim {
    abi_version: unsafe extern "C" fn() -> i32,
    header_version: unsafe extern "C" fn() -> i32,
    logger: unsafe extern "C" fn(LogFn) -> *mut c_void,
    runtime_create: unsafe extern "C" fn(CreateRuntimeFn, i32) -> *mut RawRuntime,
    runtime_destroy: unsafe extern "C" fn(*mut RawRuntime),
    /// `None` for a shim built before it existed: no DLA then.
    runtime_set_dla_core: Option<unsafe extern "C" fn(*mut RawRuntime, i32) -> i32>,
    engine_deserialize: unsafe extern "C" fn(*mut RawRuntime, *const c_void, usize) -> *mut RawEngine,
    engine_destroy: unsafe extern "C" fn(*mut RawEngine),
    engine_num_io: unsafe extern "C" fn(*const RawEngine) -> i32,
    engine_io_name: unsafe extern "C" fn(*const RawEngine, i32) -> *const c_char,
    engine_io_flags: unsafe extern "C" fn(*const RawEngine, i32) -> i32,
    engine_io_dtype: unsafe extern "C" fn(*const RawEngine, i32) -> i32,
    engine_io_shape: unsafe extern "C" fn(*const RawEngine, i32, *mut i64) -> i32,
    engine_num_profiles: unsafe extern "C" fn(*const RawEngine) -> i32,
    engine_profile_shape: unsafe extern "C" fn(*const RawEngine, i32, i32, i32, *mut i64) -> i32,
    engine_implicit_batch: unsafe extern "C" fn(*const RawEngine) -> i32,
    context_create: unsafe extern "C" fn(*mut RawEngine) -> *mut RawContext,
    context_destroy: unsafe extern "C" fn(*mut RawContext),
    context_set_profile: unsafe extern "C" fn(*mut RawContext, i32, *mut c_void) -> i32,
    context_set_input_shape: unsafe extern "C" fn(*mut RawContext, i32, *const i64, i32) -> i32,
    context_tensor_shape: unsafe extern "C" fn(*mut RawContext, i32, *mut i64) -> i32,
    context_set_address: unsafe extern "C" fn(*mut RawContext, i32, *mut c_void) -> i32,
    context_enqueue: unsafe extern "C" fn(*mut RawContext, *mut c_void) -> i32,
}

#[cfg(tritonrs_trt_shim)]
mod linked {
    use super::*;
    extern "C" {
        pub fn trs_abi_version() -> i32;
        pub fn trs_header_version() -> i32;
        pub fn trs_logger(log: LogFn) -> *mut c_void;
        pub fn trs_runtime_create(create: CreateRuntimeFn, version: i32) -> *mut RawRuntime;
        pub fn trs_runtime_destroy(rt: *mut RawRuntime);
        pub fn trs_runtime_set_dla_core(rt: *mut RawRuntime, core: i32) -> i32;
        pub fn trs_engine_deserialize(rt: *mut RawRuntime, blob: *const c_void, len: usize) -> *mut RawEngine;
        pub fn trs_engine_destroy(e: *mut RawEngine);
        pub fn trs_engine_num_io(e: *const RawEngine) -> i32;
        pub fn trs_engine_io_name(e: *const RawEngine, io: i32) -> *const c_char;
        pub fn trs_engine_io_flags(e: *const RawEngine, io: i32) -> i32;
        pub fn trs_engine_io_dtype(e: *const RawEngine, io: i32) -> i32;
        pub fn trs_engine_io_shape(e: *const RawEngine, io: i32, dims: *mut i64) -> i32;
        pub fn trs_engine_num_profiles(e: *const RawEngine) -> i32;
        pub fn trs_engine_profile_shape(e: *const RawEngine, io: i32, profile: i32, which: i32, dims: *mut i64) -> i32;
        pub fn trs_engine_implicit_batch(e: *const RawEngine) -> i32;
        pub fn trs_context_create(e: *mut RawEngine) -> *mut RawContext;
        pub fn trs_context_destroy(c: *mut RawContext);
        pub fn trs_context_set_profile(c: *mut RawContext, profile: i32, stream: *mut c_void) -> i32;
        pub fn trs_context_set_input_shape(c: *mut RawContext, io: i32, dims: *const i64, nb: i32) -> i32;
        pub fn trs_context_tensor_shape(c: *mut RawContext, io: i32, dims: *mut i64) -> i32;
        pub fn trs_context_set_address(c: *mut RawContext, io: i32, ptr: *mut c_void) -> i32;
        pub fn trs_context_enqueue(c: *mut RawContext, stream: *mut c_void) -> i32;
    }

    pub fn shim() -> Shim {
        Shim {
            abi_version: trs_abi_version,
            header_version: trs_header_version,
            logger: trs_logger,
            runtime_create: trs_runtime_create,
            runtime_destroy: trs_runtime_destroy,
            runtime_set_dla_core: Some(trs_runtime_set_dla_core),
            engine_deserialize: trs_engine_deserialize,
            engine_destroy: trs_engine_destroy,
            engine_num_io: trs_engine_num_io,
            engine_io_name: trs_engine_io_name,
            engine_io_flags: trs_engine_io_flags,
            engine_io_dtype: trs_engine_io_dtype,
            engine_io_shape: trs_engine_io_shape,
            engine_num_profiles: trs_engine_num_profiles,
            engine_profile_shape: trs_engine_profile_shape,
            engine_implicit_batch: trs_engine_implicit_batch,
            context_create: trs_context_create,
            context_destroy: trs_context_destroy,
            context_set_profile: trs_context_set_profile,
            context_set_input_shape: trs_context_set_input_shape,
            context_tensor_shape: trs_context_tensor_shape,
            context_set_address: trs_context_set_address,
            context_enqueue: trs_context_enqueue,
        }
    }
}

/// The TensorRT 10 shim linked into this binary, if the build had TensorRT 10 headers.
fn linked_shim() -> Option<Shim> {
    #[cfg(tritonrs_trt_shim)]
    {
        Some(linked::shim())
    }
    #[cfg(not(tritonrs_trt_shim))]
    {
        None
    }
}

/// Loads a TensorRT 8 shim library and resolves every function of the table.
fn load_shim(path: &Path) -> std::result::Result<(libloading::Library, Shim), String> {
    // SAFETY: loading our own shim runs no initializers beyond its C++ statics (a logger object).
    let lib = unsafe { libloading::Library::new(path) }
        .map_err(|e| format!("cannot load '{}': {}", path.display(), dl_error(&e)))?;
    macro_rules! sym {
        ($name:literal) => {{
            // SAFETY: the shim declares every function with the signature of the field it fills (trt_shim.h).
            let s = unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                .map_err(|e| format!("'{}' lacks {}: {e}", path.display(), $name))?;
            *s
        }};
    }
    let shim = Shim {
        abi_version: sym!("trs_abi_version"),
        header_version: sym!("trs_header_version"),
        logger: sym!("trs_logger"),
        runtime_create: sym!("trs_runtime_create"),
        runtime_destroy: sym!("trs_runtime_destroy"),
        // SAFETY: trt_shim.h declares it with the field's signature; a shim built before it lacks it.
        runtime_set_dla_core: unsafe { lib.get(b"trs_runtime_set_dla_core\0") }.ok().map(|s| *s),
        engine_deserialize: sym!("trs_engine_deserialize"),
        engine_destroy: sym!("trs_engine_destroy"),
        engine_num_io: sym!("trs_engine_num_io"),
        engine_io_name: sym!("trs_engine_io_name"),
        engine_io_flags: sym!("trs_engine_io_flags"),
        engine_io_dtype: sym!("trs_engine_io_dtype"),
        engine_io_shape: sym!("trs_engine_io_shape"),
        engine_num_profiles: sym!("trs_engine_num_profiles"),
        engine_profile_shape: sym!("trs_engine_profile_shape"),
        engine_implicit_batch: sym!("trs_engine_implicit_batch"),
        context_create: sym!("trs_context_create"),
        context_destroy: sym!("trs_context_destroy"),
        context_set_profile: sym!("trs_context_set_profile"),
        context_set_input_shape: sym!("trs_context_set_input_shape"),
        context_tensor_shape: sym!("trs_context_tensor_shape"),
        context_set_address: sym!("trs_context_set_address"),
        context_enqueue: sym!("trs_context_enqueue"),
    };
    Ok((lib, shim))
}

thread_local! {
    /// TensorRT's error messages on this thread since the last [`take_errors`].
    static ERRORS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// TensorRT's log, into ours; errors are also kept for the message of the call that failed.
extern "C" fn log_message(severity: i32, msg: *const c_char) {
    if msg.is_null() {
        return;
    }
    // SAFETY: TensorRT passes a NUL-terminated string valid for the call.
    let text = unsafe { CStr::from_ptr(msg) }.to_string_lossy();
    match severity {
        0 | 1 => {
            tracing::error!("TensorRT: {text}");
            ERRORS.with(|e| {
                let mut e = e.borrow_mut();
                if e.len() < 16 {
                    e.push(text.into_owned());
                }
            });
        }
        2 => tracing::warn!("TensorRT: {text}"),
        3 => tracing::debug!("TensorRT: {text}"),
        _ => tracing::trace!("TensorRT: {text}"),
    }
}

fn take_errors() -> String {
    let e = ERRORS.with(|e| std::mem::take(&mut *e.borrow_mut()));
    if e.is_empty() {
        "TensorRT logged no reason".into()
    } else {
        e.join("; ")
    }
}

fn clear_errors() {
    ERRORS.with(|e| e.borrow_mut().clear());
}

/// The dynamic loader's own words (libloading keeps dlerror's text in the error's source).
fn dl_error(e: &libloading::Error) -> String {
    match std::error::Error::source(e) {
        Some(why) => why.to_string(),
        None => e.to_string(),
    }
}

/// `getInferLibVersion()` as (major, minor, patch): TensorRT 10 encodes major*10000 + minor*100 +
/// patch, TensorRT 8 major*1000 + minor*100 + patch.
pub fn split_version(v: i32) -> (i32, i32, i32) {
    if v >= 10000 {
        (v / 10000, (v / 100) % 100, v % 100)
    } else {
        (v / 1000, (v / 100) % 10, v % 100)
    }
}

/// Where the backend looks for its libraries, from `--backend-config=tensorrt,...`.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// `library=PATH`: libnvinfer itself.
    pub library: Option<PathBuf>,
    /// `shim=PATH`: libtritonrs_trt8.so.
    pub shim: Option<PathBuf>,
    /// `plugins=a.so;b.so`: loaded before any engine is deserialized.
    pub plugins: Vec<PathBuf>,
}

/// The loaded TensorRT: libnvinfer, the shim, plugins, and one IRuntime.
pub struct Nvinfer {
    shim: Shim,
    runtime: *mut RawRuntime,
    version: (i32, i32, i32),
    pools: Option<Pools>,
}

/// Keeps a library loaded for the rest of the process (it is never closed). libnvinfer and its
/// plugin libraries keep pointers to the logger that lives in the TensorRT 8 shim, to plugin creators
/// and to each other, some of them past the runtime's destruction (static destructors at exit log
/// through the logger). Closing them in any order could leave one calling into an unmapped library,
/// so none is closed, as the CUDA driver is not.
fn keep_loaded(lib: libloading::Library) {
    std::mem::forget(lib);
}

// SAFETY: IRuntime::deserializeCudaEngine may be called from several threads (TensorRT documents the
// runtime as thread-safe for deserialization); every other object is owned by one engine or context.
unsafe impl Send for Nvinfer {}
// SAFETY: as above.
unsafe impl Sync for Nvinfer {}

impl Nvinfer {
    /// Loads TensorRT, or says exactly what is missing (UNAVAILABLE).
    pub fn load(opts: &LoadOptions, pools: Option<Pools>) -> Result<Nvinfer> {
        Nvinfer::open(opts, pools).map_err(Error::unavailable)
    }

    /// [`Nvinfer::load`]; the error is the reason.
    fn open(opts: &LoadOptions, pools: Option<Pools>) -> std::result::Result<Nvinfer, String> {
        let nvinfer = open_libnvinfer(opts)?;
        // SAFETY: `getInferLibVersion` is exported with C linkage as `int32_t getInferLibVersion(void)`.
        let get_version: unsafe extern "C" fn() -> i32 = *unsafe { nvinfer.get(b"getInferLibVersion\0") }
            .map_err(|e| format!("libnvinfer has no getInferLibVersion: {e}"))?;
        // SAFETY: `createInferRuntime_INTERNAL(void* logger, int32_t version)`, exported with C linkage.
        let create: CreateRuntimeFn = *unsafe { nvinfer.get(b"createInferRuntime_INTERNAL\0") }
            .map_err(|e| format!("libnvinfer has no createInferRuntime_INTERNAL: {e}"))?;
        // SAFETY: a pure query.
        let raw_version = unsafe { get_version() };
        let version = split_version(raw_version);
        let (major, minor, patch) = version;
        let shim = shim_for(opts, version)?;
        let headers = check_shim(&shim, version)?;
        // SAFETY: installs our callback in the shim's static logger; returns that logger.
        let logger = unsafe { (shim.logger)(log_message) };
        load_plugins(opts, logger, major)?;
        clear_errors();
        // SAFETY: `create` is libnvinfer's entry point; the version is the library's own.
        let runtime = unsafe { (shim.runtime_create)(create, raw_version) };
        if runtime.is_null() {
            return Err(format!("TensorRT {major}.{minor}.{patch} could not create a runtime: {}", take_errors()));
        }
        keep_loaded(nvinfer);
        tracing::info!("TensorRT {major}.{minor}.{patch} loaded (shim built against {}).", headers);
        Ok(Nvinfer { shim, runtime, version, pools })
    }
}

/// libnvinfer: the one --backend-config names, else TensorRT 10's, else TensorRT 8's.
fn open_libnvinfer(opts: &LoadOptions) -> std::result::Result<libloading::Library, String> {
    let candidates: Vec<PathBuf> = match &opts.library {
        Some(p) => vec![p.clone()],
        None => vec!["libnvinfer.so.10".into(), "libnvinfer.so.8".into()],
    };
    let mut why = Vec::new();
    let mut found = None;
    for c in &candidates {
        // SAFETY: loading libnvinfer runs its initializers, which only set up its own state.
        match unsafe { libloading::Library::new(c) } {
            Ok(lib) => {
                found = Some(lib);
                break;
            }
            Err(e) => why.push(dl_error(&e)),
        }
    }
    found.ok_or_else(|| {
        format!(
            "TensorRT is not installed: no libnvinfer could be loaded ({}); install TensorRT (JetPack ships it) \
             or point --backend-config=tensorrt,library=PATH at libnvinfer.so",
            why.join("; ")
        )
    })
}

/// The shim that drives this TensorRT version: the linked one for 10, libtritonrs_trt8.so for 8.2 to 8.6.
fn shim_for(opts: &LoadOptions, version: (i32, i32, i32)) -> std::result::Result<Shim, String> {
    let (major, minor, patch) = version;
    Ok(match major {
        10 => linked_shim().ok_or_else(|| {
            format!(
                "TensorRT {major}.{minor}.{patch} is installed, but this tritonrs was built without its TensorRT 10 shim \
                 (no TensorRT 10 headers at build time)"
            )
        })?,
        8 if minor >= 2 => {
            let path = opts.shim.clone().or_else(find_trt8_shim).ok_or_else(|| {
                format!(
                    "TensorRT {major}.{minor}.{patch} needs libtritonrs_trt8.so, which is not installed: build it on the \
                     device with jetson/build-trt8-shim.sh (or name it with --backend-config=tensorrt,shim=PATH)"
                )
            })?;
            let (lib, shim) = load_shim(&path)?;
            keep_loaded(lib);
            shim
        }
        _ => {
            return Err(format!(
                "TensorRT {major}.{minor}.{patch} is not supported: this server serves TensorRT 8.2 to 8.6 and 10.x"
            ))
        }
    })
}

/// Refuses a shim of another ABI or built for another TensorRT major version; its header version.
fn check_shim(shim: &Shim, version: (i32, i32, i32)) -> std::result::Result<i32, String> {
    let (major, minor, patch) = version;
    // SAFETY: functions of the shim without arguments.
    let (abi, headers) = unsafe { ((shim.abi_version)(), (shim.header_version)()) };
    if abi != ABI_VERSION {
        return Err(format!("the TensorRT shim speaks ABI version {abi}, this server {ABI_VERSION}; rebuild it"));
    }
    let header_major = split_version(headers).0;
    if header_major != major {
        return Err(format!(
            "the TensorRT shim was built for TensorRT {header_major}, but TensorRT {major}.{minor}.{patch} is installed"
        ));
    }
    Ok(headers)
}

/// Loads TensorRT's own plugins, where installed, and the user's (--backend-config plugins).
fn load_plugins(opts: &LoadOptions, logger: *mut c_void, major: i32) -> std::result::Result<(), String> {
    // TensorRT's own plugins, where installed, then the user's (their static initializers register
    // their creators with TensorRT's plugin registry, so they load with RTLD_GLOBAL).
    for name in [format!("libnvinfer_plugin.so.{major}")] {
        // SAFETY: libnvinfer_plugin's initializers only register plugin creators.
        if let Ok(lib) = unsafe { libloading::Library::new(&name) } {
            // SAFETY: `bool initLibNvInferPlugins(void* logger, char const* libNamespace)`, C linkage.
            if let Ok(init) = unsafe {
                lib.get::<unsafe extern "C" fn(*mut c_void, *const c_char) -> bool>(b"initLibNvInferPlugins\0")
            } {
                // SAFETY: the logger lives for the process; "" is the default namespace.
                if !unsafe { init(logger, c"".as_ptr()) } {
                    tracing::warn!("TensorRT: initLibNvInferPlugins failed; engines using its plugins will not load");
                }
            }
            keep_loaded(lib);
        }
    }
    for p in &opts.plugins {
        #[cfg(unix)]
        {
            use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
            // SAFETY: a plugin library's initializers register its creators with TensorRT.
            let lib = unsafe { Library::open(Some(p), RTLD_NOW | RTLD_GLOBAL) }
                .map_err(|e| format!("cannot load TensorRT plugin '{}': {}", p.display(), dl_error(&e)))?;
            keep_loaded(lib.into());
            tracing::info!("TensorRT plugin library '{}' loaded.", p.display());
        }
    }
    Ok(())
}

/// libtritonrs_trt8.so next to the binary, in /usr/lib/tritonrs, or where the loader finds it.
fn find_trt8_shim() -> Option<PathBuf> {
    let name = "libtritonrs_trt8.so";
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(dir) = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf)) {
        dirs.push(dir);
    }
    dirs.extend(["/usr/lib/tritonrs", "/usr/local/lib/tritonrs", "/usr/local/lib", "/usr/lib"].map(PathBuf::from));
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

impl Drop for Nvinfer {
    fn drop(&mut self) {
        // SAFETY: the runtime was created by this shim and every engine holds an Arc to us.
        unsafe { (self.shim.runtime_destroy)(self.runtime) };
    }
}

fn cuda() -> Result<&'static crate::platform::cuda::Driver> {
    crate::platform::cuda::driver().map_err(|why| Error::unavailable(why.to_string()))
}

impl Runtime for Arc<Nvinfer> {
    fn deserialize(&self, device: i32, plan: &[u8]) -> Result<Arc<dyn Engine>> {
        let d = cuda()?;
        let shim = self.shim;
        let raw = d.with_context(device, || {
            clear_errors();
            // SAFETY: `plan` is readable for its length; the runtime is live.
            let e = unsafe { (shim.engine_deserialize)(self.runtime, plan.as_ptr().cast(), plan.len()) };
            if e.is_null() {
                let (a, b, c) = self.version;
                return Err(Error::invalid(format!(
                    "TensorRT {a}.{b}.{c} cannot deserialize the engine (built for another TensorRT version or GPU, or \
                     not an engine): {}",
                    take_errors()
                )));
            }
            Ok(e)
        })?;
        // Dropped (destroying the engine) if describing it fails.
        let mut engine = RealEngine { rt: self.clone(), raw, device, desc: EngineDesc::default() };
        engine.desc = engine.describe()?;
        Ok(Arc::new(engine))
    }

    fn deserialize_dla(&self, device: i32, dla_core: i32, plan: &[u8]) -> Result<Arc<dyn Engine>> {
        // The runtime's DLA core is one setting shared by every deserialization: one DLA engine at a time.
        static DLA: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
        let set = self.shim.runtime_set_dla_core.ok_or_else(|| {
            Error::unavailable("this TensorRT shim cannot select a DLA core; rebuild it from src/backend/tensorrt/shim")
        })?;
        let _one = DLA.lock();
        // SAFETY: the runtime is live; the shim checks the core against getNbDLACores.
        if unsafe { set(self.runtime, dla_core) } != 0 {
            return Err(Error::unavailable(format!(
                "DLA core {dla_core} does not exist on this device (secondary_devices KIND_NVDLA)"
            )));
        }
        let engine = self.deserialize(device, plan);
        // SAFETY: as above; back to TensorRT's default core for the engines deserialized next.
        unsafe { set(self.runtime, 0) };
        engine
    }
}

/// Dims a shim function writes into a MAX_DIMS buffer, returning their count (or -1).
fn read_dims(f: impl FnOnce(*mut i64) -> i32) -> Option<Vec<i64>> {
    let mut buf = [0i64; MAX_DIMS];
    let n = f(buf.as_mut_ptr());
    usize::try_from(n).ok().filter(|&n| n <= MAX_DIMS).map(|n| buf[..n].to_vec())
}

struct RealEngine {
    rt: Arc<Nvinfer>,
    raw: *mut RawEngine,
    device: i32,
    desc: EngineDesc,
}

// SAFETY: an ICudaEngine may create execution contexts from any thread; it is not mutated otherwise.
unsafe impl Send for RealEngine {}
// SAFETY: as above.
unsafe impl Sync for RealEngine {}

impl RealEngine {
    fn describe(&self) -> Result<EngineDesc> {
        let s = self.rt.shim;
        // SAFETY: the engine is live (it is freed only on drop); argument-less queries of it.
        let n = unsafe { (s.engine_num_io)(self.raw) };
        // SAFETY: as above.
        let profiles = unsafe { (s.engine_num_profiles)(self.raw) }.max(1);
        // SAFETY: as above.
        let implicit_batch = unsafe { (s.engine_implicit_batch)(self.raw) } != 0;
        let mut desc = EngineDesc { implicit_batch, ..Default::default() };
        for i in 0..n {
            // SAFETY: live engine, `i` in 0..num_io; returns a pointer the engine owns, or null.
            let name = unsafe { (s.engine_io_name)(self.raw, i) };
            if name.is_null() {
                return Err(Error::internal(format!("the engine's I/O tensor {i} has no name")));
            }
            // SAFETY: the engine owns the name for its lifetime.
            let name = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
            // SAFETY: live engine, `i` in 0..num_io.
            let flags = unsafe { (s.engine_io_flags)(self.raw, i) };
            // SAFETY: as above; `read_dims` hands a MAX_DIMS buffer and the shim writes at most that.
            let shape = read_dims(|p| unsafe { (s.engine_io_shape)(self.raw, i, p) })
                .ok_or_else(|| Error::internal(format!("the engine's tensor '{name}' has no shape")))?;
            desc.io.push(IoDesc {
                name,
                input: flags & IO_INPUT != 0,
                // SAFETY: live engine, `i` in 0..num_io.
                trt_dtype: unsafe { (s.engine_io_dtype)(self.raw, i) },
                dims: shape,
                shape_tensor: flags & IO_SHAPE_TENSOR != 0,
                host: flags & IO_HOST != 0,
                not_linear: flags & IO_NOT_LINEAR != 0,
            });
        }
        for p in 0..profiles {
            let mut ranges = Vec::new();
            for (i, t) in desc.io.iter().enumerate() {
                let i = i as i32;
                // SAFETY: live engine, `i` in 0..num_io, `p` in 0..num_profiles, `which` 0-2 (min, opt,
                // max); `read_dims` hands a MAX_DIMS buffer and the shim writes at most that.
                let get = |which| read_dims(|ptr| unsafe { (s.engine_profile_shape)(self.raw, i, p, which, ptr) });
                ranges.push(if t.input {
                    match (get(0), get(1), get(2)) {
                        (Some(min), Some(opt), Some(max)) if !min.is_empty() => Some(Range { min, opt, max }),
                        _ => None,
                    }
                } else {
                    None
                });
            }
            desc.profiles.push(ranges);
        }
        Ok(desc)
    }
}

impl Drop for RealEngine {
    fn drop(&mut self) {
        let s = self.rt.shim;
        let raw = self.raw;
        if let Ok(d) = cuda() {
            let _ = d.with_context(self.device, || {
                // SAFETY: the engine is destroyed once, after its contexts (they hold an Arc to it).
                unsafe { (s.engine_destroy)(raw) };
                Ok(())
            });
        }
    }
}

impl Engine for RealEngine {
    fn desc(&self) -> &EngineDesc {
        &self.desc
    }

    fn create_context(self: Arc<Self>, device: i32) -> Result<Box<dyn Context>> {
        let d = cuda()?;
        let s = self.rt.shim;
        let raw = d.with_context(device, || {
            clear_errors();
            // SAFETY: the engine is live.
            let c = unsafe { (s.context_create)(self.raw) };
            if c.is_null() {
                return Err(Error::unavailable(format!(
                    "TensorRT cannot create an execution context: {}",
                    take_errors()
                )));
            }
            Ok(c)
        })?;
        let stream = match d.stream_create(device) {
            Ok(s) => s,
            Err(e) => {
                let _ = d.with_context(device, || {
                    // SAFETY: destroys the context just created, which nothing else holds.
                    unsafe { (s.context_destroy)(raw) };
                    Ok(())
                });
                return Err(e);
            }
        };
        // Mapped I/O only where the device is I/O-coherent and the pinned pool's blocks are mapped
        // (the pool decides DEVICEMAP once, for the first GPU; a second, different GPU gets copies).
        let gpu = d.gpus.iter().find(|g| g.index == device);
        let pools = self.rt.pools.clone();
        let mapped = gpu.is_some_and(|g| g.pinned_strategy() == crate::platform::cuda::PinnedStrategy::Mapped)
            && pools.as_ref().is_some_and(|p| p.pinned.mapped());
        let readback = if gpu.is_none_or(|g| g.cpu_caches_pinned()) { Readback::Pinned } else { Readback::Pageable };
        Ok(Box::new(RealContext { engine: self, raw, stream, device, mapped, readback, pools, profile: None }))
    }
}

struct RealContext {
    engine: Arc<RealEngine>,
    raw: *mut RawContext,
    stream: usize,
    device: i32,
    /// I/O in mapped pinned memory (Xavier, Orin), else device memory with copies.
    mapped: bool,
    readback: Readback,
    pools: Option<Pools>,
    /// The profile selected on the context, once TensorRT accepted it.
    profile: Option<usize>,
}

// SAFETY: an execution context is used by one instance thread at a time (`&mut self`).
unsafe impl Send for RealContext {}

impl Drop for RealContext {
    fn drop(&mut self) {
        if let Ok(d) = cuda() {
            let (s, raw) = (self.engine.rt.shim, self.raw);
            let _ = d.with_context(self.device, || {
                // SAFETY: the context is destroyed once, before its engine (it holds the Arc). No run
                // is in flight: `run` synchronizes the stream before it returns, on every path.
                unsafe { (s.context_destroy)(raw) };
                Ok(())
            });
            d.stream_destroy(self.device, self.stream);
        }
    }
}

/// The real [`Stream`]: the shim's context calls and the driver's stream calls, made while the
/// device's context is current (`RealContext::run` holds it for the whole run).
struct RealStream<'a> {
    d: &'a crate::platform::cuda::Driver,
    shim: Shim,
    raw: *mut RawContext,
    stream: usize,
    desc: &'a EngineDesc,
}

impl RealStream<'_> {
    fn fail(what: &str) -> Error {
        Error::internal(format!("TensorRT {what} failed: {}", take_errors()))
    }
}

impl Stream for RealStream<'_> {
    fn set_profile(&mut self, profile: usize) -> Result<()> {
        let p = i32::try_from(profile).map_err(|_| Error::internal("profile index out of range"))?;
        // SAFETY: live context and stream; `select_profile` chose the index among the engine's
        // profiles. TensorRT may queue copies on the stream: `run` synchronizes before returning.
        if unsafe { (self.shim.context_set_profile)(self.raw, p, self.stream as *mut c_void) } == 0 {
            return Err(Self::fail("setOptimizationProfileAsync"));
        }
        Ok(())
    }

    fn set_input_shape(&mut self, io: usize, shape: &[i64]) -> Result<()> {
        if shape.len() > MAX_DIMS {
            return Err(Error::invalid(format!("shape {shape:?} has more than {MAX_DIMS} dimensions")));
        }
        // SAFETY: `shape` is readable for `shape.len()` (<= MAX_DIMS) dims; `io` indexes the engine's
        // I/O tensors (from `EngineDesc::index`); the context is live.
        if unsafe { (self.shim.context_set_input_shape)(self.raw, io as i32, shape.as_ptr(), shape.len() as i32) } == 0
        {
            let name = self.desc.io.get(io).map_or("?", |t| t.name.as_str());
            return Err(Error::invalid(format!(
                "TensorRT refused shape {shape:?} for input '{name}': {}",
                take_errors()
            )));
        }
        Ok(())
    }

    fn tensor_shape(&mut self, io: usize) -> Result<Vec<i64>> {
        // SAFETY: `read_dims` hands a buffer of MAX_DIMS dims, the shim writes at most that many;
        // the context is live and `io` one of its tensors.
        read_dims(|p| unsafe { (self.shim.context_tensor_shape)(self.raw, io as i32, p) })
            .ok_or_else(|| Self::fail("getTensorShape"))
    }

    fn mapped_pointer(&mut self, host: usize) -> Result<u64> {
        self.d.mapped_device_pointer(host as *mut u8)
    }

    fn set_address(&mut self, io: usize, ptr: u64) -> Result<()> {
        // SAFETY: `ptr` addresses device-visible memory of the tensor's size that `run`'s guard keeps
        // allocated until the stream is synchronized; the context is live.
        if unsafe { (self.shim.context_set_address)(self.raw, io as i32, ptr as *mut c_void) } == 0 {
            return Err(Self::fail("setTensorAddress"));
        }
        Ok(())
    }

    fn copy_in(&mut self, dst: u64, src: &[u8]) -> Result<()> {
        // The guard keeps `src` and the block at `dst` until the stream is synchronized.
        self.d.copy_from_host_async(dst, src, self.stream)
    }

    fn copy_out(&mut self, dst: &mut [u8], src: u64) -> Result<()> {
        // The guard keeps `dst` and the block at `src` until the stream is synchronized.
        self.d.copy_to_host_async(dst, src, self.stream)
    }

    fn enqueue(&mut self) -> Result<()> {
        // SAFETY: every I/O tensor has an address (set above) that stays allocated until the stream
        // is synchronized; the context and stream are live.
        if unsafe { (self.shim.context_enqueue)(self.raw, self.stream as *mut c_void) } == 0 {
            return Err(Self::fail("enqueue"));
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        self.d.stream_sync(self.stream)
    }
}

/// `TRITONRS_TRT_FAULT`, read once (see [`Faults`]); an invalid value is logged and ignored.
fn faults() -> &'static Faults {
    static FAULTS: OnceLock<Faults> = OnceLock::new();
    FAULTS.get_or_init(|| {
        let spec = std::env::var("TRITONRS_TRT_FAULT").unwrap_or_default();
        match Faults::parse(&spec) {
            Ok(f) => {
                if !f.is_empty() {
                    tracing::warn!("TRITONRS_TRT_FAULT={spec}: TensorRT runs will fail on purpose (a self-test hook).");
                }
                f
            }
            Err(e) => {
                tracing::error!("TRITONRS_TRT_FAULT={spec} is ignored: {e}");
                Faults::default()
            }
        }
    })
}

impl Context for RealContext {
    fn run(&mut self, profile: usize, inputs: &[RunInput<'_>], outputs: &[usize]) -> Result<Vec<RunOutput>> {
        let d = cuda()?;
        let engine = self.engine.clone();
        let pools = self.pools.as_ref().ok_or_else(|| Error::internal("the TensorRT backend has no memory pools"))?;
        let memory = Memory { pools, device: self.device, mapped: self.mapped, readback: self.readback };
        let current = &mut self.profile;
        let mut stream = RealStream { d, shim: engine.rt.shim, raw: self.raw, stream: self.stream, desc: &engine.desc };
        let faults = faults();
        d.with_context(self.device, || {
            clear_errors();
            if faults.is_empty() {
                run::run(&mut stream, &memory, &engine.desc, current, profile, inputs, outputs)
            } else {
                let mut faulty = Faulty { inner: &mut stream, faults };
                run::run(&mut faulty, &memory, &engine.desc, current, profile, inputs, outputs)
            }
        })
    }

    fn select_profile(&mut self, profile: usize) -> Result<()> {
        let d = cuda()?;
        let engine = self.engine.clone();
        let current = &mut self.profile;
        let mut stream = RealStream { d, shim: engine.rt.shim, raw: self.raw, stream: self.stream, desc: &engine.desc };
        d.with_context(self.device, || {
            clear_errors();
            run::select(&mut stream, current, profile)
        })
    }
}

#[cfg(test)]
mod tests;
