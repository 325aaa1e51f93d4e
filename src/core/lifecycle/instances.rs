//! Instance creation: each selected version loads on the bounded pool, its instances created from the
//! instance groups, warmed up and rate-limited, then its scheduler started.

use super::config::Plan;
use super::ensemble::{self, EnsemblePlan};
use super::manager::ModelManager;
use super::state::LoadedModel;
use crate::core::rate_limiter::{Limited, Needs, RateLimiter, ResourceKey};
use crate::core::scheduler;
use crate::core::validate::ModelIo;
use crate::core::warmup;
use crate::error::{Error, Result};
use crate::model_api::{
    BackendRegistry, ExecRequest, ExecResult, InstanceKind, InstanceSpec, ModelContext, ModelInstance,
};
use crate::platform::affinity::HostPolicies;
use crate::platform::gpu_limit::{self, GpuLimits};
use crate::proto::inference::model_instance_group::secondary_device::SecondaryDeviceKind as SecondaryKind;
use crate::proto::inference::{model_instance_group::Kind, ModelConfig, ModelRateLimiter};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;
use tokio::task::JoinHandle;

/// A version's load task: the version and the loaded model or why it failed.
pub(super) type VersionLoad = JoinHandle<(i64, Result<Arc<LoadedModel>>)>;

impl ModelManager {
    /// Starts loading every version `plan` selects, each on the load pool (`--model-load-thread-count`);
    /// an ensemble (`ensemble`) builds its scheduler over the composing models instead of instances.
    pub(super) fn spawn_versions(
        self: &Arc<Self>,
        name: &str,
        plan: &Plan,
        ensemble: Option<Arc<EnsemblePlan>>,
    ) -> Vec<VersionLoad> {
        let mut tasks = Vec::new();
        for &v in &plan.wanted {
            let this = self.clone();
            let (cfg, dir, labels, name) = (plan.cfg.clone(), plan.dir.clone(), plan.labels.clone(), name.to_string());
            let ensemble = ensemble.clone();
            tasks.push(tokio::spawn(async move {
                let _permit = this.load_slots.acquire().await;
                if let Some(plan) = ensemble {
                    return (v, ensemble::load_version(&name, v, cfg, &dir, labels, &plan, this.steps.clone()));
                }
                let worker = this.clone();
                let res = tokio::task::spawn_blocking(move || {
                    // As tritonserver's --model-load-retry-count: a failed version is loaded again.
                    let retries = worker.opts.load_retry_count;
                    let mut attempt = 0;
                    loop {
                        let res = load_version(
                                &worker.backends,
                                worker.limiter.as_ref(),
                                worker.opts.max_tensor_bytes,
                                &name,
                                v,
                                cfg.clone(),
                                &dir,
                                labels.clone(),
                                &worker.opts.host_policies,
                                &worker.opts.gpu_limits,
                            );
                        match res {
                            Err(e) if attempt < retries => {
                                attempt += 1;
                                tracing::warn!(
                                    "Model '{name}' version {v} failed to load ({}); retrying, attempt {attempt} of {retries}.",
                                    e.message
                                );
                            }
                            res => break res,
                        }
                    }
                })
                .await
                .unwrap_or_else(|e| Err(Error::internal(format!("model load task failed: {e}"))));
                (v, res)
            }));
        }
        tasks
    }
}

/// Creates every instance of one version and starts its scheduler.
#[allow(clippy::too_many_arguments)]
pub(super) fn load_version(
    backends: &BackendRegistry,
    limiter: Option<&Arc<RateLimiter>>,
    max_tensor_bytes: usize,
    name: &str,
    version: i64,
    cfg: Arc<ModelConfig>,
    dir: &Path,
    labels: Arc<HashMap<String, Arc<Vec<String>>>>,
    host_policies: &HostPolicies,
    gpu_limits: &GpuLimits,
) -> Result<Arc<LoadedModel>> {
    let started = Instant::now();
    let version_dir = dir.join(version.to_string());
    if !version_dir.is_dir() {
        return Err(Error::invalid(format!("version folder '{}' does not exist", version_dir.display())));
    }
    let backend = backends.get(&cfg.backend)?;
    let io = ModelIo::from_config(&cfg)?;
    let ctx = ModelContext {
        name: name.to_string(),
        version,
        config: cfg.clone(),
        model_dir: dir.to_path_buf(),
        version_dir,
    };
    let samples = warmup::samples(&cfg, dir, max_tensor_bytes)?;
    let limits = instance_limits(&cfg);
    let mut instances = Vec::new();
    let mut probes = Vec::new();
    let mut retirements = Vec::new();
    let mut memory = Vec::new();
    let mut served_by = None;
    let policies = instance_policies(&cfg, host_policies)?;
    for ((spec, limit), policy) in instance_specs(&cfg).into_iter().zip(limits).zip(policies) {
        backend.check_instance(&ctx, &spec)?;
        if let InstanceKind::Gpu { device_id } = spec.kind {
            check_instance_gpu(&spec.name, device_id)?;
            if !gpu_limits.is_empty() {
                gpu_limit::check(gpu_limits, device_id, gpu_limit::read(device_id))
                    .map_err(|e| e.context(format!("instance '{}'", spec.name)))?;
            }
        }
        let mut inst = backend.create_instance(&ctx, &spec)?;
        probes.extend(inst.readiness());
        memory.extend(inst.memory_usage());
        retirements.extend(inst.retirement());
        served_by = served_by.or_else(|| inst.served_by());
        // Warmup runs before the scheduler exists, so no request can reach a cold instance.
        warmup::run(&mut *inst, &samples, &spec.name)?;
        if let (Some(limiter), Some(rl)) = (limiter, limit) {
            inst = rate_limited(limiter, rl, &spec.kind, inst)?;
        }
        if let Some(cores) = policy {
            inst = Box::new(Pinned { inner: inst, cores: cores.clone() });
        }
        instances.push((spec.name, inst));
    }
    if !samples.is_empty() {
        tracing::info!("Model '{name}' version {version} ran {} warmup sample(s) on each instance.", samples.len());
    }
    let model = LoadedModel::assemble(name, version, cfg, io, &labels, started, |cfg, stats| {
        scheduler::start(name, cfg, dir, instances, stats)
    })?;
    model.stats.set_memory_usage(memory);
    Ok(Arc::new(LoadedModel { probes, served_by, retirements, folder: Some(dir.to_path_buf()), ..model }))
}

/// Wraps an instance so that it holds its group's `rate_limiter` resources while it executes.
fn rate_limited(
    limiter: &Arc<RateLimiter>,
    rl: &ModelRateLimiter,
    kind: &InstanceKind,
    inst: Box<dyn ModelInstance>,
) -> Result<Box<dyn ModelInstance>> {
    let device = match *kind {
        InstanceKind::Cpu | InstanceKind::Model => None,
        InstanceKind::Gpu { device_id } => Some(device_id),
    };
    let needs = Needs {
        resources: rl
            .resources
            .iter()
            .map(|r| {
                let key = ResourceKey { name: r.name.clone(), device: (!r.global).then_some(device) };
                (key, r.count)
            })
            .collect(),
        priority: rl.priority,
    };
    limiter.register(&needs)?;
    Ok(Box::new(Limited { inner: inst, limiter: limiter.clone(), needs }))
}

/// The `rate_limiter` of each instance's group, in [`instance_specs`] order.
fn instance_limits(cfg: &ModelConfig) -> Vec<Option<&ModelRateLimiter>> {
    let mut out = Vec::new();
    for g in &cfg.instance_group {
        let devices = if g.kind == Kind::Gpu as i32 { g.gpus.len().max(1) } else { 1 };
        for _ in 0..devices * g.count.max(1) as usize {
            out.push(g.rate_limiter.as_ref());
        }
    }
    out
}

/// The cores of each instance's group's `host_policy` (`--host-policy`), in [`instance_specs`] order;
/// a policy no flag defines fails the load.
fn instance_policies<'a>(cfg: &ModelConfig, policies: &'a HostPolicies) -> Result<Vec<Option<&'a Vec<usize>>>> {
    let mut out = Vec::new();
    for g in &cfg.instance_group {
        let cores = if g.host_policy.is_empty() {
            None
        } else {
            Some(policies.get(&g.host_policy).ok_or_else(|| {
                Error::invalid(format!(
                    "model '{}': field 'instance_group.host_policy': host policy '{}' of instance group '{}' is \
                     not defined; define it with --host-policy={},cpu-cores=<cores>",
                    cfg.name, g.host_policy, g.name, g.host_policy
                ))
            })?)
        };
        let devices = if g.kind == Kind::Gpu as i32 { g.gpus.len().max(1) } else { 1 };
        out.extend(std::iter::repeat_n(cores, devices * g.count.max(1) as usize));
    }
    Ok(out)
}

/// An instance whose thread a host policy pins to its cores, once it starts.
struct Pinned {
    inner: Box<dyn ModelInstance>,
    cores: Vec<usize>,
}

impl ModelInstance for Pinned {
    fn execute(&mut self, req: &ExecRequest) -> Result<ExecResult> {
        self.inner.execute(req)
    }
    fn takes_request_lists(&self) -> bool {
        self.inner.takes_request_lists()
    }
    fn execute_list(&mut self, reqs: &[&ExecRequest]) -> Vec<Result<ExecResult>> {
        self.inner.execute_list(reqs)
    }
    fn begin(&mut self, req: &ExecRequest) -> Option<Result<u64>> {
        self.inner.begin(req)
    }
    fn finish(&mut self, ticket: u64, req: &ExecRequest) -> Result<ExecResult> {
        self.inner.finish(ticket, req)
    }
    fn readiness(&self) -> Option<Arc<dyn crate::model_api::Readiness>> {
        self.inner.readiness()
    }
    fn served_by(&self) -> Option<String> {
        self.inner.served_by()
    }
    fn retirement(&self) -> Option<Arc<dyn crate::model_api::Retirement>> {
        self.inner.retirement()
    }
    fn thread_started(&mut self) {
        match crate::platform::affinity::pin_current_thread(&self.cores) {
            Ok(()) => tracing::debug!("Instance thread pinned to cores {:?} by its host policy.", self.cores),
            Err(e) => tracing::warn!("The host policy could not pin an instance thread: {}.", e.message),
        }
        self.inner.thread_started();
    }
}

/// A KIND_GPU instance needs its GPU, whatever the backend, as tritonserver checks the instance group
/// before the backend sees it: its error names the instance ("instance 'm_0' is KIND_GPU, but no CUDA
/// driver could be loaded ...").
fn check_instance_gpu(instance: &str, index: i32) -> Result<()> {
    crate::platform::cuda::check_gpu(index)
        .map(drop)
        .map_err(|e| Error::unavailable(format!("instance '{instance}' is KIND_GPU, but {}", e.message)))
}

/// Expands `instance_group` into named instances, as Triton names them (`<group>_<index>`).
pub fn instance_specs(cfg: &ModelConfig) -> Vec<InstanceSpec> {
    let mut out = Vec::new();
    for g in &cfg.instance_group {
        let count = g.count.max(1);
        let devices: Vec<Option<i32>> = if g.kind == Kind::Gpu as i32 {
            if g.gpus.is_empty() {
                vec![Some(0)]
            } else {
                g.gpus.iter().map(|&d| Some(d)).collect()
            }
        } else {
            vec![None]
        };
        let mut idx = 0;
        for dev in devices {
            for _ in 0..count {
                out.push(InstanceSpec {
                    name: format!("{}_{idx}", g.name),
                    kind: match dev {
                        Some(device_id) => InstanceKind::Gpu { device_id },
                        None if g.kind == Kind::Model as i32 => InstanceKind::Model,
                        None => InstanceKind::Cpu,
                    },
                    profiles: g.profile.clone(),
                    dla_core: g
                        .secondary_devices
                        .iter()
                        .find(|d| d.kind == SecondaryKind::KindNvdla as i32)
                        .and_then(|d| i32::try_from(d.device_id).ok()),
                });
                idx += 1;
            }
        }
    }
    out
}
