//! A mock TensorRT for tests: the "plan" is a JSON description of an engine, and running it checks
//! shapes against the chosen profile, as TensorRT's setInputShape does, then adds the inputs (FP32)
//! element by element into every output. Every run is recorded for assertions.

use super::engine::{EngineDesc, IoDesc, Range};
use super::{Context, Engine, RunInput, RunOutput, Runtime};
use crate::error::{Error, Result};
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
}

/// One recorded run: the profile and the input shapes.
pub type Run = (usize, Vec<Vec<i64>>);

#[derive(Default)]
pub struct MockRuntime {
    pub runs: Arc<Mutex<Vec<Run>>>,
    /// Devices engines were deserialized on.
    pub devices: Mutex<Vec<i32>>,
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
        self.devices.lock().push(device);
        Ok(Arc::new(MockEngine { desc, runs: self.runs.clone() }))
    }
}

struct MockEngine {
    desc: EngineDesc,
    runs: Arc<Mutex<Vec<Run>>>,
}

impl Engine for MockEngine {
    fn desc(&self) -> &EngineDesc {
        &self.desc
    }
    fn create_context(self: Arc<Self>, _device: i32) -> Result<Box<dyn Context>> {
        Ok(Box::new(MockContext { engine: self }))
    }
}

struct MockContext {
    engine: Arc<MockEngine>,
}

impl Context for MockContext {
    fn run(&mut self, profile: usize, inputs: &[RunInput<'_>], outputs: &[usize]) -> Result<Vec<RunOutput>> {
        let desc = &self.engine.desc;
        for i in inputs {
            if let Some(Some(r)) = desc.profiles.get(profile).and_then(|p| p.get(i.io)) {
                if !r.contains(i.shape) {
                    return Err(Error::invalid(format!(
                        "mock TensorRT: shape {:?} outside profile {profile}",
                        i.shape
                    )));
                }
            }
        }
        self.engine.runs.lock().push((profile, inputs.iter().map(|i| i.shape.to_vec()).collect()));
        let first = inputs.first().ok_or_else(|| Error::invalid("mock TensorRT: no inputs"))?;
        let mut sum = vec![0f32; first.data.len() / 4];
        for i in inputs {
            let bytes = i.data.to_host()?;
            for (acc, c) in sum.iter_mut().zip(bytes.chunks_exact(4)) {
                *acc += f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        let bytes: Vec<u8> = sum.iter().flat_map(|v| v.to_le_bytes()).collect();
        Ok(outputs.iter().map(|_| RunOutput { shape: first.shape.to_vec(), data: bytes.clone().into() }).collect())
    }
}
