//! Bounded memory pools, as tritonserver's `--pinned-memory-pool-byte-size` (page-locked host memory
//! for DMA to and from GPUs) and `--cuda-memory-pool-byte-size` (device memory per GPU).
//!
//! A pool hands out blocks while its budget lasts; past it, a block comes from the pool's fallback
//! (plain host memory for the pinned pool) and the fallback is counted, so running out is a metric,
//! never a failure. Freed blocks are kept per size class and reused, because page-locking and device
//! allocation are slow system calls. The allocators are a trait: the CUDA ones live with the driver
//! (`platform::cuda`, handed over as a [`MemorySource`]), and host-only builds and tests use
//! [`HostAllocator`].
#![allow(unsafe_code)]

use super::MemoryType;
use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Where a pool's memory comes from.
pub trait Allocator: Send + Sync {
    /// The memory type of what it allocates.
    fn memory_type(&self) -> MemoryType;
    /// Whether what it allocates is also mapped into a GPU's address space (`cuMemHostAlloc` with
    /// DEVICEMAP), so a GPU can address it in place.
    fn mapped(&self) -> bool {
        false
    }
    /// Allocates `len` bytes (`len > 0`); returns the address (a host pointer, or a device pointer).
    fn allocate(&self, len: usize) -> Result<usize>;
    /// Copies `dst.len()` bytes at `addr` (an address `allocate` returned) into host memory; only
    /// allocators of device memory need it (host blocks are read in place).
    fn copy_to_host(&self, addr: usize, dst: &mut [u8]) -> Result<()> {
        let _ = (addr, dst);
        Err(Error::internal("this allocator's memory is host memory: read it in place"))
    }
    /// Frees what `allocate` returned.
    ///
    /// # Safety
    /// `addr` and `len` come from one `allocate` call of this allocator, and the memory is not used
    /// afterwards.
    unsafe fn release(&self, addr: usize, len: usize);
}

/// Ordinary host memory, 64-byte aligned.
#[derive(Debug, Default)]
pub struct HostAllocator;

const HOST_ALIGN: usize = 64;

impl Allocator for HostAllocator {
    fn memory_type(&self) -> MemoryType {
        MemoryType::Cpu
    }
    fn allocate(&self, len: usize) -> Result<usize> {
        let layout = std::alloc::Layout::from_size_align(len.max(1), HOST_ALIGN)
            .map_err(|_| Error::invalid(format!("cannot allocate {len} bytes")))?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            return Err(Error::unavailable(format!("out of memory allocating {len} bytes")));
        }
        Ok(p as usize)
    }
    unsafe fn release(&self, addr: usize, len: usize) {
        if let Ok(layout) = std::alloc::Layout::from_size_align(len.max(1), HOST_ALIGN) {
            // SAFETY: the caller passes an address `allocate` made with this same layout.
            unsafe { std::alloc::dealloc(addr as *mut u8, layout) };
        }
    }
}

/// Where memory beyond plain host memory comes from: the platform (the CUDA driver, in
/// `platform::cuda`) implements it and the server hands it to [`Pools::new`], so this module names no
/// driver.
pub trait MemorySource {
    /// Page-locked host memory for the pinned pool, when the machine has a GPU to DMA with.
    fn pinned(&self) -> Option<Box<dyn Allocator>>;
    /// Device memory of every usable GPU.
    fn devices(&self) -> Vec<GpuMemory>;
}

/// One GPU's device memory for its pool.
pub struct GpuMemory {
    pub index: i32,
    /// For the metrics' `gpu_uuid` label.
    pub uuid: String,
    /// The pool's allocator, and the one for allocations past its budget.
    pub allocator: Box<dyn Allocator>,
    pub fallback: Box<dyn Allocator>,
}

/// No memory but the host's (tests, and machines without CUDA).
pub struct HostOnly;

impl MemorySource for HostOnly {
    fn pinned(&self) -> Option<Box<dyn Allocator>> {
        None
    }
    fn devices(&self) -> Vec<GpuMemory> {
        Vec::new()
    }
}

/// Blocks are rounded up to a power of two (at least 4 KiB) so freed ones can be reused.
fn size_class(len: usize) -> usize {
    len.max(4096).checked_next_power_of_two().unwrap_or(len)
}

struct Inner {
    /// For the metrics and the log (`pinned`, `cuda:0`).
    name: String,
    capacity: usize,
    /// Bytes of the budget in blocks handed out or cached.
    reserved: AtomicUsize,
    /// Bytes in blocks handed out now.
    used: AtomicUsize,
    /// Allocations served by the fallback because the budget was spent (or the allocator failed).
    fallbacks: AtomicU64,
    allocator: Box<dyn Allocator>,
    fallback: Box<dyn Allocator>,
    /// Freed blocks per size class, reused before allocating: (class, addresses).
    free: Mutex<Vec<(usize, Vec<usize>)>>,
}

/// A bounded pool; cheap to clone.
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

/// A pool's numbers, for the metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolStats {
    pub name: String,
    pub total_bytes: u64,
    pub used_bytes: u64,
    pub fallbacks: u64,
}

impl Pool {
    pub fn new(
        name: impl Into<String>,
        capacity: usize,
        allocator: Box<dyn Allocator>,
        fallback: Box<dyn Allocator>,
    ) -> Pool {
        Pool {
            inner: Arc::new(Inner {
                name: name.into(),
                capacity,
                reserved: AtomicUsize::new(0),
                used: AtomicUsize::new(0),
                fallbacks: AtomicU64::new(0),
                allocator,
                fallback,
                free: Mutex::new(Vec::new()),
            }),
        }
    }

    /// A host pool: page-locked memory from `pinned` where the machine has it, plain host memory
    /// otherwise.
    pub fn pinned(capacity: usize, pinned: Option<Box<dyn Allocator>>) -> Pool {
        let allocator: Box<dyn Allocator> = match pinned {
            Some(a) => {
                tracing::info!(
                    "Pinned memory pool: {capacity} bytes of page-locked memory{}.",
                    if a.mapped() { ", mapped into the integrated GPU's address space (no copies)" } else { "" }
                );
                a
            }
            None => {
                tracing::debug!("Pinned memory pool: no CUDA GPU, so it hands out ordinary host memory.");
                Box::new(HostAllocator)
            }
        };
        Pool::new("pinned", capacity, allocator, Box::new(HostAllocator))
    }

    pub fn stats(&self) -> PoolStats {
        PoolStats {
            name: self.inner.name.clone(),
            total_bytes: self.inner.capacity as u64,
            used_bytes: self.inner.used.load(Ordering::Relaxed) as u64,
            fallbacks: self.inner.fallbacks.load(Ordering::Relaxed),
        }
    }

    /// The memory type of the pool's own blocks.
    pub fn memory_type(&self) -> MemoryType {
        self.inner.allocator.memory_type()
    }

    /// Whether the pool's own blocks are mapped into a GPU's address space. The pool decides this
    /// once; users of its blocks ask it (or [`Block::is_mapped`]) rather than deciding again.
    pub fn mapped(&self) -> bool {
        self.inner.allocator.mapped()
    }

    /// A block of at least `len` bytes: from the pool while its budget lasts, else from the fallback.
    pub fn allocate(&self, len: usize) -> Result<Block> {
        let i = &self.inner;
        let class = size_class(len);
        let cached = {
            let mut free = i.free.lock();
            free.iter_mut().find(|(c, _)| *c == class).and_then(|(_, list)| list.pop())
        };
        if let Some(addr) = cached {
            i.used.fetch_add(class, Ordering::Relaxed);
            return Ok(Block { addr, len, class, pooled: true, pool: self.inner.clone() });
        }
        let fits = i
            .reserved
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| r.checked_add(class).filter(|&n| n <= i.capacity))
            .is_ok();
        if fits {
            match i.allocator.allocate(class) {
                Ok(addr) => {
                    i.used.fetch_add(class, Ordering::Relaxed);
                    return Ok(Block { addr, len, class, pooled: true, pool: self.inner.clone() });
                }
                Err(e) => {
                    i.reserved.fetch_sub(class, Ordering::AcqRel);
                    tracing::debug!("Memory pool '{}' could not allocate {class} bytes: {e}", i.name);
                }
            }
        }
        i.fallbacks.fetch_add(1, Ordering::Relaxed);
        let addr = i.fallback.allocate(class)?;
        Ok(Block { addr, len, class, pooled: false, pool: self.inner.clone() })
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        for (class, list) in self.free.get_mut().drain(..) {
            for addr in list {
                // SAFETY: cached blocks came from `allocator.allocate(class)` and nothing uses them.
                unsafe { self.allocator.release(addr, class) };
            }
        }
    }
}

/// Memory from a [`Pool`], returned to it on drop.
pub struct Block {
    addr: usize,
    /// The length asked for (the block may be larger).
    len: usize,
    /// The allocation's real size.
    class: usize,
    /// From the pool's budget (true) or its fallback.
    pooled: bool,
    pool: Arc<Inner>,
}

impl Block {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn memory_type(&self) -> MemoryType {
        if self.pooled {
            self.pool.allocator.memory_type()
        } else {
            self.pool.fallback.memory_type()
        }
    }

    /// Whether the GPU can address this block in place (a pooled block of a mapped pool; never one
    /// from the fallback).
    pub fn is_mapped(&self) -> bool {
        self.pooled && self.pool.allocator.mapped()
    }

    /// The address (host or device, as the memory type says).
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Copies the block's bytes into `dst` (`dst.len() == self.len()`), from device memory through its
    /// allocator.
    pub fn copy_to_host(&self, dst: &mut [u8]) -> Result<()> {
        if dst.len() != self.len {
            return Err(Error::internal("a block copy of the wrong length"));
        }
        match self.memory_type() {
            MemoryType::Gpu { .. } => {
                let a = if self.pooled { &self.pool.allocator } else { &self.pool.fallback };
                a.copy_to_host(self.addr, dst)
            }
            _ => {
                dst.copy_from_slice(self.as_ref());
                Ok(())
            }
        }
    }

    /// The bytes, when the block is host memory.
    pub fn as_mut_slice(&mut self) -> Option<&mut [u8]> {
        match self.memory_type() {
            MemoryType::Cpu | MemoryType::CpuPinned => {
                // SAFETY: host blocks are `class >= len` bytes of memory this block owns exclusively.
                Some(unsafe { std::slice::from_raw_parts_mut(self.addr as *mut u8, self.len) })
            }
            MemoryType::Gpu { .. } => None,
        }
    }
}

impl AsRef<[u8]> for Block {
    fn as_ref(&self) -> &[u8] {
        match self.memory_type() {
            // SAFETY: as in `as_mut_slice`; shared access through `&self`.
            MemoryType::Cpu | MemoryType::CpuPinned => unsafe {
                std::slice::from_raw_parts(self.addr as *const u8, self.len)
            },
            MemoryType::Gpu { .. } => &[],
        }
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        let p = &self.pool;
        if self.pooled {
            p.used.fetch_sub(self.class, Ordering::Relaxed);
            let mut free = p.free.lock();
            match free.iter_mut().find(|(c, _)| *c == self.class) {
                Some((_, list)) => list.push(self.addr),
                None => free.push((self.class, vec![self.addr])),
            }
        } else {
            // SAFETY: the block came from the fallback with this class size and is dropped once.
            unsafe { p.fallback.release(self.addr, self.class) };
        }
    }
}

/// The server's pools: pinned host memory, and device memory per GPU.
#[derive(Clone)]
pub struct Pools {
    pub pinned: Pool,
    /// (GPU index, its pool, its uuid for the metrics).
    pub gpus: Vec<(i32, Pool, String)>,
}

/// Pool sizes from the command line.
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// `--pinned-memory-pool-byte-size`.
    pub pinned_bytes: u64,
    /// `--cuda-memory-pool-byte-size <gpu>:<bytes>`; GPUs not named get [`DEFAULT_CUDA_POOL_BYTES`].
    pub cuda_bytes: Vec<(i32, u64)>,
}

/// tritonserver's default pinned pool: 256 MiB.
pub const DEFAULT_PINNED_POOL_BYTES: u64 = 256 << 20;
/// tritonserver's default device pool per GPU: 64 MiB.
pub const DEFAULT_CUDA_POOL_BYTES: u64 = 64 << 20;

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions { pinned_bytes: DEFAULT_PINNED_POOL_BYTES, cuda_bytes: Vec::new() }
    }
}

impl Pools {
    /// Pools for this machine: the pinned pool, and a device pool for every GPU `source` offers.
    pub fn new(opts: &PoolOptions, source: &dyn MemorySource) -> Pools {
        let clamp = |b: u64| usize::try_from(b).unwrap_or(usize::MAX);
        let mut gpus = Vec::new();
        for GpuMemory { index, uuid, allocator, fallback } in source.devices() {
            let bytes =
                opts.cuda_bytes.iter().rev().find(|(g, _)| *g == index).map_or(DEFAULT_CUDA_POOL_BYTES, |x| x.1);
            gpus.push((index, Pool::new(format!("cuda:{index}"), clamp(bytes), allocator, fallback), uuid));
        }
        Pools { pinned: Pool::pinned(clamp(opts.pinned_bytes), source.pinned()), gpus }
    }

    /// Host-only pools (tests, and machines without CUDA).
    pub fn host(pinned_bytes: usize) -> Pools {
        Pools {
            pinned: Pool::new("pinned", pinned_bytes, Box::new(HostAllocator), Box::new(HostAllocator)),
            gpus: Vec::new(),
        }
    }
}

/// Parses `--cuda-memory-pool-byte-size <gpu>:<bytes>`.
pub fn parse_cuda_pool(s: &str) -> Result<(i32, u64)> {
    let (gpu, bytes) =
        s.split_once(':').ok_or_else(|| Error::invalid(format!("'{s}' is not <gpu>:<bytes> (e.g. 0:67108864)")))?;
    let gpu: i32 = gpu
        .trim()
        .parse()
        .ok()
        .filter(|g| *g >= 0)
        .ok_or_else(|| Error::invalid(format!("'{gpu}' in '{s}' is not a GPU index")))?;
    let bytes: u64 =
        bytes.trim().parse().map_err(|_| Error::invalid(format!("'{bytes}' in '{s}' is not a byte count")))?;
    Ok((gpu, bytes))
}

/// Allocators for tests elsewhere in the crate (this module holds the unsafe code they need).
#[cfg(test)]
pub mod testing {
    use super::*;

    /// A test allocator: host memory (`host`) or fake addresses that name no memory (a stand-in for
    /// device memory that only a fake stream reads); `before` runs first and may fail the allocation.
    pub struct TestAllocator {
        pub memory_type: MemoryType,
        pub mapped: bool,
        pub host: bool,
        pub before: Box<dyn Fn() -> Result<()> + Send + Sync>,
        pub next: AtomicUsize,
    }

    impl TestAllocator {
        pub fn new(memory_type: MemoryType, mapped: bool, host: bool) -> TestAllocator {
            TestAllocator {
                memory_type,
                mapped,
                host,
                before: Box::new(|| Ok(())),
                next: AtomicUsize::new(0x1000_0000),
            }
        }
    }

    impl Allocator for TestAllocator {
        fn memory_type(&self) -> MemoryType {
            self.memory_type
        }
        fn mapped(&self) -> bool {
            self.mapped
        }
        fn allocate(&self, len: usize) -> Result<usize> {
            (self.before)()?;
            if self.host {
                HostAllocator.allocate(len)
            } else {
                Ok(self.next.fetch_add(len.max(1).next_multiple_of(256), Ordering::Relaxed))
            }
        }
        unsafe fn release(&self, addr: usize, len: usize) {
            if self.host {
                // SAFETY: the caller's contract: `addr` came from `allocate(len)`, i.e. from HostAllocator.
                unsafe { HostAllocator.release(addr, len) };
            }
        }
    }
}

#[cfg(test)]
mod tests;
