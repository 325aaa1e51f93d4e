//! The search space: which settings a model's variants may change, the candidates of a brute or custom
//! search, the neighbours a quick search climbs through, and a candidate applied to a configuration.

use super::results::{Accelerator, Candidate};
use crate::proto::inference::model_config::SchedulingChoice;
use crate::proto::inference::model_instance_group::Kind;
use crate::proto::inference::model_optimization_policy::execution_accelerators::Accelerator as AcceleratorConfig;
use crate::proto::inference::model_optimization_policy::ExecutionAccelerators;
use crate::proto::inference::{ModelConfig, ModelDynamicBatching, ModelInstanceGroup, ModelParameter};
use serde::Deserialize;
use std::collections::BTreeSet;
use std::path::Path;

/// The values each setting may take for one model.
#[derive(Debug, Clone, PartialEq)]
pub struct Space {
    pub instance_counts: Vec<u32>,
    /// Device kinds: `false` CPU, `true` GPU.
    pub kinds: Vec<bool>,
    /// `max_batch_size` values (only 0 for a model that does not batch).
    pub max_batch_sizes: Vec<u32>,
    /// Dynamic batching off and/or on (only off for a model that does not batch).
    pub dynamic_batching: Vec<bool>,
    /// Queue delays (µs) and preferred sizes tried with dynamic batching on.
    pub queue_delays_us: Vec<u64>,
    pub preferred_batch_sizes: Vec<Vec<u32>>,
    /// ONNX Runtime thread counts (`None`: ORT's default); only the default for other backends.
    pub intra_op_threads: Vec<Option<u32>>,
    pub inter_op_threads: Vec<Option<u32>>,
    /// Accelerators tried on GPU instances.
    pub accelerators: Vec<Accelerator>,
    /// A TensorRT plan's instance_group profile lists (only the model's own for other models).
    pub profiles: Vec<Vec<String>>,
}

/// What the search needs to know about the model and the machine.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_instance_count: u32,
    pub max_batch_size: u32,
    /// Whether a CUDA GPU is usable here.
    pub gpu: bool,
    /// CPU cores, for ONNX Runtime's thread counts.
    pub cores: u32,
}

/// Why a model cannot be tuned.
pub fn untunable(cfg: &ModelConfig) -> Option<String> {
    if matches!(cfg.scheduling_choice, Some(SchedulingChoice::EnsembleScheduling(_))) || cfg.platform == "ensemble" {
        return Some("it is an ensemble; tune the models it is made of".into());
    }
    None
}

fn is_onnx(cfg: &ModelConfig) -> bool {
    cfg.backend == "onnxruntime" || cfg.platform == "onnxruntime_onnx"
}

fn is_plan(cfg: &ModelConfig) -> bool {
    cfg.backend == "tensorrt" || cfg.platform == "tensorrt_plan"
}

/// The optimization profiles a plan's configuration names in its instance groups, in order, once each.
fn listed_profiles(cfg: &ModelConfig) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in cfg.instance_group.iter().flat_map(|g| g.profile.iter()) {
        if !out.contains(p) {
            out.push(p.clone());
        }
    }
    out
}

fn is_sequence(cfg: &ModelConfig) -> bool {
    matches!(cfg.scheduling_choice, Some(SchedulingChoice::SequenceBatching(_)))
}

/// The configuration as it is, as a candidate (the `_config_default` variant).
pub fn current(cfg: &ModelConfig) -> Candidate {
    let groups = &cfg.instance_group;
    let count = if groups.is_empty() { 1 } else { groups.iter().map(|g| g.count.max(1) as u32).sum() };
    let gpu = groups.iter().any(|g| g.kind == Kind::Gpu as i32);
    let dynamic_batching = match &cfg.scheduling_choice {
        Some(SchedulingChoice::DynamicBatching(d)) => {
            Some((d.max_queue_delay_microseconds, d.preferred_batch_size.iter().map(|&p| p.max(0) as u32).collect()))
        }
        _ => None,
    };
    let threads =
        |key: &str| cfg.parameters.get(key).and_then(|p| p.string_value.trim().parse::<u32>().ok()).filter(|&n| n > 0);
    let accelerator = match cfg.optimization.as_ref().and_then(|o| o.execution_accelerators.as_ref()) {
        Some(a) if a.gpu_execution_accelerator.iter().any(|x| x.name == "tensorrt") => Accelerator::TensorRtFp16,
        _ => Accelerator::Default,
    };
    Candidate {
        instance_count: count,
        gpu,
        max_batch_size: cfg.max_batch_size.max(0) as u32,
        dynamic_batching,
        intra_op_threads: threads("intra_op_thread_count"),
        inter_op_threads: threads("inter_op_thread_count"),
        accelerator,
        profiles: cfg.instance_group.first().map(|g| g.profile.clone()).unwrap_or_default(),
    }
}

/// Model Analyzer's automatic search space, adapted to the model: instance counts 1..=max on each
/// device kind the model can use; for a batching model, max_batch_size in powers of two up to the
/// limit with dynamic batching off and on (the model's queue delay and preferred sizes kept); ONNX
/// Runtime's intra-op threads at the default and 1 (several instances with a full thread pool each
/// oversubscribe the cores); CUDA and TensorRT FP16 on a GPU. For a TensorRT plan whose configuration
/// names two or more optimization profiles: every instance on all of them (as configured) or on one
/// of them alone (the engine's own profile count needs TensorRT to read, so profiles the configuration
/// does not name are searched only in a custom space).
pub fn automatic(cfg: &ModelConfig, limits: Limits) -> Space {
    let here = current(cfg);
    let batching = cfg.max_batch_size > 0 && !is_sequence(cfg);
    let mut max_batch_sizes = BTreeSet::new();
    if batching {
        let mut b = 1;
        while b <= limits.max_batch_size.max(1) {
            max_batch_sizes.insert(b);
            b *= 2;
        }
        max_batch_sizes.insert(here.max_batch_size);
    } else {
        max_batch_sizes.insert(here.max_batch_size);
    }
    let (delay, preferred) = here.dynamic_batching.clone().unwrap_or((0, Vec::new()));
    let onnx = is_onnx(cfg);
    let mut intra = vec![None];
    if onnx && limits.cores > 1 {
        intra.push(Some(1));
    }
    let mut kinds = vec![false];
    let mut accelerators = vec![Accelerator::Default];
    if limits.gpu {
        kinds.push(true);
        if onnx {
            accelerators.extend([Accelerator::Cuda, Accelerator::TensorRtFp16]);
        }
    }
    let listed = listed_profiles(cfg);
    let mut profiles = vec![here.profiles.clone()];
    if is_plan(cfg) && listed.len() > 1 {
        if !profiles.contains(&listed) {
            profiles.push(listed.clone());
        }
        profiles.extend(listed.iter().map(|p| vec![p.clone()]).filter(|p| *p != here.profiles));
    }
    Space {
        instance_counts: (1..=limits.max_instance_count.max(1)).collect(),
        kinds,
        max_batch_sizes: max_batch_sizes.into_iter().collect(),
        dynamic_batching: if batching { vec![false, true] } else { vec![false] },
        queue_delays_us: vec![delay],
        preferred_batch_sizes: vec![preferred],
        intra_op_threads: intra,
        inter_op_threads: vec![None],
        accelerators,
        profiles,
    }
}

/// Every combination of the space (accelerators only on GPU instances, queue settings only with
/// dynamic batching on), in a stable order.
pub fn combinations(space: &Space) -> Vec<Candidate> {
    let mut out = Vec::new();
    for &gpu in &space.kinds {
        let accelerators: &[Accelerator] = if gpu { &space.accelerators } else { &[Accelerator::Default] };
        for &accelerator in accelerators {
            for &instance_count in &space.instance_counts {
                for &max_batch_size in &space.max_batch_sizes {
                    for &db in &space.dynamic_batching {
                        let queue: Vec<Option<(u64, Vec<u32>)>> = if db {
                            space
                                .queue_delays_us
                                .iter()
                                .flat_map(|&d| {
                                    space.preferred_batch_sizes.iter().map(move |p| {
                                        Some((d, p.iter().copied().filter(|&x| x <= max_batch_size).collect()))
                                    })
                                })
                                .collect()
                        } else {
                            vec![None]
                        };
                        for dynamic_batching in queue {
                            for &intra_op_threads in &space.intra_op_threads {
                                for &inter_op_threads in &space.inter_op_threads {
                                    for profiles in &space.profiles {
                                        let c = Candidate {
                                            instance_count,
                                            gpu,
                                            max_batch_size,
                                            dynamic_batching: dynamic_batching.clone(),
                                            intra_op_threads,
                                            inter_op_threads,
                                            accelerator,
                                            profiles: profiles.clone(),
                                        };
                                        if !out.contains(&c) {
                                            out.push(c);
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// The quick search's starting point: one instance on the model's device, its own batch size with
/// dynamic batching on when the model batches, default threads.
pub fn start(cfg: &ModelConfig, space: &Space) -> Candidate {
    let here = current(cfg);
    let batching = space.dynamic_batching.contains(&true);
    Candidate {
        instance_count: 1,
        gpu: here.gpu && space.kinds.contains(&true),
        max_batch_size: here.max_batch_size,
        dynamic_batching: if batching {
            Some(here.dynamic_batching.clone().unwrap_or((space.queue_delays_us[0], Vec::new())))
        } else {
            None
        },
        intra_op_threads: None,
        inter_op_threads: None,
        accelerator: if here.gpu { here.accelerator } else { Accelerator::Default },
        profiles: here.profiles,
    }
}

/// Candidates one step from `c` along one setting (Model Analyzer's quick search moves one coordinate
/// at a time): one instance more or fewer, the next or previous max_batch_size, dynamic batching
/// toggled, the other thread setting, the other device kind or accelerator.
pub fn neighbours(c: &Candidate, space: &Space) -> Vec<Candidate> {
    let mut out = Vec::new();
    let mut push = |n: Candidate| {
        if n != *c && !out.contains(&n) {
            out.push(n);
        }
    };
    let step = |values: &[u32], v: u32| -> (Option<u32>, Option<u32>) {
        let i = values.iter().position(|&x| x == v);
        match i {
            Some(i) => (i.checked_sub(1).map(|j| values[j]), values.get(i + 1).copied()),
            None => (values.iter().rev().find(|&&x| x < v).copied(), values.iter().find(|&&x| x > v).copied()),
        }
    };
    let (fewer, more) = step(&space.instance_counts, c.instance_count);
    for n in [more, fewer].into_iter().flatten() {
        push(Candidate { instance_count: n, ..c.clone() });
    }
    let (smaller, larger) = step(&space.max_batch_sizes, c.max_batch_size);
    for b in [larger, smaller].into_iter().flatten() {
        let mut n = Candidate { max_batch_size: b, ..c.clone() };
        if let Some((_, p)) = &mut n.dynamic_batching {
            p.retain(|&x| x <= b);
        }
        push(n);
    }
    if space.dynamic_batching.len() > 1 {
        let db = match c.dynamic_batching {
            Some(_) => None,
            None => Some((space.queue_delays_us[0], space.preferred_batch_sizes[0].clone())),
        };
        push(Candidate { dynamic_batching: db, ..c.clone() });
    }
    for &t in &space.intra_op_threads {
        push(Candidate { intra_op_threads: t, ..c.clone() });
    }
    for &t in &space.inter_op_threads {
        push(Candidate { inter_op_threads: t, ..c.clone() });
    }
    for &gpu in &space.kinds {
        let accelerator = if gpu { c.accelerator } else { Accelerator::Default };
        push(Candidate { gpu, accelerator, ..c.clone() });
    }
    if c.gpu {
        for &a in &space.accelerators {
            push(Candidate { accelerator: a, ..c.clone() });
        }
    }
    for p in &space.profiles {
        push(Candidate { profiles: p.clone(), ..c.clone() });
    }
    out
}

/// `cfg` with the candidate's settings; everything else (inputs, outputs, warmup, parameters the search
/// does not touch) as it was.
pub fn apply(cfg: &ModelConfig, c: &Candidate) -> ModelConfig {
    let mut out = cfg.clone();
    // One group replaces the model's groups, with the candidate's TensorRT profiles.
    out.instance_group = vec![ModelInstanceGroup {
        name: cfg.name.clone(),
        kind: if c.gpu { Kind::Gpu as i32 } else { Kind::Cpu as i32 },
        count: c.instance_count as i32,
        profile: c.profiles.clone(),
        ..Default::default()
    }];
    out.max_batch_size = c.max_batch_size as i32;
    if !is_sequence(cfg) {
        out.scheduling_choice = c.dynamic_batching.as_ref().map(|(delay, preferred)| {
            let mut d = match &cfg.scheduling_choice {
                Some(SchedulingChoice::DynamicBatching(d)) => d.clone(),
                _ => ModelDynamicBatching::default(),
            };
            d.max_queue_delay_microseconds = *delay;
            d.preferred_batch_size = preferred.iter().map(|&p| p as i32).collect();
            SchedulingChoice::DynamicBatching(d)
        });
    }
    for (key, value) in [("intra_op_thread_count", c.intra_op_threads), ("inter_op_thread_count", c.inter_op_threads)] {
        match value {
            Some(n) => {
                out.parameters.insert(key.into(), ModelParameter { string_value: n.to_string() });
            }
            None => {
                out.parameters.remove(key);
            }
        }
    }
    if c.gpu {
        let accelerators = match c.accelerator {
            Accelerator::Default | Accelerator::Cuda => Vec::new(),
            Accelerator::TensorRtFp16 => vec![AcceleratorConfig {
                name: "tensorrt".into(),
                parameters: [("precision_mode".to_string(), "FP16".to_string())].into_iter().collect(),
            }],
        };
        let opt = out.optimization.get_or_insert_with(Default::default);
        opt.execution_accelerators = Some(ExecutionAccelerators {
            gpu_execution_accelerator: accelerators,
            cpu_execution_accelerator: Vec::new(),
        });
    }
    out
}

/// A custom search space (`--search custom:FILE`), in TOML: each key lists the values to try, every
/// combination is measured, and keys left out keep the model's own value. Per-model tables
/// (`[models.NAME]`) override the top level for that model.
///
/// ```toml
/// instance_count = [1, 2]
/// kind = ["cpu"]                # cpu, gpu
/// max_batch_size = [4, 8]
/// dynamic_batching = [false, true]
/// max_queue_delay_us = [0, 500]
/// preferred_batch_size = [[], [4, 8]]
/// intra_op_thread_count = [0, 1] # 0: ONNX Runtime's default
/// inter_op_thread_count = [0]
/// accelerator = ["default"]     # default, cuda, tensorrt-fp16
/// profile = [[], ["0"], ["1"]]  # TensorRT plans: instance_group profile lists ([]: the backend's)
/// ```
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CustomSpace {
    pub instance_count: Option<Vec<u32>>,
    pub kind: Option<Vec<String>>,
    pub max_batch_size: Option<Vec<u32>>,
    pub dynamic_batching: Option<Vec<bool>>,
    pub max_queue_delay_us: Option<Vec<u64>>,
    pub preferred_batch_size: Option<Vec<Vec<u32>>>,
    pub intra_op_thread_count: Option<Vec<u32>>,
    pub inter_op_thread_count: Option<Vec<u32>>,
    pub accelerator: Option<Vec<String>>,
    pub profile: Option<Vec<Vec<String>>>,
    #[serde(default)]
    pub models: std::collections::BTreeMap<String, CustomSpace>,
}

impl CustomSpace {
    pub fn read(path: &Path) -> Result<CustomSpace, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the search space '{}': {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| format!("search space '{}': {e}", path.display()))
    }

    /// The space for `model`: its own table over the top level, over the model's current values.
    pub fn space_for(&self, model: &str, cfg: &ModelConfig) -> Result<Space, String> {
        let own = self.models.get(model);
        let pick = |f: fn(&CustomSpace) -> Option<&Vec<u32>>| own.and_then(f).or_else(|| f(self)).cloned();
        let here = current(cfg);
        let (delay, preferred) = here.dynamic_batching.clone().unwrap_or((0, Vec::new()));
        let nonzero = |v: Vec<u32>| v.into_iter().map(|n| (n > 0).then_some(n)).collect::<Vec<_>>();
        let kinds = self.kinds(own, here.gpu)?;
        let accelerators = self.accelerators(own, here.accelerator)?;
        let max_batch_sizes = pick(|s| s.max_batch_size.as_ref()).unwrap_or_else(|| vec![here.max_batch_size]);
        if cfg.max_batch_size == 0 && max_batch_sizes.iter().any(|&b| b > 0) {
            return Err(format!(
                "model '{model}' does not batch (max_batch_size 0), so max_batch_size cannot be searched"
            ));
        }
        let space = Space {
            instance_counts: pick(|s| s.instance_count.as_ref()).unwrap_or_else(|| vec![here.instance_count]),
            kinds,
            max_batch_sizes,
            dynamic_batching: own
                .and_then(|o| o.dynamic_batching.clone())
                .or_else(|| self.dynamic_batching.clone())
                .unwrap_or_else(|| vec![here.dynamic_batching.is_some()]),
            queue_delays_us: own
                .and_then(|o| o.max_queue_delay_us.clone())
                .or_else(|| self.max_queue_delay_us.clone())
                .unwrap_or_else(|| vec![delay]),
            preferred_batch_sizes: own
                .and_then(|o| o.preferred_batch_size.clone())
                .or_else(|| self.preferred_batch_size.clone())
                .unwrap_or_else(|| vec![preferred]),
            intra_op_threads: pick(|s| s.intra_op_thread_count.as_ref())
                .map(nonzero)
                .unwrap_or_else(|| vec![here.intra_op_threads]),
            inter_op_threads: pick(|s| s.inter_op_thread_count.as_ref())
                .map(nonzero)
                .unwrap_or_else(|| vec![here.inter_op_threads]),
            accelerators,
            profiles: own
                .and_then(|o| o.profile.clone())
                .or_else(|| self.profile.clone())
                .unwrap_or_else(|| vec![here.profiles.clone()]),
        };
        check_custom(&space, model, cfg)?;
        Ok(space)
    }

    /// The kinds (false: CPU, true: GPU) the model's table or the top level lists, else the current one.
    fn kinds(&self, own: Option<&CustomSpace>, here: bool) -> Result<Vec<bool>, String> {
        Ok(match own.and_then(|o| o.kind.as_ref()).or(self.kind.as_ref()) {
            Some(k) => k
                .iter()
                .map(|s| match s.to_ascii_lowercase().as_str() {
                    "cpu" => Ok(false),
                    "gpu" => Ok(true),
                    other => Err(format!("kind '{other}' is not cpu or gpu")),
                })
                .collect::<Result<Vec<_>, _>>()?,
            None => vec![here],
        })
    }

    /// The accelerators the model's table or the top level lists, else the current one.
    fn accelerators(&self, own: Option<&CustomSpace>, here: Accelerator) -> Result<Vec<Accelerator>, String> {
        Ok(match own.and_then(|o| o.accelerator.as_ref()).or(self.accelerator.as_ref()) {
            Some(a) => a
                .iter()
                .map(|s| match s.as_str() {
                    "default" => Ok(Accelerator::Default),
                    "cuda" => Ok(Accelerator::Cuda),
                    "tensorrt-fp16" => Ok(Accelerator::TensorRtFp16),
                    other => Err(format!("accelerator '{other}' is not default, cuda or tensorrt-fp16")),
                })
                .collect::<Result<Vec<_>, _>>()?,
            None => vec![here],
        })
    }
}

/// Refuses a custom space with a parameter that lists no values, or values the model cannot take.
fn check_custom(space: &Space, model: &str, cfg: &ModelConfig) -> Result<(), String> {
    for (what, empty) in [
        ("instance_count", space.instance_counts.is_empty()),
        ("kind", space.kinds.is_empty()),
        ("max_batch_size", space.max_batch_sizes.is_empty()),
        ("dynamic_batching", space.dynamic_batching.is_empty()),
        ("max_queue_delay_us", space.queue_delays_us.is_empty()),
        ("preferred_batch_size", space.preferred_batch_sizes.is_empty()),
        ("intra_op_thread_count", space.intra_op_threads.is_empty()),
        ("inter_op_thread_count", space.inter_op_threads.is_empty()),
        ("accelerator", space.accelerators.is_empty()),
        ("profile", space.profiles.is_empty()),
    ] {
        if empty {
            return Err(format!("'{what}' lists no values"));
        }
    }
    if !is_plan(cfg) && space.profiles.iter().any(|p| !p.is_empty()) {
        return Err(format!("model '{model}' is not a TensorRT plan, so 'profile' cannot be searched"));
    }
    if let Some(bad) = space.profiles.iter().flatten().find(|p| p.parse::<u32>().is_err()) {
        return Err(format!("profile '{bad}' is not a profile index (\"0\", \"1\", ...)"));
    }
    if space.instance_counts.contains(&0) {
        return Err("instance_count values must be at least 1".into());
    }
    if (cfg.max_batch_size == 0 || is_sequence(cfg)) && space.dynamic_batching.contains(&true) {
        return Err(format!("model '{model}' cannot use dynamic batching (it does not batch, or is a sequence model)"));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
