//! Tensor memory: buffers tagged with the kind of memory they live in.
//!
//! Every tensor in the server carries a [`Buffer`] that says where its bytes are (host, pinned host,
//! device, or a client's shared-memory region), so each consumer picks the right copy, or none. The
//! pools (`pool.rs`) hand out pinned and device memory; `regions.rs` holds the regions clients register.

pub mod pool;
pub mod recycled;
pub mod regions;

use bytes::Bytes;
use std::fmt;
use std::sync::Arc;

/// Where a buffer's bytes live, as Triton's `TRITONSERVER_MemoryType` with its device id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemoryType {
    /// Ordinary pageable host memory.
    Cpu,
    /// Page-locked host memory, usable for DMA by a GPU.
    CpuPinned,
    /// Memory on the GPU with this device id.
    Gpu { device_id: i32 },
}

/// Memory that is not directly addressable from the host (device memory). Implemented by GPU pools.
pub trait DeviceMemory: Send + Sync + fmt::Debug {
    /// Which memory this is.
    fn memory_type(&self) -> MemoryType;
    /// Size in bytes.
    fn len(&self) -> usize;
    /// Whether the allocation holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies the contents into host memory.
    fn to_host(&self) -> crate::error::Result<Bytes>;
}

/// A cheaply clonable, immutable byte buffer plus the memory it lives in.
#[derive(Clone)]
pub struct Buffer {
    repr: Repr,
}

#[derive(Clone)]
enum Repr {
    /// Host memory; `pinned` tells whether it is page-locked.
    Host { bytes: Bytes, pinned: bool },
    /// Device memory owned by a pool.
    Device(Arc<dyn DeviceMemory>),
    /// An output already written into a client's shared-memory region: the response carries no bytes.
    SharedMemory(regions::ShmSlice),
}

impl Buffer {
    /// Host memory, shared without copying (e.g. a slice of an HTTP body).
    pub fn host(bytes: Bytes) -> Self {
        Buffer { repr: Repr::Host { bytes, pinned: false } }
    }

    /// Device memory.
    pub fn device(mem: Arc<dyn DeviceMemory>) -> Self {
        Buffer { repr: Repr::Device(mem) }
    }

    /// A block from a memory pool, keeping its memory type: host blocks (plain or pinned) are shared
    /// as bytes without copying, device blocks stay on the device until someone needs them on the host.
    pub fn from_block(block: pool::Block) -> Self {
        match block.memory_type() {
            MemoryType::Cpu => Buffer { repr: Repr::Host { bytes: Bytes::from_owner(block), pinned: false } },
            MemoryType::CpuPinned => Buffer { repr: Repr::Host { bytes: Bytes::from_owner(block), pinned: true } },
            MemoryType::Gpu { .. } => Buffer::device(Arc::new(DeviceBlock(block))),
        }
    }

    /// An output written into a client's shared-memory region (`slice` holds exactly its bytes).
    pub fn in_shared_memory(slice: regions::ShmSlice) -> Self {
        Buffer { repr: Repr::SharedMemory(slice) }
    }

    /// The shared-memory region this output was written to, if it was.
    pub fn shared_memory(&self) -> Option<&regions::ShmSlice> {
        match &self.repr {
            Repr::SharedMemory(s) => Some(s),
            _ => None,
        }
    }

    pub fn memory_type(&self) -> MemoryType {
        match &self.repr {
            Repr::Host { pinned: false, .. } | Repr::SharedMemory(_) => MemoryType::Cpu,
            Repr::Host { pinned: true, .. } => MemoryType::CpuPinned,
            Repr::Device(d) => d.memory_type(),
        }
    }

    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Host { bytes, .. } => bytes.len(),
            Repr::Device(d) => d.len(),
            Repr::SharedMemory(s) => s.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes, when they are host-addressable.
    pub fn as_host(&self) -> Option<&Bytes> {
        match &self.repr {
            Repr::Host { bytes, .. } => Some(bytes),
            Repr::Device(_) | Repr::SharedMemory(_) => None,
        }
    }

    /// The bytes in host memory, copying from the device when needed.
    pub fn to_host(&self) -> crate::error::Result<Bytes> {
        match &self.repr {
            Repr::Host { bytes, .. } => Ok(bytes.clone()),
            Repr::Device(d) => d.to_host(),
            Repr::SharedMemory(s) => s.to_bytes(),
        }
    }
}

/// A device-memory block of a pool, seen as [`DeviceMemory`].
struct DeviceBlock(pool::Block);

impl fmt::Debug for DeviceBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeviceBlock({:?}, {} bytes)", self.0.memory_type(), self.0.len())
    }
}

impl DeviceMemory for DeviceBlock {
    fn memory_type(&self) -> MemoryType {
        self.0.memory_type()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn to_host(&self) -> crate::error::Result<Bytes> {
        if !matches!(self.0.memory_type(), MemoryType::Gpu { .. }) {
            return Ok(Bytes::copy_from_slice(self.0.as_ref()));
        }
        let mut host = vec![0u8; self.0.len()];
        self.0.copy_to_host(&mut host)?;
        Ok(Bytes::from(host))
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Buffer({:?}, {} bytes)", self.memory_type(), self.len())
    }
}

impl From<Vec<u8>> for Buffer {
    fn from(v: Vec<u8>) -> Self {
        Buffer::host(Bytes::from(v))
    }
}

impl From<Bytes> for Buffer {
    fn from(b: Bytes) -> Self {
        Buffer::host(b)
    }
}
