//! A mock TensorRT for tests: the "plan" is a JSON description of an engine, and running it goes
//! through the backend's own `run::run` over a fake stream and fake device memory ([`FakeStream`]),
//! which checks shapes against the chosen profile, as TensorRT's setInputShape does, then adds the
//! inputs (FP32) element by element into every output. Every run is recorded for assertions.

use super::engine::{EngineDesc, IoDesc, Range};
use super::run::{self, Memory, Readback, Stream};
use super::{Context, Engine, RunInput, RunOutput, Runtime};
use crate::error::{Error, Result};
use crate::memory::pool::testing::TestAllocator;
use crate::memory::pool::{Allocator, Pool, Pools};
use crate::memory::MemoryType;
use parking_lot::Mutex;
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Deserialize)]
struct PlanIo {
    name: String,
    input: bool,
    /// nvinfer1::DataType
    dtype: i32,
    dims: Vec<i64>,
    #[serde(default)]
    shape_tensor: bool,
}

#[derive(Deserialize)]
struct Plan {
    io: Vec<PlanIo>,
    /// Per profile: input name -> [min, opt, max].
    #[serde(default)]
    profiles: Vec<HashMap<String, [Vec<i64>; 3]>>,
    #[serde(default)]
    implicit_batch: bool,
    /// How long `enqueue` takes, so concurrent runs overlap.
    #[serde(default)]
    enqueue_ms: u64,
}

/// One recorded run: the profile and the input shapes.
pub type Run = (usize, Vec<Vec<i64>>);

#[derive(Default)]
pub struct MockRuntime {
    pub runs: Arc<Mutex<Vec<Run>>>,
    /// Devices engines were deserialized on.
    pub devices: Mutex<Vec<i32>>,
    /// (device, DLA core) of each engine deserialized for a DLA core.
    pub dla_cores: Mutex<Vec<(i32, i32)>>,
}

impl MockRuntime {
    pub fn describe(plan: &[u8]) -> Result<EngineDesc> {
        let plan: Plan = serde_json::from_slice(plan).map_err(|e| {
            Error::invalid(format!(
                "TensorRT 10.0.0 cannot deserialize the engine (built for another TensorRT version or GPU, or not an \
                 engine): mock: {e}"
            ))
        })?;
        let io: Vec<IoDesc> = plan
            .io
            .iter()
            .map(|t| IoDesc {
                name: t.name.clone(),
                input: t.input,
                trt_dtype: t.dtype,
                dims: t.dims.clone(),
                shape_tensor: t.shape_tensor,
                host: false,
                not_linear: false,
            })
            .collect();
        let profiles = plan
            .profiles
            .iter()
            .map(|p| {
                io.iter()
                    .map(|t| {
                        p.get(&t.name).map(|[min, opt, max]| Range {
                            min: min.clone(),
                            opt: opt.clone(),
                            max: max.clone(),
                        })
                    })
                    .collect()
            })
            .collect();
        Ok(EngineDesc { io, profiles, implicit_batch: plan.implicit_batch })
    }
}

impl Runtime for Arc<MockRuntime> {
    fn deserialize(&self, device: i32, plan: &[u8]) -> Result<Arc<dyn Engine>> {
        let desc = MockRuntime::describe(plan)?;
        let enqueue_ms = serde_json::from_slice::<Plan>(plan).map(|p| p.enqueue_ms).unwrap_or(0);
        self.devices.lock().push(device);
        let busy = Arc::new(Mutex::new(vec![0; desc.profiles.len().max(1)]));
        Ok(Arc::new(MockEngine { desc, runs: self.runs.clone(), busy, enqueue_ms }))
    }

    fn deserialize_dla(&self, device: i32, dla_core: i32, plan: &[u8]) -> Result<Arc<dyn Engine>> {
        self.dla_cores.lock().push((device, dla_core));
        self.deserialize(device, plan)
    }
}

struct MockEngine {
    desc: EngineDesc,
    runs: Arc<Mutex<Vec<Run>>>,
    /// Per profile: runs in flight on it, over all contexts (TensorRT allows one).
    busy: Arc<Mutex<Vec<usize>>>,
    enqueue_ms: u64,
}

impl Engine for MockEngine {
    fn desc(&self) -> &EngineDesc {
        &self.desc
    }
    fn create_context(self: Arc<Self>, device: i32) -> Result<Box<dyn Context>> {
        let script = Script::new();
        let pools = fake_pools(device, 64 << 20, &script);
        let mut stream = FakeStream::new(self.desc.clone(), self.runs.clone(), script);
        stream.busy = Some(self.busy.clone());
        stream.enqueue_ms = self.enqueue_ms;
        Ok(Box::new(MockContext { engine: self, stream, pools, device, profile: None }))
    }
}

/// An execution context over [`FakeStream`]: runs go through the same `run::run` as on a GPU.
struct MockContext {
    engine: Arc<MockEngine>,
    stream: FakeStream,
    pools: Pools,
    device: i32,
    profile: Option<usize>,
}

impl Context for MockContext {
    fn run(&mut self, profile: usize, inputs: &[RunInput<'_>], outputs: &[usize]) -> Result<Vec<RunOutput>> {
        let memory = Memory { pools: &self.pools, device: self.device, mapped: false, readback: Readback::Pinned };
        run::run(&mut self.stream, &memory, &self.engine.desc, &mut self.profile, profile, inputs, outputs)
    }
    fn select_profile(&mut self, profile: usize) -> Result<()> {
        run::select(&mut self.stream, &mut self.profile, profile)
    }
}

/// What a [`FakeStream`] and its fake device memory did, shared with the test that drives them: every
/// step counts, and `fail_at` makes that step fail (as a CUDA or TensorRT call would).
#[derive(Default)]
pub struct Script {
    /// Step numbers, from 0, that fail.
    pub fail: Vec<usize>,
    /// Steps so far.
    pub steps: usize,
    /// Each step's name, with "!" appended when it failed.
    pub events: Vec<String>,
    /// The pools whose used bytes are recorded at every step (set by the test).
    pub watch: Vec<Pool>,
    /// Used bytes of the watched pools at each step.
    pub used: Vec<u64>,
    /// Used bytes at each `sync`, and the most seen before it.
    pub at_sync: Vec<(u64, u64)>,
}

impl Script {
    pub fn new() -> Arc<Mutex<Script>> {
        Arc::new(Mutex::new(Script::default()))
    }

    /// Records step `name`; an error if it is the one to fail.
    fn step(&mut self, name: &str) -> Result<()> {
        let used: u64 = self.watch.iter().map(|p| p.stats().used_bytes).sum();
        let n = self.steps;
        self.steps += 1;
        if name == "sync" {
            let most = self.used.iter().copied().max().unwrap_or(0);
            self.at_sync.push((used, most));
        }
        self.used.push(used);
        if self.fail.contains(&n) {
            self.events.push(format!("{name}!"));
            return Err(Error::internal(format!("fake: {name} failed")));
        }
        self.events.push(name.to_string());
        Ok(())
    }
}

/// Pools for a fake GPU: host memory standing in for page-locked memory in the pinned pool, fake device memory of `device_bytes`
/// (falling back to more of it) for the device pool: addresses that name no host memory (only
/// [`FakeStream`] reads them), each allocation a step of the script.
pub fn fake_pools(device: i32, device_bytes: usize, script: &Arc<Mutex<Script>>) -> Pools {
    let fake = || {
        let mut a = TestAllocator::new(MemoryType::Gpu { device_id: device }, false, false);
        let script = script.clone();
        a.before = Box::new(move || script.lock().step("alloc"));
        Box::new(a) as Box<dyn Allocator>
    };
    let pool = Pool::new(format!("cuda:{device}"), device_bytes, fake(), fake());
    let pinned = TestAllocator::new(MemoryType::CpuPinned, false, true);
    Pools {
        pinned: Pool::new("pinned", 64 << 20, Box::new(pinned), Box::new(crate::memory::pool::HostAllocator)),
        gpus: vec![(device, pool, String::new())],
    }
}

/// A fake CUDA stream and execution context over [`FakeDevice`] memory: shapes are checked against
/// the selected profile as `setInputShape` does, `enqueue` adds the inputs (FP32) element by element
/// into every output (whose shape is the first input's), and every call is a step of the [`Script`].
pub struct FakeStream {
    desc: EngineDesc,
    runs: Arc<Mutex<Vec<Run>>>,
    pub script: Arc<Mutex<Script>>,
    profile: Option<usize>,
    shapes: HashMap<usize, Vec<i64>>,
    addresses: HashMap<usize, u64>,
    /// Device memory by block address.
    memory: HashMap<u64, Vec<u8>>,
    /// The engine's runs in flight per profile: a second one at once fails, as TensorRT requires one
    /// execution context per profile at a time.
    pub busy: Option<Arc<Mutex<Vec<usize>>>>,
    /// The profile this stream's queued run holds in `busy` until `sync`.
    running: Option<usize>,
    pub enqueue_ms: u64,
}

impl FakeStream {
    pub fn new(desc: EngineDesc, runs: Arc<Mutex<Vec<Run>>>, script: Arc<Mutex<Script>>) -> FakeStream {
        FakeStream {
            desc,
            runs,
            script,
            profile: None,
            shapes: HashMap::new(),
            addresses: HashMap::new(),
            memory: HashMap::new(),
            busy: None,
            running: None,
            enqueue_ms: 0,
        }
    }

    fn step(&self, name: &str) -> Result<()> {
        self.script.lock().step(name)
    }
}

impl Stream for FakeStream {
    fn set_profile(&mut self, profile: usize) -> Result<()> {
        self.step("set_profile")?;
        if profile >= self.desc.profiles.len().max(1) {
            return Err(Error::internal(format!("mock TensorRT: no profile {profile}")));
        }
        self.profile = Some(profile);
        Ok(())
    }

    fn set_input_shape(&mut self, io: usize, shape: &[i64]) -> Result<()> {
        self.step("set_input_shape")?;
        let profile = self.profile.ok_or_else(|| Error::internal("mock TensorRT: no profile selected"))?;
        if let Some(Some(r)) = self.desc.profiles.get(profile).and_then(|p| p.get(io)) {
            if !r.contains(shape) {
                return Err(Error::invalid(format!("mock TensorRT: shape {shape:?} outside profile {profile}")));
            }
        }
        self.shapes.insert(io, shape.to_vec());
        Ok(())
    }

    fn tensor_shape(&mut self, io: usize) -> Result<Vec<i64>> {
        self.step("tensor_shape")?;
        let first = self.desc.io.iter().position(|t| t.input).and_then(|i| self.shapes.get(&i));
        match (self.desc.io.get(io), first) {
            (Some(t), Some(shape)) if !t.input => Ok(shape.clone()),
            _ => Err(Error::internal(format!("mock TensorRT: no shape for tensor {io}"))),
        }
    }

    fn mapped_pointer(&mut self, host: usize) -> Result<u64> {
        self.step("mapped_pointer")?;
        Ok(host as u64)
    }

    fn set_address(&mut self, io: usize, ptr: u64) -> Result<()> {
        self.step("set_address")?;
        self.addresses.insert(io, ptr);
        Ok(())
    }

    fn copy_in(&mut self, dst: u64, src: &[u8]) -> Result<()> {
        self.step("copy_in")?;
        self.memory.insert(dst, src.to_vec());
        Ok(())
    }

    fn copy_out(&mut self, dst: &mut [u8], src: u64) -> Result<()> {
        self.step("copy_out")?;
        let bytes =
            self.memory.get(&src).ok_or_else(|| Error::internal("mock TensorRT: copy from unwritten memory"))?;
        let n = dst.len().min(bytes.len());
        dst[..n].copy_from_slice(&bytes[..n]);
        Ok(())
    }

    fn enqueue(&mut self) -> Result<()> {
        self.step("enqueue")?;
        let profile = self.profile.unwrap_or(0);
        if let Some(busy) = &self.busy {
            let mut busy = busy.lock();
            if busy.get(profile).copied().unwrap_or(0) > 0 {
                return Err(Error::internal(format!(
                    "mock TensorRT: profile {profile} is in use by another execution context"
                )));
            }
            if let Some(b) = busy.get_mut(profile) {
                *b += 1;
                self.running = Some(profile);
            }
        }
        if self.enqueue_ms > 0 {
            std::thread::sleep(std::time::Duration::from_millis(self.enqueue_ms));
        }
        let inputs: Vec<usize> = (0..self.desc.io.len()).filter(|&i| self.desc.io[i].input).collect();
        let shapes = inputs.iter().map(|i| self.shapes.get(i).cloned().unwrap_or_default()).collect();
        self.runs.lock().push((profile, shapes));
        // Inputs in mapped memory are not visible to the fake: they add nothing.
        let mut sum: Vec<f32> = Vec::new();
        for i in &inputs {
            let Some(bytes) = self.addresses.get(i).and_then(|a| self.memory.get(a)) else { continue };
            if sum.is_empty() {
                sum = vec![0.0; bytes.len() / 4];
            }
            for (acc, c) in sum.iter_mut().zip(bytes.chunks_exact(4)) {
                *acc += f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        let bytes: Vec<u8> = sum.iter().flat_map(|v| v.to_le_bytes()).collect();
        for (io, t) in self.desc.io.iter().enumerate() {
            if let (false, Some(&addr)) = (t.input, self.addresses.get(&io)) {
                self.memory.insert(addr, bytes.clone());
            }
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        self.step("sync")?;
        if let (Some(p), Some(busy)) = (self.running.take(), &self.busy) {
            if let Some(b) = busy.lock().get_mut(p) {
                *b -= 1;
            }
        }
        Ok(())
    }
}
