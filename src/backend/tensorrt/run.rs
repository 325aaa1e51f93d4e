//! One TensorRT run on an instance's CUDA stream, written once over [`Stream`]: the real stream
//! (`ffi.rs`: the shim and the CUDA driver) and the tests' fake (`mock.rs`) run this same code.
//!
//! The rule it exists for: memory that queued GPU work reads or writes must not go back to a pool
//! before the stream has finished that work, or another instance could be handed a block the GPU is
//! still copying into. Every block and every input byte buffer of a run is therefore owned by an
//! [`InFlight`] guard from the moment it is allocated. The guard hands the outputs over only after
//! `sync` succeeded; on any early return (an allocation failing, TensorRT refusing a shape, an output
//! whose shape is unknown, a failed enqueue or copy) its `Drop` synchronizes the stream before the
//! blocks return. A stream that cannot be synchronized has a sticky CUDA error, and the GPU may still
//! be using the memory: then the blocks are leaked on purpose (counted as used by their pool) rather
//! than reused.

use super::engine::EngineDesc;
use super::{RunInput, RunOutput};
use crate::error::{Error, Result};
use crate::memory::pool::{Block, Pools};
use crate::memory::{Buffer, MemoryType};
use bytes::Bytes;

/// What a run asks of TensorRT and the CUDA stream of one execution context.
///
/// Contract for implementations and callers: the queuing methods (`set_profile`, `copy_in`,
/// `copy_out`, `enqueue`) may leave work running on the stream after they return; the memory they
/// name (`src`, `dst`, and every address given to `set_address`) must stay allocated and unchanged
/// until `sync` returns `Ok`. Only [`InFlight`] calls them, and it keeps that memory.
pub trait Stream {
    /// `setOptimizationProfileAsync` (queues work on the stream).
    fn set_profile(&mut self, profile: usize) -> Result<()>;
    /// `setInputShape` for I/O tensor `io` (host-side only).
    fn set_input_shape(&mut self, io: usize, shape: &[i64]) -> Result<()>;
    /// `getTensorShape` for I/O tensor `io` once the input shapes are set.
    fn tensor_shape(&mut self, io: usize) -> Result<Vec<i64>>;
    /// The device address of mapped pinned memory at host address `host`.
    fn mapped_pointer(&mut self, host: usize) -> Result<u64>;
    /// `setTensorAddress` for I/O tensor `io`.
    fn set_address(&mut self, io: usize, ptr: u64) -> Result<()>;
    /// Queues a copy of `src` into device memory at `dst`.
    fn copy_in(&mut self, dst: u64, src: &[u8]) -> Result<()>;
    /// Queues a copy of device memory at `src` into `dst`.
    fn copy_out(&mut self, dst: &mut [u8], src: u64) -> Result<()>;
    /// `enqueueV3`: queues the engine's work.
    fn enqueue(&mut self) -> Result<()>;
    /// Waits for everything queued on the stream.
    fn sync(&mut self) -> Result<()>;
}

/// Where device outputs are copied back to for the CPU to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readback {
    /// Page-locked blocks of the pinned pool (discrete GPUs: fast DMA, cached for the CPU).
    Pinned,
    /// Ordinary pageable memory: on integrated GPUs without I/O coherence (Nano, TX2) page-locked
    /// memory is uncached for the CPU, so building a response from it would be slow.
    Pageable,
}

/// Where a run's memory comes from.
pub struct Memory<'a> {
    pub pools: &'a Pools,
    pub device: i32,
    /// Use mapped pinned blocks for I/O (the GPU reads and writes them in place): only when the
    /// device is I/O-coherent *and* the pinned pool's blocks are mapped (see `Pool::mapped`).
    pub mapped: bool,
    pub readback: Readback,
}

/// Memory for one tensor during a run.
enum Slot {
    /// Mapped pinned memory: the GPU reads and writes it in place.
    Mapped(Block),
    /// Device memory; outputs are copied back.
    Device(Block),
}

impl Memory<'_> {
    fn allocate(&self, len: usize) -> Result<Slot> {
        if self.mapped {
            let block = self.pools.pinned.allocate(len)?;
            // A block from the pool's fallback is ordinary host memory the GPU cannot address.
            if block.is_mapped() {
                return Ok(Slot::Mapped(block));
            }
        }
        let pool = self
            .pools
            .gpus
            .iter()
            .find(|(g, _, _)| *g == self.device)
            .map(|(_, p, _)| p)
            .ok_or_else(|| Error::unavailable(format!("GPU {} has no memory pool", self.device)))?;
        Ok(Slot::Device(pool.allocate(len)?))
    }
}

/// Host memory an output is read back into.
enum HostOut {
    Block(Block),
    Vec(Vec<u8>),
}

/// Owns everything queued work may touch until the stream is synchronized (see the module docs).
struct InFlight<'s, S: Stream + ?Sized> {
    stream: &'s mut S,
    /// Whether work was queued since the last successful sync.
    queued: bool,
    blocks: Vec<Option<Block>>,
    outs: Vec<Option<HostOut>>,
    held: Vec<Bytes>,
}

impl<'s, S: Stream + ?Sized> InFlight<'s, S> {
    fn new(stream: &'s mut S) -> Self {
        InFlight { stream, queued: false, blocks: Vec::new(), outs: Vec::new(), held: Vec::new() }
    }

    /// Takes ownership of a block until the run is over; returns its handle.
    fn hold(&mut self, b: Block) -> usize {
        self.blocks.push(Some(b));
        self.blocks.len() - 1
    }

    fn block(&mut self, i: usize) -> Result<&mut Block> {
        self.blocks.get_mut(i).and_then(Option::as_mut).ok_or_else(|| Error::internal("a run lost a block"))
    }

    /// Queued work starts here: from now on, dropping the guard synchronizes first.
    fn queue<T>(&mut self, f: impl FnOnce(&mut S) -> Result<T>) -> Result<T> {
        self.queued = true;
        f(self.stream)
    }

    /// Queues a copy of `src` into held device block `dst`; `src` is held too.
    fn copy_in(&mut self, dst: usize, src: Bytes) -> Result<()> {
        let addr = self.block(dst)?.addr() as u64;
        self.held.push(src);
        self.queued = true;
        let src = self.held.last().map(|b| &b[..]).unwrap_or_default();
        self.stream.copy_in(addr, src)
    }

    /// Queues a copy of held device block `src` into new host memory; returns the output's handle.
    fn copy_out(&mut self, src: usize, memory: &Memory<'_>) -> Result<usize> {
        let (addr, len) = {
            let b = self.block(src)?;
            (b.addr() as u64, b.len())
        };
        let out = match memory.readback {
            Readback::Pinned => HostOut::Block(memory.pools.pinned.allocate(len)?),
            Readback::Pageable => HostOut::Vec(vec![0u8; len]),
        };
        self.outs.push(Some(out));
        let i = self.outs.len() - 1;
        self.queued = true;
        let dst = match self.outs.get_mut(i).and_then(Option::as_mut) {
            Some(HostOut::Block(b)) => {
                b.as_mut_slice().ok_or_else(|| Error::internal("a pinned block is not host memory"))?
            }
            Some(HostOut::Vec(v)) => &mut v[..],
            None => return Err(Error::internal("a run lost an output")),
        };
        self.stream.copy_out(dst, addr)?;
        Ok(i)
    }

    /// Selects `profile` on the context unless `current` says it is selected already. `current` is
    /// unknown until TensorRT says yes, so a failed switch is retried by the next run.
    fn select(&mut self, current: &mut Option<usize>, profile: usize) -> Result<()> {
        if *current != Some(profile) {
            *current = None;
            self.queue(|s| s.set_profile(profile))?;
            *current = Some(profile);
        }
        Ok(())
    }

    /// Waits for the stream; afterwards nothing the guard holds is in use by the GPU.
    fn sync(&mut self) -> Result<()> {
        if self.queued {
            self.stream.sync()?;
            self.queued = false;
        }
        Ok(())
    }

    fn take_block(&mut self, i: usize) -> Result<Block> {
        self.blocks.get_mut(i).and_then(Option::take).ok_or_else(|| Error::internal("a run lost a block"))
    }

    fn take_out(&mut self, i: usize) -> Result<Buffer> {
        match self.outs.get_mut(i).and_then(Option::take) {
            Some(HostOut::Block(b)) => Ok(Buffer::from_block(b)),
            Some(HostOut::Vec(v)) => Ok(Buffer::host(Bytes::from(v))),
            None => Err(Error::internal("a run lost an output")),
        }
    }
}

impl<S: Stream + ?Sized> Drop for InFlight<'_, S> {
    fn drop(&mut self) {
        if !self.queued {
            return;
        }
        if let Err(e) = self.stream.sync() {
            // The GPU may still read or write these: leak them rather than hand them out again.
            let blocks = self.blocks.iter().flatten().count();
            tracing::error!(
                "TensorRT: the stream could not be synchronized after a failed run ({e}); {blocks} block(s) of \
                 pooled memory are left unused for good"
            );
            for b in self.blocks.drain(..).flatten() {
                std::mem::forget(b);
            }
            for o in self.outs.drain(..).flatten() {
                std::mem::forget(o);
            }
            for b in self.held.drain(..) {
                std::mem::forget(b);
            }
        }
    }
}

/// Selects `profile` on the context (when `current` differs) and waits for the work it queues.
pub fn select<S: Stream + ?Sized>(stream: &mut S, current: &mut Option<usize>, profile: usize) -> Result<()> {
    let mut flight = InFlight::new(stream);
    flight.select(current, profile)?;
    flight.sync()
}

/// Runs the engine with `profile` (selecting it on the context first when `current` differs) on
/// `inputs`, returning `outputs` (I/O indices) in that order.
pub fn run<S: Stream + ?Sized>(
    stream: &mut S,
    memory: &Memory<'_>,
    desc: &EngineDesc,
    current: &mut Option<usize>,
    profile: usize,
    inputs: &[RunInput<'_>],
    outputs: &[usize],
) -> Result<Vec<RunOutput>> {
    let mut flight = InFlight::new(stream);
    flight.select(current, profile)?;
    bind_inputs(&mut flight, memory, inputs)?;
    let slots = bind_outputs(&mut flight, memory, desc)?;
    flight.queue(|s| s.enqueue())?;
    read_outputs(&mut flight, memory, &slots, outputs)
}

/// An output's memory: (io, shape, block handle, mapped).
type OutputSlot = (usize, Vec<i64>, usize, bool);

/// Sets each input's shape and gives it memory holding its data (copied in when on the device).
fn bind_inputs<S: Stream + ?Sized>(
    flight: &mut InFlight<'_, S>,
    memory: &Memory<'_>,
    inputs: &[RunInput<'_>],
) -> Result<()> {
    for input in inputs {
        flight.stream.set_input_shape(input.io, input.shape)?;
        let bytes = input.data.to_host()?;
        let ptr = match memory.allocate(bytes.len())? {
            Slot::Mapped(mut b) => {
                if let Some(dst) = b.as_mut_slice() {
                    dst.copy_from_slice(&bytes);
                }
                let host = b.addr();
                flight.hold(b);
                flight.stream.mapped_pointer(host)?
            }
            Slot::Device(b) => {
                let addr = b.addr() as u64;
                let i = flight.hold(b);
                flight.copy_in(i, bytes)?;
                addr
            }
        };
        flight.stream.set_address(input.io, ptr)?;
    }
    Ok(())
}

/// Gives every output memory of its shape's size.
fn bind_outputs<S: Stream + ?Sized>(
    flight: &mut InFlight<'_, S>,
    memory: &Memory<'_>,
    desc: &EngineDesc,
) -> Result<Vec<OutputSlot>> {
    // Every output needs an address, requested or not: (io, shape, block handle, mapped).
    let mut slots = Vec::new();
    for (io, t) in desc.io.iter().enumerate().filter(|(_, t)| !t.input) {
        let shape = flight.stream.tensor_shape(io)?;
        let elems = shape
            .iter()
            .try_fold(1usize, |acc, &x| usize::try_from(x).ok().and_then(|x| acc.checked_mul(x)))
            .ok_or_else(|| Error::internal(format!("output '{}' has an unknown shape {shape:?}", t.name)))?;
        let size = t.datatype().and_then(|dt| dt.byte_size()).unwrap_or(1);
        let (ptr, handle, mapped) = match memory.allocate(elems.saturating_mul(size))? {
            Slot::Mapped(b) => {
                let host = b.addr();
                let h = flight.hold(b);
                (flight.stream.mapped_pointer(host)?, h, true)
            }
            Slot::Device(b) => {
                let addr = b.addr() as u64;
                (addr, flight.hold(b), false)
            }
        };
        flight.stream.set_address(io, ptr)?;
        slots.push((io, shape, handle, mapped));
    }
    Ok(slots)
}

/// Brings `outputs` back (device ones copied into host memory) once the run is done, in that order.
fn read_outputs<S: Stream + ?Sized>(
    flight: &mut InFlight<'_, S>,
    memory: &Memory<'_>,
    slots: &[OutputSlot],
    outputs: &[usize],
) -> Result<Vec<RunOutput>> {
    // Device outputs come back into host memory, queued on the same stream.
    enum Ready {
        Block(usize),
        Out(usize),
    }
    let mut wanted = Vec::with_capacity(outputs.len());
    for &o in outputs {
        let (_, shape, handle, mapped) =
            slots.iter().find(|(io, ..)| *io == o).ok_or_else(|| Error::internal("output without memory"))?;
        let ready = if *mapped { Ready::Block(*handle) } else { Ready::Out(flight.copy_out(*handle, memory)?) };
        wanted.push((shape.clone(), ready));
    }
    flight.sync()?;
    let mut out = Vec::with_capacity(wanted.len());
    for (shape, ready) in wanted {
        let data = match ready {
            // Zero-copy: the mapped block itself becomes the response's bytes.
            Ready::Block(h) => Buffer::from_block(flight.take_block(h)?),
            Ready::Out(h) => flight.take_out(h)?,
        };
        debug_assert!(data.memory_type() != MemoryType::Gpu { device_id: memory.device });
        out.push(RunOutput { shape, data });
    }
    Ok(out)
}

/// Failures injected on purpose into real runs, for `jetson/selftest.sh` on a device:
/// `TRITONRS_TRT_FAULT=<step>:<n>[,<step>:<n>...]` makes the n-th call (counted from 1 over the
/// process) of that [`Stream`] step report an error. The queuing steps (`copy_in`, `enqueue`,
/// `copy_out`) fail *after* the real call, so the GPU really has work queued on memory the run
/// holds: the worst case for the guard above.
#[derive(Debug, Default)]
pub struct Faults {
    rules: Vec<(String, usize)>,
    counts: parking_lot::Mutex<Vec<usize>>,
}

/// The step names `TRITONRS_TRT_FAULT` knows.
const STEPS: &[&str] =
    &["set_profile", "set_input_shape", "tensor_shape", "set_address", "copy_in", "enqueue", "copy_out", "sync"];

impl Faults {
    /// Parses the variable's value; an error names what is wrong.
    pub fn parse(spec: &str) -> Result<Faults> {
        let mut rules = Vec::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (step, n) =
                part.split_once(':').ok_or_else(|| Error::invalid(format!("'{part}' is not <step>:<n>")))?;
            let step = step.trim();
            if !STEPS.contains(&step) {
                return Err(Error::invalid(format!("'{step}' is not a step ({})", STEPS.join(", "))));
            }
            let n: usize = n
                .trim()
                .parse()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| Error::invalid(format!("'{n}' in '{part}' is not a count from 1")))?;
            rules.push((step.to_string(), n));
        }
        let counts = parking_lot::Mutex::new(vec![0; STEPS.len()]);
        Ok(Faults { rules, counts })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Counts a call of `step`; an error when it is one to fail.
    fn check(&self, step: &str) -> Result<()> {
        let Some(i) = STEPS.iter().position(|s| *s == step) else { return Ok(()) };
        let n = {
            let mut counts = self.counts.lock();
            counts[i] += 1;
            counts[i]
        };
        if self.rules.iter().any(|(s, k)| s == step && *k == n) {
            return Err(Error::internal(format!("{step} call {n} failed: injected by TRITONRS_TRT_FAULT")));
        }
        Ok(())
    }
}

/// A stream whose steps fail as [`Faults`] says.
pub struct Faulty<'a, S: Stream + ?Sized> {
    pub inner: &'a mut S,
    pub faults: &'a Faults,
}

impl<S: Stream + ?Sized> Stream for Faulty<'_, S> {
    fn set_profile(&mut self, profile: usize) -> Result<()> {
        self.faults.check("set_profile")?;
        self.inner.set_profile(profile)
    }
    fn set_input_shape(&mut self, io: usize, shape: &[i64]) -> Result<()> {
        self.faults.check("set_input_shape")?;
        self.inner.set_input_shape(io, shape)
    }
    fn tensor_shape(&mut self, io: usize) -> Result<Vec<i64>> {
        self.faults.check("tensor_shape")?;
        self.inner.tensor_shape(io)
    }
    fn mapped_pointer(&mut self, host: usize) -> Result<u64> {
        self.inner.mapped_pointer(host)
    }
    fn set_address(&mut self, io: usize, ptr: u64) -> Result<()> {
        self.faults.check("set_address")?;
        self.inner.set_address(io, ptr)
    }
    fn copy_in(&mut self, dst: u64, src: &[u8]) -> Result<()> {
        self.inner.copy_in(dst, src)?;
        self.faults.check("copy_in")
    }
    fn copy_out(&mut self, dst: &mut [u8], src: u64) -> Result<()> {
        self.inner.copy_out(dst, src)?;
        self.faults.check("copy_out")
    }
    fn enqueue(&mut self) -> Result<()> {
        self.inner.enqueue()?;
        self.faults.check("enqueue")
    }
    fn sync(&mut self) -> Result<()> {
        self.faults.check("sync")?;
        self.inner.sync()
    }
}

#[cfg(test)]
mod tests;
