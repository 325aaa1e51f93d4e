//! Shared-memory regions clients register (Triton's system and CUDA shared-memory extensions), so
//! tensor bytes never cross the socket: inputs are read in place, outputs are written into the region.
//!
//! A region is mapped once at registration. Requests hold the mapping through an `Arc`, so unregistering
//! a region that requests in flight still use only removes its name: the mapping lives until they finish.
#![allow(unsafe_code)]

use crate::error::{Error, ErrorKind, Result};
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// A system shared-memory region as the status APIs report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemRegionStatus {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
}

/// A CUDA shared-memory region as the status APIs report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaRegionStatus {
    pub name: String,
    pub device_id: i64,
    pub byte_size: u64,
}

/// Device memory another process shared through a CUDA IPC handle, opened in this process.
pub trait CudaIpcMemory: Send + Sync {
    /// Copies `dst.len()` bytes starting at `offset` of the region into host memory.
    fn copy_to_host(&self, offset: usize, dst: &mut [u8]) -> Result<()>;
    /// Copies `src` into the region at `offset`.
    fn copy_from_host(&self, offset: usize, src: &[u8]) -> Result<()>;
}

/// Opens CUDA IPC handles (`platform::cuda::ipc_opener` gives the CUDA driver's).
pub type CudaIpcOpener = Arc<dyn Fn(&[u8], i64, usize) -> Result<Box<dyn CudaIpcMemory>> + Send + Sync>;

/// The bytes behind a region: a mapping of a POSIX shared-memory object, or GPU memory.
enum Backing {
    /// `mmap` of the object from the registered offset, `byte_size` long.
    System(memmap2::MmapRaw),
    Cuda(Box<dyn CudaIpcMemory>),
}

/// One registered region.
struct Region {
    name: String,
    /// The shared-memory key (`/name`), for system regions.
    key: String,
    offset: u64,
    /// The CUDA device, for CUDA regions.
    device_id: i64,
    byte_size: usize,
    backing: Backing,
}

/// Part of a registered region that a request names for one tensor. Holding it keeps the region mapped.
#[derive(Clone)]
pub struct ShmSlice {
    region: Arc<Region>,
    /// Offset inside the region (not the object: the registration's own offset is already applied).
    offset: usize,
    len: usize,
}

impl fmt::Debug for ShmSlice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ShmSlice({:?}, {}+{})", self.region.name, self.offset, self.len)
    }
}

impl ShmSlice {
    /// The region's name.
    pub fn region(&self) -> &str {
        &self.region.name
    }

    /// How many bytes the request reserved.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first `len` bytes of the slice (all of it when `len` is larger).
    pub fn prefix(&self, len: usize) -> ShmSlice {
        ShmSlice { region: self.region.clone(), offset: self.offset, len: len.min(self.len) }
    }

    /// The input bytes: the region itself for system memory (no copy), a host copy for CUDA memory.
    pub fn to_bytes(&self) -> Result<Bytes> {
        match &self.region.backing {
            Backing::System(_) => Ok(Bytes::from_owner(HostView(self.clone()))),
            Backing::Cuda(mem) => {
                let mut host = vec![0u8; self.len];
                mem.copy_to_host(self.offset, &mut host)?;
                Ok(Bytes::from(host))
            }
        }
    }

    /// The input as a buffer: the region itself for system memory (no copy); for CUDA memory, a copy
    /// into a block of `staging` (the pinned pool, so the copy is DMA) when one is given.
    pub fn to_buffer(&self, staging: Option<&super::pool::Pool>) -> Result<super::Buffer> {
        match (&self.region.backing, staging) {
            (Backing::Cuda(mem), Some(pool)) if self.len > 0 => {
                let mut block = pool.allocate(self.len)?;
                let dst = block
                    .as_mut_slice()
                    .ok_or_else(|| Error::internal("the staging pool for CUDA shared memory is not host memory"))?;
                mem.copy_to_host(self.offset, dst)?;
                Ok(super::Buffer::from_block(block))
            }
            _ => Ok(super::Buffer::host(self.to_bytes()?)),
        }
    }

    /// Writes an output into the slice; `data` must fit.
    pub fn write(&self, data: &[u8]) -> Result<()> {
        if data.len() > self.len {
            return Err(Error::internal(format!(
                "{} bytes do not fit the {} bytes reserved in shared memory region '{}'",
                data.len(),
                self.len,
                self.region.name
            )));
        }
        match &self.region.backing {
            Backing::System(map) => {
                if !data.is_empty() {
                    // SAFETY: `offset + data.len() <= offset + len <= byte_size`, the mapping's length
                    // (checked when the slice was made and just above), and the mapping lives as long as
                    // `self.region`. The destination is a shared mapping that other processes (and, if a
                    // client names overlapping ranges, this request's own inputs) may touch at the same
                    // time; that is the contract of the shared-memory protocol, as in Triton, and the
                    // bytes are plain data with no invariants.
                    unsafe {
                        std::ptr::copy_nonoverlapping(data.as_ptr(), map.as_mut_ptr().add(self.offset), data.len())
                    };
                }
                Ok(())
            }
            Backing::Cuda(mem) => mem.copy_from_host(self.offset, data),
        }
    }
}

/// A system-memory slice seen as host bytes; the owner of a zero-copy [`Bytes`].
struct HostView(ShmSlice);

impl AsRef<[u8]> for HostView {
    fn as_ref(&self) -> &[u8] {
        let s = &self.0;
        match &s.region.backing {
            Backing::System(map) if s.len > 0 => {
                // SAFETY: the slice lies inside the mapping (`offset + len <= byte_size`, checked when the
                // slice was made) and the mapping outlives this view, which holds its region. Other
                // processes may write the bytes while the server reads them; as in Triton, the client
                // promises not to change an input until its response arrives, and the server only ever
                // reads plain bytes from it, so a torn read yields wrong numbers, never unsoundness in the
                // server's own data structures.
                unsafe { std::slice::from_raw_parts(map.as_ptr().add(s.offset), s.len) }
            }
            _ => &[],
        }
    }
}

/// The regions registered with the server, shared by every front-end.
pub struct SharedMemoryManager {
    regions: Mutex<BTreeMap<String, Arc<Region>>>,
    /// How CUDA IPC handles are opened; `None` while no CUDA support is wired in.
    cuda: Option<CudaIpcOpener>,
    /// Why CUDA shared memory cannot be used, when `cuda` is `None`.
    cuda_missing: String,
}

impl Default for SharedMemoryManager {
    fn default() -> Self {
        SharedMemoryManager::new(None, "this server was started without CUDA support".to_string())
    }
}

/// Kinds of region, for the messages that name them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    System,
    Cuda,
}

impl Kind {
    fn of(r: &Region) -> Kind {
        match r.backing {
            Backing::System(_) => Kind::System,
            Backing::Cuda(_) => Kind::Cuda,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Kind::System => "system",
            Kind::Cuda => "cuda",
        }
    }
}

impl SharedMemoryManager {
    pub fn new(cuda: Option<CudaIpcOpener>, cuda_missing: String) -> Self {
        SharedMemoryManager { regions: Mutex::new(BTreeMap::new()), cuda, cuda_missing }
    }

    /// Maps `byte_size` bytes of the POSIX shared-memory object `key` from `offset`, as region `name`.
    pub fn register_system(&self, name: &str, key: &str, offset: u64, byte_size: u64) -> Result<()> {
        if name.is_empty() {
            return Err(Error::invalid("'region name' is necessary to register system shared memory region"));
        }
        self.check_free(name)?;
        let map = map_object(key, offset, byte_size)?;
        let region = Region {
            name: name.to_string(),
            key: key.to_string(),
            offset,
            device_id: 0,
            byte_size: byte_size as usize,
            backing: Backing::System(map),
        };
        self.insert(region)
    }

    /// Opens a CUDA IPC handle (`cudaIpcMemHandle_t`, 64 bytes) of `byte_size` bytes on `device_id`.
    pub fn register_cuda(&self, name: &str, raw_handle: &[u8], device_id: i64, byte_size: u64) -> Result<()> {
        if name.is_empty() {
            return Err(Error::invalid("'region name' is necessary to register cuda shared memory region"));
        }
        if raw_handle.len() != CUDA_IPC_HANDLE_SIZE {
            return Err(Error::invalid(format!(
                "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t ({CUDA_IPC_HANDLE_SIZE} bytes), got \
                 {} bytes",
                raw_handle.len()
            )));
        }
        self.check_free(name)?;
        let Some(open) = &self.cuda else {
            return Err(Error::unavailable(format!(
                "failed to register CUDA shared memory region '{name}': {}",
                self.cuda_missing
            )));
        };
        let size = usize::try_from(byte_size)
            .map_err(|_| Error::invalid(format!("byte_size {byte_size} is too large for this machine")))?;
        let mem = open(raw_handle, device_id, size)
            .map_err(|e| e.context(format!("failed to register CUDA shared memory region '{name}'")))?;
        let region = Region {
            name: name.to_string(),
            key: String::new(),
            offset: 0,
            device_id,
            byte_size: size,
            backing: Backing::Cuda(mem),
        };
        self.insert(region)
    }

    fn check_free(&self, name: &str) -> Result<()> {
        if self.regions.lock().contains_key(name) {
            return Err(already(name));
        }
        Ok(())
    }

    fn insert(&self, region: Region) -> Result<()> {
        let mut regions = self.regions.lock();
        // Checked again: another registration of the name may have won while this one mapped.
        if regions.contains_key(&region.name) {
            return Err(already(&region.name));
        }
        tracing::debug!(
            "Registered {} shared memory region '{}' ({} bytes).",
            Kind::of(&region).name(),
            region.name,
            region.byte_size
        );
        regions.insert(region.name.clone(), Arc::new(region));
        Ok(())
    }

    /// Status of every system region, or of the one named (NOT_FOUND when it does not exist).
    pub fn system_status(&self, name: Option<&str>) -> Result<Vec<SystemRegionStatus>> {
        self.status(Kind::System, name, |r| SystemRegionStatus {
            name: r.name.clone(),
            key: r.key.clone(),
            offset: r.offset,
            byte_size: r.byte_size as u64,
        })
    }

    /// Status of every CUDA region, or of the one named.
    pub fn cuda_status(&self, name: Option<&str>) -> Result<Vec<CudaRegionStatus>> {
        self.status(Kind::Cuda, name, |r| CudaRegionStatus {
            name: r.name.clone(),
            device_id: r.device_id,
            byte_size: r.byte_size as u64,
        })
    }

    fn status<T>(&self, kind: Kind, name: Option<&str>, f: impl Fn(&Region) -> T) -> Result<Vec<T>> {
        let regions = self.regions.lock();
        match name {
            None => Ok(regions.values().filter(|r| Kind::of(r) == kind).map(|r| f(r)).collect()),
            Some(n) => match regions.get(n) {
                Some(r) if Kind::of(r) == kind => Ok(vec![f(r)]),
                _ => Err(Error::not_found(format!("Unable to find {} shared memory region: '{n}'", kind.name()))),
            },
        }
    }

    /// Unregisters one system region (a name that is not registered is not an error, as in Triton), or
    /// all of them. Requests in flight keep what they use mapped until they finish.
    pub fn unregister_system(&self, name: Option<&str>) -> Result<()> {
        self.unregister(Kind::System, name)
    }

    /// [`Self::unregister_system`] for CUDA regions.
    pub fn unregister_cuda(&self, name: Option<&str>) -> Result<()> {
        self.unregister(Kind::Cuda, name)
    }

    fn unregister(&self, kind: Kind, name: Option<&str>) -> Result<()> {
        let mut regions = self.regions.lock();
        match name {
            None => regions.retain(|_, r| Kind::of(r) != kind),
            Some(n) => {
                if let Some(r) = regions.get(n) {
                    if Kind::of(r) != kind {
                        let other = if kind == Kind::System { "CUDA" } else { "system" };
                        let this = if kind == Kind::System { "system" } else { "CUDA" };
                        return Err(Error::invalid(format!(
                            "shared memory region '{n}' is registered as {other} shared memory, not {this} shared memory"
                        )));
                    }
                    regions.remove(n);
                }
            }
        }
        Ok(())
    }

    /// The part of region `name` a tensor names (`shared_memory_offset`, `shared_memory_byte_size`).
    pub fn slice(&self, name: &str, offset: u64, byte_size: u64) -> Result<ShmSlice> {
        let region = self.regions.lock().get(name).cloned().ok_or_else(|| {
            Error::new(ErrorKind::InvalidArgument, format!("Unable to find shared memory region: '{name}'"))
        })?;
        let fits = offset.checked_add(byte_size).is_some_and(|end| end <= region.byte_size as u64);
        if !fits {
            return Err(Error::invalid(format!("Invalid offset + byte size for shared memory region: '{name}'")));
        }
        Ok(ShmSlice { offset: offset as usize, len: byte_size as usize, region })
    }
}

/// The size of a `cudaIpcMemHandle_t`.
pub const CUDA_IPC_HANDLE_SIZE: usize = 64;

fn already(name: &str) -> Error {
    Error::new(ErrorKind::AlreadyExists, format!("shared memory region '{name}' already in manager"))
}

/// Opens the POSIX shared-memory object `key` (as `shm_open` names them: `/name`) and maps part of it.
fn map_object(key: &str, offset: u64, byte_size: u64) -> Result<memmap2::MmapRaw> {
    // shm_open's rule: one leading slash, then a name without slashes. Anything else could reach files
    // outside the shared-memory file system.
    let bare = key.strip_prefix('/').unwrap_or(key);
    if bare.is_empty() || bare.contains('/') || bare == "." || bare == ".." || bare.contains('\0') {
        return Err(Error::invalid(format!(
            "Unable to open shared memory region: '{key}': the key must be '/name' with no other '/'"
        )));
    }
    let file = rustix::shm::open(bare, rustix::shm::OFlags::RDWR, rustix::fs::Mode::empty())
        .map(std::fs::File::from)
        .map_err(|e| Error::invalid(format!("Unable to open shared memory region: '{key}': {e}")))?;
    let file_size = file.metadata().map_err(|e| Error::internal(format!("cannot stat '{key}': {e}")))?.len();
    // Mapping past the end of the object would "succeed" and then kill the server with SIGBUS on the
    // first access, so the range is checked against the object's size first.
    let fits = offset.checked_add(byte_size).is_some_and(|end| end <= file_size);
    if !fits || byte_size == 0 {
        return Err(Error::invalid(format!(
            "Invalid shared memory region: '{key}' (offset {offset} + byte_size {byte_size} is not inside the \
             object's {file_size} bytes)"
        )));
    }
    let len = usize::try_from(byte_size).map_err(|_| Error::invalid(format!("byte_size {byte_size} is too large")))?;
    // memmap2 aligns the offset down to a page itself, so unaligned offsets work (Triton's plain mmap
    // refuses them).
    memmap2::MmapOptions::new()
        .offset(offset)
        .len(len)
        .map_raw(&file)
        .map_err(|e| Error::invalid(format!("Invalid shared memory region: '{key}': {e}")))
}

#[cfg(test)]
mod tests;
