//! The CUDA driver API, loaded at run time (`libcuda.so.1`): our own table of the few entry points the
//! server uses, each resolved on its own, so a missing library or an old driver (the Nano's CUDA 10.2)
//! is a clear error for the feature that needs it, never a panic.
//!
//! Entry points, with the CUDA version that introduced each (the `_v2` names are the ABI the headers
//! map the plain names to since CUDA 3.2/4.0/11.0):
//!
//! | entry point                     | CUDA | used for                                   |
//! |---------------------------------|------|--------------------------------------------|
//! | `cuInit`                        | 2.0  | start-up                                   |
//! | `cuDriverGetVersion`            | 2.2  | the driver's CUDA version                  |
//! | `cuDeviceGetCount`, `cuDeviceGet`, `cuDeviceGetName`, `cuDeviceGetAttribute` | 2.0 | enumeration |
//! | `cuDeviceTotalMem_v2`           | 3.2  | device memory size                         |
//! | `cuDeviceGetUuid`               | 9.2  | `gpu_uuid` labels (optional)               |
//! | `cuDevicePrimaryCtxRetain`      | 7.0  | a context per device                       |
//! | `cuCtxPushCurrent_v2`, `cuCtxPopCurrent_v2` | 4.0 | making it current for a call       |
//! | `cuMemAlloc_v2`, `cuMemFree_v2` | 3.2  | the device memory pools                    |
//! | `cuMemHostAlloc`                | 2.2  | the pinned pool (DEVICEMAP on Xavier/Orin) |
//! | `cuMemFreeHost`                 | 2.0  | the pinned pool                            |
//! | `cuMemcpyHtoD_v2`, `cuMemcpyDtoH_v2` | 3.2 | copies to and from device memory      |
//! | `cuIpcOpenMemHandle_v2` / `cuIpcOpenMemHandle` | 11.0 / 4.1 | CUDA shared memory        |
//! | `cuIpcCloseMemHandle`           | 4.1  | CUDA shared memory                         |
//! | `cuGetErrorString`              | 6.0  | error messages (optional)                  |
//! | `cuStreamCreate`, `cuStreamSynchronize` | 2.0 | a stream per TensorRT instance      |
//! | `cuStreamDestroy_v2`            | 4.0  | TensorRT instances                         |
//! | `cuMemHostGetDevicePointer_v2`  | 3.2  | mapped pinned memory as TensorRT I/O       |
//! | `cuMemcpyHtoDAsync_v2`, `cuMemcpyDtoHAsync_v2` | 3.2 | TensorRT I/O copies on its stream |
//!
//! The contract every unsafe call in this file relies on, for a reviewer without a GPU:
//! - each field of [`Api`] has the C signature cuda.h gives the entry point named in the table
//!   (`CUdeviceptr` is 64 bits on every 64-bit platform since CUDA 3.2, so it is `u64`;
//!   `CUipcMemHandle` is a 64-byte struct passed by value; `CUstream`/`CUcontext` are pointers);
//! - the library is never unloaded: the [`Driver`] lives in a process-wide `OnceLock`;
//! - every call that needs a context (allocations, frees, copies, streams, IPC, mapped pointers) runs
//!   inside [`Driver::with_context`], which pushes the device's primary context on this thread and
//!   pops it after; the async stream calls are documented as made by a caller that already holds it;
//! - out pointers are writable locals; memory handed to an async copy stays allocated and unchanged
//!   until the stream is synchronized (the caller's contract, kept by `backend::tensorrt::run`);
//! - a `CUresult` other than 0 becomes an error naming the call ([`Driver::check`]); the few calls
//!   whose failure cannot be acted on (pop, frees in `Drop`) log or ignore it and say so.
#![allow(unsafe_code)]

use crate::error::{Error, Result};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::OnceLock;

type CuResult = c_int;
type CuDevice = c_int;
type CuContext = *mut c_void;
type CuDevicePtr = u64;

/// `CUipcMemHandle`: passed by value, so it must be a C struct, not a bare array.
#[repr(C)]
#[derive(Clone, Copy)]
struct CuIpcMemHandle {
    reserved: [u8; 64],
}

/// `CUdevice_attribute` values (cuda.h).
mod attr {
    pub const INTEGRATED: i32 = 18;
    pub const CAN_MAP_HOST_MEMORY: i32 = 19;
    pub const UNIFIED_ADDRESSING: i32 = 41;
    pub const COMPUTE_CAPABILITY_MAJOR: i32 = 75;
    pub const COMPUTE_CAPABILITY_MINOR: i32 = 76;
}

/// `cuMemHostAlloc` flags.
const CU_MEMHOSTALLOC_PORTABLE: c_uint = 0x01;
const CU_MEMHOSTALLOC_DEVICEMAP: c_uint = 0x02;
/// `cuIpcOpenMemHandle` flag.
const CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS: c_uint = 0x1;

/// The resolved entry points; `None` where the driver lacks one.
#[allow(non_snake_case)]
struct Api {
    cuInit: unsafe extern "C" fn(c_uint) -> CuResult,
    cuDriverGetVersion: unsafe extern "C" fn(*mut c_int) -> CuResult,
    cuDeviceGetCount: unsafe extern "C" fn(*mut c_int) -> CuResult,
    cuDeviceGet: unsafe extern "C" fn(*mut CuDevice, c_int) -> CuResult,
    cuDeviceGetName: unsafe extern "C" fn(*mut c_char, c_int, CuDevice) -> CuResult,
    cuDeviceGetAttribute: unsafe extern "C" fn(*mut c_int, c_int, CuDevice) -> CuResult,
    cuDeviceTotalMem: unsafe extern "C" fn(*mut usize, CuDevice) -> CuResult,
    cuDeviceGetUuid: Option<unsafe extern "C" fn(*mut [u8; 16], CuDevice) -> CuResult>,
    cuDevicePrimaryCtxRetain: Option<unsafe extern "C" fn(*mut CuContext, CuDevice) -> CuResult>,
    cuCtxPushCurrent: Option<unsafe extern "C" fn(CuContext) -> CuResult>,
    cuCtxPopCurrent: Option<unsafe extern "C" fn(*mut CuContext) -> CuResult>,
    cuMemAlloc: Option<unsafe extern "C" fn(*mut CuDevicePtr, usize) -> CuResult>,
    cuMemFree: Option<unsafe extern "C" fn(CuDevicePtr) -> CuResult>,
    cuMemHostAlloc: Option<unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> CuResult>,
    cuMemFreeHost: Option<unsafe extern "C" fn(*mut c_void) -> CuResult>,
    cuMemcpyHtoD: Option<unsafe extern "C" fn(CuDevicePtr, *const c_void, usize) -> CuResult>,
    cuMemcpyDtoH: Option<unsafe extern "C" fn(*mut c_void, CuDevicePtr, usize) -> CuResult>,
    cuIpcOpenMemHandle: Option<unsafe extern "C" fn(*mut CuDevicePtr, CuIpcMemHandle, c_uint) -> CuResult>,
    cuIpcCloseMemHandle: Option<unsafe extern "C" fn(CuDevicePtr) -> CuResult>,
    cuGetErrorString: Option<unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult>,
    cuStreamCreate: Option<unsafe extern "C" fn(*mut *mut c_void, c_uint) -> CuResult>,
    cuStreamDestroy: Option<unsafe extern "C" fn(*mut c_void) -> CuResult>,
    cuStreamSynchronize: Option<unsafe extern "C" fn(*mut c_void) -> CuResult>,
    cuMemHostGetDevicePointer: Option<unsafe extern "C" fn(*mut CuDevicePtr, *mut c_void, c_uint) -> CuResult>,
    cuMemcpyHtoDAsync: Option<unsafe extern "C" fn(CuDevicePtr, *const c_void, usize, *mut c_void) -> CuResult>,
    cuMemcpyDtoHAsync: Option<unsafe extern "C" fn(*mut c_void, CuDevicePtr, usize, *mut c_void) -> CuResult>,
}

/// One GPU as the driver describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpu {
    pub index: i32,
    pub name: String,
    /// `GPU-xxxxxxxx-xxxx-...`, as nvidia-smi and Triton's metrics show it (empty if the driver has no
    /// `cuDeviceGetUuid`).
    pub uuid: String,
    /// (major, minor).
    pub compute_capability: (i32, i32),
    pub total_memory: u64,
    /// An integrated GPU (Jetson) shares the DRAM with the CPU.
    pub integrated: bool,
    pub can_map_host_memory: bool,
    pub unified_addressing: bool,
}

impl Gpu {
    /// The compute capability as a number (5.3, 7.2, 8.7), for `--min-supported-compute-capability`.
    pub fn capability(&self) -> f64 {
        self.compute_capability.0 as f64 + self.compute_capability.1 as f64 / 10.0
    }

    /// Whether the CPU caches are coherent with the GPU's accesses to pinned memory (I/O coherence):
    /// Xavier (7.2) and Orin (8.7) have it, the Nano (5.3) and TX2 (6.2) do not (CUDA for Tegra app
    /// note, "I/O Coherency"). Mapped pinned memory is then shared by CPU and GPU without copies; without
    /// it, mapped memory is uncached for the CPU, so pinned memory plus copies is faster.
    pub fn io_coherent(&self) -> bool {
        self.integrated && self.compute_capability >= (7, 2)
    }

    /// Whether the CPU reads page-locked memory at full speed: everywhere but on integrated GPUs
    /// without I/O coherence (Nano, TX2), where page-locked memory is mapped uncached for the CPU
    /// (CUDA for Tegra, "Memory Management"), so outputs the CPU reads go to pageable memory there.
    pub fn cpu_caches_pinned(&self) -> bool {
        !self.integrated || self.io_coherent()
    }

    /// How the pinned pool should allocate for this GPU.
    pub fn pinned_strategy(&self) -> PinnedStrategy {
        if self.io_coherent() && self.can_map_host_memory {
            PinnedStrategy::Mapped
        } else {
            PinnedStrategy::Copy
        }
    }
}

/// How host memory is shared with a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinnedStrategy {
    /// `cuMemHostAlloc(DEVICEMAP)`: one buffer the CPU and GPU both address (Xavier, Orin).
    Mapped,
    /// Page-locked host memory, copied to and from device memory (discrete GPUs, the Nano).
    Copy,
}

/// The loaded driver.
pub struct Driver {
    api: Api,
    /// The driver's CUDA version, e.g. 12040 for 12.4.
    pub version: i32,
    pub gpus: Vec<Gpu>,
    /// The primary context of each device used so far (device, context address), retained once.
    contexts: parking_lot::Mutex<Vec<(i32, usize)>>,
    /// Keeps the library mapped for as long as the table is used (the whole process).
    _lib: libloading::Library,
}

/// The process-wide driver, loaded on first use; an `Err` says why there is none.
pub fn driver() -> std::result::Result<&'static Driver, &'static str> {
    static DRIVER: OnceLock<std::result::Result<Driver, String>> = OnceLock::new();
    DRIVER.get_or_init(load).as_ref().map_err(String::as_str)
}

/// `--min-supported-compute-capability` as f64 bits (tritonserver's default 6.0; the Nano is 5.3).
static MIN_COMPUTE_CAPABILITY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0x4018_0000_0000_0000);

/// Sets `--min-supported-compute-capability` (once, at start-up).
pub fn set_min_compute_capability(v: f64) {
    MIN_COMPUTE_CAPABILITY.store(v.to_bits(), std::sync::atomic::Ordering::Relaxed);
}

pub fn min_compute_capability() -> f64 {
    f64::from_bits(MIN_COMPUTE_CAPABILITY.load(std::sync::atomic::Ordering::Relaxed))
}

/// The GPUs the server may use: those at or above `--min-supported-compute-capability`.
pub fn usable_gpus() -> Vec<Gpu> {
    let min = min_compute_capability();
    driver().map(|d| d.gpus.iter().filter(|g| g.capability() + 1e-9 >= min).cloned().collect()).unwrap_or_default()
}

/// GPU `index`, when the server may use it; otherwise why not (for a KIND_GPU instance's reason).
pub fn check_gpu(index: i32) -> Result<Gpu> {
    let d = driver().map_err(|why| Error::unavailable(why.to_string()))?;
    let gpu = d.gpus.iter().find(|g| g.index == index).ok_or_else(|| {
        Error::unavailable(format!("GPU {index} does not exist; this machine has {} GPU(s)", d.gpus.len()))
    })?;
    let min = min_compute_capability();
    if gpu.capability() + 1e-9 < min {
        return Err(Error::unavailable(format!(
            "GPU {index} ({}) has compute capability {}.{}, below --min-supported-compute-capability {min} (set it \
             to {}.{} to use this GPU)",
            gpu.name,
            gpu.compute_capability.0,
            gpu.compute_capability.1,
            gpu.compute_capability.0,
            gpu.compute_capability.1
        )));
    }
    Ok(gpu.clone())
}

/// Why CUDA cannot be used, or `None` when it can.
pub fn unavailable_reason() -> Option<String> {
    driver().err().map(str::to_string)
}

fn load() -> std::result::Result<Driver, String> {
    let mut why = Vec::new();
    for name in ["libcuda.so.1", "libcuda.so"] {
        // SAFETY: loading the CUDA driver runs its initializers; it is the system's driver library,
        // found by the dynamic loader's usual rules.
        match unsafe { libloading::Library::new(name) } {
            Ok(lib) => return Driver::from_library(lib),
            Err(e) => why.push(match std::error::Error::source(&e) {
                Some(s) => s.to_string(),
                None => e.to_string(),
            }),
        }
    }
    Err(format!("no CUDA driver could be loaded ({})", why.join("; ")))
}

/// Resolves a required symbol.
macro_rules! required {
    ($lib:expr, $($name:literal)|+) => {{
        let mut found = None;
        $(
            if found.is_none() {
                // SAFETY: the symbol is declared with the signature cuda.h gives it (the field's type).
                found = unsafe { $lib.get(concat!($name, "\0").as_bytes()) }.ok().map(|s: libloading::Symbol<_>| *s);
            }
        )+
        found.ok_or_else(|| format!("the CUDA driver lacks {}", [$($name),+].join(" / ")))?
    }};
}

/// Resolves an optional symbol: the first name the driver has.
macro_rules! optional {
    ($lib:expr, $($name:literal)|+) => {{
        let mut found = None;
        $(
            if found.is_none() {
                // SAFETY: as in `required!`.
                found = unsafe { $lib.get(concat!($name, "\0").as_bytes()) }.ok().map(|s: libloading::Symbol<_>| *s);
            }
        )+
        found
    }};
}

impl Driver {
    fn from_library(lib: libloading::Library) -> std::result::Result<Driver, String> {
        let api = Api {
            cuInit: required!(lib, "cuInit"),
            cuDriverGetVersion: required!(lib, "cuDriverGetVersion"),
            cuDeviceGetCount: required!(lib, "cuDeviceGetCount"),
            cuDeviceGet: required!(lib, "cuDeviceGet"),
            cuDeviceGetName: required!(lib, "cuDeviceGetName"),
            cuDeviceGetAttribute: required!(lib, "cuDeviceGetAttribute"),
            cuDeviceTotalMem: required!(lib, "cuDeviceTotalMem_v2"),
            cuDeviceGetUuid: optional!(lib, "cuDeviceGetUuid_v2" | "cuDeviceGetUuid"),
            cuDevicePrimaryCtxRetain: optional!(lib, "cuDevicePrimaryCtxRetain"),
            cuCtxPushCurrent: optional!(lib, "cuCtxPushCurrent_v2"),
            cuCtxPopCurrent: optional!(lib, "cuCtxPopCurrent_v2"),
            cuMemAlloc: optional!(lib, "cuMemAlloc_v2"),
            cuMemFree: optional!(lib, "cuMemFree_v2"),
            cuMemHostAlloc: optional!(lib, "cuMemHostAlloc"),
            cuMemFreeHost: optional!(lib, "cuMemFreeHost"),
            cuMemcpyHtoD: optional!(lib, "cuMemcpyHtoD_v2"),
            cuMemcpyDtoH: optional!(lib, "cuMemcpyDtoH_v2"),
            cuIpcOpenMemHandle: optional!(lib, "cuIpcOpenMemHandle_v2" | "cuIpcOpenMemHandle"),
            cuIpcCloseMemHandle: optional!(lib, "cuIpcCloseMemHandle"),
            cuGetErrorString: optional!(lib, "cuGetErrorString"),
            cuStreamCreate: optional!(lib, "cuStreamCreate"),
            cuStreamDestroy: optional!(lib, "cuStreamDestroy_v2"),
            cuStreamSynchronize: optional!(lib, "cuStreamSynchronize"),
            cuMemHostGetDevicePointer: optional!(lib, "cuMemHostGetDevicePointer_v2"),
            cuMemcpyHtoDAsync: optional!(lib, "cuMemcpyHtoDAsync_v2"),
            cuMemcpyDtoHAsync: optional!(lib, "cuMemcpyDtoHAsync_v2"),
        };
        let mut d = Driver { api, version: 0, gpus: Vec::new(), contexts: Default::default(), _lib: lib };
        // SAFETY: `cuInit(unsigned int Flags)`; Flags must be 0. Needs no context; safe to call twice.
        d.check(unsafe { (d.api.cuInit)(0) }, "cuInit").map_err(|e| e.message)?;
        let mut version = 0;
        // SAFETY: `cuDriverGetVersion(int*)`: `version` is a valid, writable local; needs no context.
        d.check(unsafe { (d.api.cuDriverGetVersion)(&mut version) }, "cuDriverGetVersion").map_err(|e| e.message)?;
        d.version = version;
        let mut count = 0;
        // SAFETY: `cuDeviceGetCount(int*)`: `count` is a valid, writable local; called after cuInit.
        d.check(unsafe { (d.api.cuDeviceGetCount)(&mut count) }, "cuDeviceGetCount").map_err(|e| e.message)?;
        for index in 0..count {
            d.gpus.push(d.describe(index).map_err(|e| e.message)?);
        }
        Ok(d)
    }

    /// The driver's CUDA version as text ("12.4").
    pub fn version_string(&self) -> String {
        format!("{}.{}", self.version / 1000, (self.version % 1000) / 10)
    }

    /// Turns a `CUresult` into a result naming the call and the driver's description of the error.
    fn check(&self, code: CuResult, call: &str) -> Result<()> {
        if code == 0 {
            return Ok(());
        }
        let mut text: *const c_char = std::ptr::null();
        let described = self.api.cuGetErrorString.is_some_and(|f| {
            // SAFETY: `text` is a valid out pointer; the driver returns a static string or an error.
            unsafe { f(code, &mut text) == 0 && !text.is_null() }
        });
        let what = if described {
            // SAFETY: the driver returned a static NUL-terminated string (checked non-null above).
            unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
        } else {
            format!("CUDA error {code}")
        };
        Err(Error::unavailable(format!("{call} failed: {what}")))
    }

    fn missing(&self, name: &str, since: &str) -> Error {
        Error::unavailable(format!(
            "the CUDA driver ({}) lacks {name}, which needs CUDA {since} or newer",
            self.version_string()
        ))
    }

    fn describe(&self, index: i32) -> Result<Gpu> {
        let mut dev: CuDevice = 0;
        // SAFETY: valid out pointer; `index` is below the device count.
        self.check(unsafe { (self.api.cuDeviceGet)(&mut dev, index) }, "cuDeviceGet")?;
        let mut name = [0 as c_char; 256];
        // SAFETY: the buffer holds 256 bytes, as passed; the driver NUL-terminates within it.
        self.check(unsafe { (self.api.cuDeviceGetName)(name.as_mut_ptr(), 256, dev) }, "cuDeviceGetName")?;
        // SAFETY: NUL-terminated by the driver inside the buffer (the last byte stays 0 otherwise).
        let name = unsafe { CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned();
        let attribute = |a: i32| -> Result<i32> {
            let mut v = 0;
            // SAFETY: valid out pointer and device handle.
            self.check(unsafe { (self.api.cuDeviceGetAttribute)(&mut v, a, dev) }, "cuDeviceGetAttribute")?;
            Ok(v)
        };
        let mut total = 0usize;
        // SAFETY: valid out pointer and device handle.
        self.check(unsafe { (self.api.cuDeviceTotalMem)(&mut total, dev) }, "cuDeviceTotalMem")?;
        let uuid = match self.api.cuDeviceGetUuid {
            Some(f) => {
                let mut raw = [0u8; 16];
                // SAFETY: `raw` is the 16-byte CUuuid the call fills.
                if unsafe { f(&mut raw, dev) } == 0 {
                    format_uuid(&raw)
                } else {
                    String::new()
                }
            }
            None => String::new(),
        };
        Ok(Gpu {
            index,
            name,
            uuid,
            compute_capability: (
                attribute(attr::COMPUTE_CAPABILITY_MAJOR)?,
                attribute(attr::COMPUTE_CAPABILITY_MINOR)?,
            ),
            total_memory: total as u64,
            integrated: attribute(attr::INTEGRATED)? != 0,
            can_map_host_memory: attribute(attr::CAN_MAP_HOST_MEMORY)? != 0,
            unified_addressing: attribute(attr::UNIFIED_ADDRESSING)? != 0,
        })
    }

    /// Runs `f` with device `index`'s primary context current on this thread (the CUDA runtime inside
    /// libraries such as TensorRT then uses that context too).
    pub fn with_context<T>(&self, index: i32, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let retain =
            self.api.cuDevicePrimaryCtxRetain.ok_or_else(|| self.missing("cuDevicePrimaryCtxRetain", "7.0"))?;
        let push = self.api.cuCtxPushCurrent.ok_or_else(|| self.missing("cuCtxPushCurrent_v2", "4.0"))?;
        let pop = self.api.cuCtxPopCurrent.ok_or_else(|| self.missing("cuCtxPopCurrent_v2", "4.0"))?;
        if !self.gpus.iter().any(|g| g.index == index) {
            return Err(Error::invalid(format!(
                "GPU {index} does not exist; this machine has {} GPU(s)",
                self.gpus.len()
            )));
        }
        let ctx = {
            let mut contexts = self.contexts.lock();
            match contexts.iter().find(|(d, _)| *d == index) {
                Some(&(_, c)) => c as CuContext,
                None => {
                    let mut dev: CuDevice = 0;
                    // SAFETY: valid out pointer; `index` names an enumerated device.
                    self.check(unsafe { (self.api.cuDeviceGet)(&mut dev, index) }, "cuDeviceGet")?;
                    let mut ctx: CuContext = std::ptr::null_mut();
                    // SAFETY: valid out pointer. The primary context is retained once per device and
                    // never released: it lives for the process, as the ONNX Runtime CUDA provider's does.
                    self.check(unsafe { retain(&mut ctx, dev) }, "cuDevicePrimaryCtxRetain")?;
                    contexts.push((index, ctx as usize));
                    ctx
                }
            }
        };
        // SAFETY: `ctx` is the context just retained.
        self.check(unsafe { push(ctx) }, "cuCtxPushCurrent")?;
        let out = f();
        let mut popped: CuContext = std::ptr::null_mut();
        // SAFETY: pops the context pushed above on this same thread.
        let _ = unsafe { pop(&mut popped) };
        out
    }

    /// Page-locked host memory; mapped into the GPU's address space with `mapped`.
    pub fn host_alloc(&self, device: i32, len: usize, mapped: bool) -> Result<*mut u8> {
        let alloc = self.api.cuMemHostAlloc.ok_or_else(|| self.missing("cuMemHostAlloc", "2.2"))?;
        let flags = CU_MEMHOSTALLOC_PORTABLE | if mapped { CU_MEMHOSTALLOC_DEVICEMAP } else { 0 };
        self.with_context(device, || {
            let mut p: *mut c_void = std::ptr::null_mut();
            // SAFETY: valid out pointer; the context is current.
            self.check(unsafe { alloc(&mut p, len.max(1), flags) }, "cuMemHostAlloc")?;
            Ok(p.cast())
        })
    }

    /// Frees memory from [`Driver::host_alloc`] on `device`, with that device's context current (as
    /// every driver call here is: without a current context `cuMemFreeHost` fails with
    /// CUDA_ERROR_INVALID_CONTEXT and the memory stays locked). A failure is logged.
    ///
    /// # Safety
    /// `p` must come from `host_alloc(device, ..)` and not be used afterwards.
    pub unsafe fn host_free(&self, device: i32, p: *mut u8) {
        let Some(free) = self.api.cuMemFreeHost else { return };
        let freed = self.with_context(device, || {
            // SAFETY: the caller passes a pointer from cuMemHostAlloc, freed once; the context that
            // allocated it (the device's primary context) is current.
            self.check(unsafe { free(p.cast()) }, "cuMemFreeHost")
        });
        if let Err(e) = freed {
            tracing::warn!("Freeing page-locked memory on GPU {device} failed: {}", e.message);
        }
    }

    /// Device memory on GPU `device`.
    pub fn device_alloc(&self, device: i32, len: usize) -> Result<u64> {
        let alloc = self.api.cuMemAlloc.ok_or_else(|| self.missing("cuMemAlloc_v2", "3.2"))?;
        self.with_context(device, || {
            let mut p: CuDevicePtr = 0;
            // SAFETY: valid out pointer; the context is current.
            self.check(unsafe { alloc(&mut p, len.max(1)) }, "cuMemAlloc")?;
            Ok(p)
        })
    }

    /// Frees memory from [`Driver::device_alloc`]; a failure is logged.
    pub fn device_free(&self, device: i32, p: u64) {
        let Some(free) = self.api.cuMemFree else { return };
        let freed = self.with_context(device, || {
            // SAFETY: `p` came from cuMemAlloc on this device (the caller's contract) and is freed once;
            // the device's context is current.
            self.check(unsafe { free(p) }, "cuMemFree")
        });
        if let Err(e) = freed {
            tracing::warn!("Freeing device memory on GPU {device} failed: {}", e.message);
        }
    }

    /// Copies device memory into `dst`.
    pub fn copy_to_host(&self, device: i32, src: u64, dst: &mut [u8]) -> Result<()> {
        let copy = self.api.cuMemcpyDtoH.ok_or_else(|| self.missing("cuMemcpyDtoH_v2", "3.2"))?;
        self.with_context(device, || {
            // SAFETY: `dst` is writable for its length; the caller guarantees `src` has that many bytes.
            self.check(unsafe { copy(dst.as_mut_ptr().cast(), src, dst.len()) }, "cuMemcpyDtoH")
        })
    }

    /// Copies `src` into device memory.
    pub fn copy_from_host(&self, device: i32, dst: u64, src: &[u8]) -> Result<()> {
        let copy = self.api.cuMemcpyHtoD.ok_or_else(|| self.missing("cuMemcpyHtoD_v2", "3.2"))?;
        self.with_context(device, || {
            // SAFETY: `src` is readable for its length; the caller guarantees `dst` has room for it.
            self.check(unsafe { copy(dst, src.as_ptr().cast(), src.len()) }, "cuMemcpyHtoD")
        })
    }

    /// A new stream on GPU `device` (`CU_STREAM_NON_BLOCKING`: it does not wait on other threads'
    /// default-stream work), as an opaque address. Everything a run does goes on it, copies included.
    pub fn stream_create(&self, device: i32) -> Result<usize> {
        let create = self.api.cuStreamCreate.ok_or_else(|| self.missing("cuStreamCreate", "2.0"))?;
        self.with_context(device, || {
            let mut s: *mut c_void = std::ptr::null_mut();
            // SAFETY: valid out pointer; the context is current. 0x1 is CU_STREAM_NON_BLOCKING.
            self.check(unsafe { create(&mut s, 0x1) }, "cuStreamCreate")?;
            Ok(s as usize)
        })
    }

    /// Destroys a stream from [`Driver::stream_create`].
    pub fn stream_destroy(&self, device: i32, stream: usize) {
        if let Some(destroy) = self.api.cuStreamDestroy {
            let _ = self.with_context(device, || {
                // SAFETY: `stream` came from cuStreamCreate on this device and is destroyed once.
                let _ = unsafe { destroy(stream as *mut c_void) };
                Ok(())
            });
        }
    }

    /// Queues a copy of `src` into device memory on `stream`; the caller has the stream's context
    /// current and keeps `src` alive and unchanged until the stream is synchronized.
    pub fn copy_from_host_async(&self, dst: u64, src: &[u8], stream: usize) -> Result<()> {
        let copy = self.api.cuMemcpyHtoDAsync.ok_or_else(|| self.missing("cuMemcpyHtoDAsync_v2", "3.2"))?;
        // SAFETY: `src` is readable for its length until the caller synchronizes the stream; `dst` has room.
        self.check(unsafe { copy(dst, src.as_ptr().cast(), src.len(), stream as *mut c_void) }, "cuMemcpyHtoDAsync")
    }

    /// Queues a copy of device memory into `dst` on `stream`; the caller has the context current and
    /// reads `dst` only after synchronizing the stream.
    pub fn copy_to_host_async(&self, dst: &mut [u8], src: u64, stream: usize) -> Result<()> {
        let copy = self.api.cuMemcpyDtoHAsync.ok_or_else(|| self.missing("cuMemcpyDtoHAsync_v2", "3.2"))?;
        // SAFETY: `dst` is writable for its length until the stream is synchronized; `src` has that many bytes.
        self.check(unsafe { copy(dst.as_mut_ptr().cast(), src, dst.len(), stream as *mut c_void) }, "cuMemcpyDtoHAsync")
    }

    /// Waits for the work queued on `stream`; the caller has the stream's context current.
    pub fn stream_sync(&self, stream: usize) -> Result<()> {
        let sync = self.api.cuStreamSynchronize.ok_or_else(|| self.missing("cuStreamSynchronize", "2.0"))?;
        // SAFETY: `stream` is a live stream from cuStreamCreate.
        self.check(unsafe { sync(stream as *mut c_void) }, "cuStreamSynchronize")
    }

    /// The device address of mapped pinned memory from [`Driver::host_alloc`] (`mapped`); the caller
    /// has the device's context current.
    pub fn mapped_device_pointer(&self, host: *mut u8) -> Result<u64> {
        let get =
            self.api.cuMemHostGetDevicePointer.ok_or_else(|| self.missing("cuMemHostGetDevicePointer_v2", "3.2"))?;
        let mut p: CuDevicePtr = 0;
        // SAFETY: valid out pointer; `host` is mapped page-locked memory (the caller's contract).
        self.check(unsafe { get(&mut p, host.cast(), 0) }, "cuMemHostGetDevicePointer")?;
        Ok(p)
    }

    /// Whether CUDA IPC (CUDA shared memory) can work on GPU `device`, or why not.
    pub fn ipc_supported(&self, device: i32) -> Result<()> {
        let gpu = self.gpus.iter().find(|g| g.index == device).ok_or_else(|| {
            Error::invalid(format!("GPU {device} does not exist; this machine has {} GPU(s)", self.gpus.len()))
        })?;
        if gpu.integrated {
            return Err(Error::unsupported(format!(
                "CUDA IPC is not supported on integrated GPUs (GPU {device}, {}: a Jetson); use system shared memory",
                gpu.name
            )));
        }
        if self.api.cuIpcOpenMemHandle.is_none() || self.api.cuIpcCloseMemHandle.is_none() {
            return Err(self.missing("cuIpcOpenMemHandle", "4.1"));
        }
        Ok(())
    }

    /// Opens another process's device memory from its `cudaIpcMemHandle_t`.
    pub fn ipc_open(&self, device: i32, handle: [u8; 64]) -> Result<u64> {
        self.ipc_supported(device)?;
        let open = self.api.cuIpcOpenMemHandle.ok_or_else(|| self.missing("cuIpcOpenMemHandle", "4.1"))?;
        self.with_context(device, || {
            let mut p: CuDevicePtr = 0;
            let handle = CuIpcMemHandle { reserved: handle };
            // SAFETY: valid out pointer; the handle is passed by value as the 64-byte struct it is.
            self.check(unsafe { open(&mut p, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) }, "cuIpcOpenMemHandle")?;
            Ok(p)
        })
    }

    /// Closes what [`Driver::ipc_open`] opened.
    pub fn ipc_close(&self, device: i32, p: u64) {
        if let Some(close) = self.api.cuIpcCloseMemHandle {
            let _ = self.with_context(device, || {
                // SAFETY: `p` came from cuIpcOpenMemHandle on this device and is closed once.
                let _ = unsafe { close(p) };
                Ok(())
            });
        }
    }
}

/// `GPU-` and the 16 bytes in the 8-4-4-4-12 form nvidia-smi prints.
pub fn format_uuid(b: &[u8; 16]) -> String {
    let h: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        h[0..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..16].concat()
    )
}

/// Device memory of another process opened through CUDA IPC (CUDA shared memory), closed on drop.
pub struct IpcMemory {
    device: i32,
    ptr: u64,
    len: usize,
}

impl IpcMemory {
    /// Opens a `cudaIpcMemHandle_t` of `len` bytes on GPU `device`.
    pub fn open(handle: &[u8], device: i64, len: usize) -> Result<IpcMemory> {
        let d = driver().map_err(|why| Error::unavailable(why.to_string()))?;
        let device =
            i32::try_from(device).map_err(|_| Error::invalid(format!("device_id {device} is out of range")))?;
        let raw: [u8; 64] = handle
            .try_into()
            .map_err(|_| Error::invalid("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"))?;
        let ptr = d.ipc_open(device, raw)?;
        Ok(IpcMemory { device, ptr, len })
    }
}

impl IpcMemory {
    /// Copies `dst.len()` bytes from `offset` of the region into host memory.
    pub fn copy_to_host(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        let d = driver().map_err(|why| Error::unavailable(why.to_string()))?;
        if offset.checked_add(dst.len()).is_none_or(|end| end > self.len) {
            return Err(Error::internal("a copy out of a CUDA shared memory region overruns it"));
        }
        d.copy_to_host(self.device, self.ptr + offset as u64, dst)
    }
    /// Copies `src` into the region at `offset`.
    pub fn copy_from_host(&self, offset: usize, src: &[u8]) -> Result<()> {
        let d = driver().map_err(|why| Error::unavailable(why.to_string()))?;
        if offset.checked_add(src.len()).is_none_or(|end| end > self.len) {
            return Err(Error::internal("a copy into a CUDA shared memory region overruns it"));
        }
        d.copy_from_host(self.device, self.ptr + offset as u64, src)
    }
}

impl Drop for IpcMemory {
    fn drop(&mut self) {
        if let Ok(d) = driver() {
            d.ipc_close(self.device, self.ptr);
        }
    }
}

// ---- what the memory pools and CUDA shared memory use, as `memory`'s traits ----

/// Page-locked host memory from the CUDA driver; mapped into GPU `device`'s address space when
/// `mapped` (Xavier and Orin share it with the GPU without copies).
pub struct PinnedAllocator {
    pub device: i32,
    pub mapped: bool,
}

impl crate::memory::pool::Allocator for PinnedAllocator {
    fn memory_type(&self) -> crate::memory::MemoryType {
        crate::memory::MemoryType::CpuPinned
    }
    fn mapped(&self) -> bool {
        self.mapped
    }
    fn allocate(&self, len: usize) -> Result<usize> {
        let d = driver().map_err(|why| Error::unavailable(why.to_string()))?;
        Ok(d.host_alloc(self.device, len, self.mapped)? as usize)
    }
    unsafe fn release(&self, addr: usize, _len: usize) {
        if let Ok(d) = driver() {
            // SAFETY: the caller passes an address `host_alloc(self.device, ..)` returned, released
            // once; `host_free` makes that device's context current for the call.
            unsafe { d.host_free(self.device, addr as *mut u8) };
        }
    }
}

/// Device memory on one GPU.
pub struct DeviceAllocator {
    pub device: i32,
}

impl crate::memory::pool::Allocator for DeviceAllocator {
    fn memory_type(&self) -> crate::memory::MemoryType {
        crate::memory::MemoryType::Gpu { device_id: self.device }
    }
    fn allocate(&self, len: usize) -> Result<usize> {
        let d = driver().map_err(|why| Error::unavailable(why.to_string()))?;
        usize::try_from(d.device_alloc(self.device, len)?).map_err(|_| Error::internal("device pointer too wide"))
    }
    fn copy_to_host(&self, addr: usize, dst: &mut [u8]) -> Result<()> {
        let d = driver().map_err(|why| Error::unavailable(why.to_string()))?;
        d.copy_to_host(self.device, addr as u64, dst)
    }
    unsafe fn release(&self, addr: usize, _len: usize) {
        if let Ok(d) = driver() {
            d.device_free(self.device, addr as u64);
        }
    }
}

/// The memory the CUDA driver gives the pools: page-locked host memory for the first GPU, and device
/// memory on every usable GPU; nothing without a driver or a GPU.
pub struct CudaMemory;

impl crate::memory::pool::MemorySource for CudaMemory {
    fn pinned(&self) -> Option<Box<dyn crate::memory::pool::Allocator>> {
        let d = driver().ok()?;
        let gpu = d.gpus.first()?;
        let mapped = gpu.pinned_strategy() == PinnedStrategy::Mapped;
        Some(Box::new(PinnedAllocator { device: gpu.index, mapped }))
    }
    fn devices(&self) -> Vec<crate::memory::pool::GpuMemory> {
        usable_gpus()
            .into_iter()
            .map(|g| crate::memory::pool::GpuMemory {
                index: g.index,
                uuid: g.uuid,
                allocator: Box::new(DeviceAllocator { device: g.index }),
                fallback: Box::new(DeviceAllocator { device: g.index }),
            })
            .collect()
    }
}

impl crate::memory::regions::CudaIpcMemory for IpcMemory {
    fn copy_to_host(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        IpcMemory::copy_to_host(self, offset, dst)
    }
    fn copy_from_host(&self, offset: usize, src: &[u8]) -> Result<()> {
        IpcMemory::copy_from_host(self, offset, src)
    }
}

/// The opener the shared-memory manager uses for CUDA regions: the CUDA driver's IPC.
pub fn ipc_opener() -> crate::memory::regions::CudaIpcOpener {
    std::sync::Arc::new(|handle: &[u8], device: i64, len: usize| {
        Ok(Box::new(IpcMemory::open(handle, device, len)?) as Box<dyn crate::memory::regions::CudaIpcMemory>)
    })
}

#[cfg(test)]
mod tests;
