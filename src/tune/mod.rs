//! `tritonrs tune`: Model Analyzer built into the server. Each variant of a model's configuration is
//! loaded in this process as the server would load it (a configuration override on the same model
//! name, so no restart between variants), warmed up and driven at a concurrency sweep through the core
//! API; the variants are ranked under an objective and constraints, and the results written as Model
//! Analyzer's CSV, an HTML report with SVG plots, and exported configurations.
//!
//! space (what may change) → target (where variants load) → measure (one point) → results (ranking)
//! → report / export.

pub mod cli;
pub mod export;
pub mod inputs;
pub mod measure;
pub mod probe;
pub mod report;
pub mod results;
pub mod space;
pub mod target;

use crate::config::tune::{Objective, SearchMode, TuneArgs};
use crate::error::{Error, Result};
use crate::model_api::types::InferRequest;
use crate::model_config::pbtxt::config_to_pbtxt;
use crate::proto::inference::ModelConfig;
use measure::Stop;
use results::{Candidate, Constraints, Point, TuneReport, VariantResult};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use target::Target;
use tokio::sync::watch;

/// How a run ended, for the exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every model has a best variant.
    Done,
    /// Some model has no variant meeting the constraints (the report is written).
    NothingMeets,
    /// Ctrl-C: what was measured is written.
    Interrupted,
}

/// The concurrencies a variant is measured at.
enum Sweep {
    /// Doubling from 1 while throughput rises.
    Doubling,
    /// Doubling from the given concurrency while throughput rises: the quick search's final sweep when
    /// only throughput counts (see `upward_sweep_suffices`).
    Upward(u32),
    Fixed(Vec<u32>),
}

/// Whether the quick search's final sweep may start at the concurrency a variant was climbed at and
/// only go up. Under a closed-loop load a lower concurrency never gives more throughput (requests
/// that wait in the scheduler's queue cost nothing), so points below it cannot change a ranking by
/// throughput; they matter only when latency or power decides (a latency or efficiency objective, a
/// p99 or power limit), and then the sweep starts at 1.
fn upward_sweep_suffices(args: &TuneArgs) -> bool {
    args.objective == Objective::Throughput && args.max_p99_ms.is_none() && args.max_power_w.is_none()
}

/// Whether a sweep would measure nothing new for a variant with these points (so it need not be
/// loaded again): an upward sweep whose start is measured and already at the largest concurrency.
fn sweep_has_nothing_new(points: &[Point], sweep: &Sweep, max_concurrency: u32) -> bool {
    match sweep {
        Sweep::Upward(c) => *c >= max_concurrency && points.iter().any(|p| p.concurrency == *c),
        _ => false,
    }
}

/// The one concurrency a quick search measures a variant at while it climbs: twice what its instances
/// can take at once (instances × max batch size), as Model Analyzer's quick search picks it.
fn quick_concurrency(c: &Candidate, max: u32) -> u32 {
    (2 * c.instance_count.max(1) * c.max_batch_size.max(1)).clamp(1, max.max(1))
}

/// Whether a concurrency sweep goes on: the best of the last four points (all of them when fewer)
/// beats the first of those by more than 5%, Model Analyzer's rule (one noisy window does not end it).
fn keeps_rising(throughputs: &[f64]) -> bool {
    let w = &throughputs[throughputs.len().saturating_sub(4)..];
    match w.split_first() {
        Some((first, rest)) if !rest.is_empty() => rest.iter().any(|&t| t > first * 1.05),
        _ => true,
    }
}

/// What the run needs besides its flags.
pub struct Context {
    pub target: Target,
    /// Each model's folder in the repository (for warmup samples, --export links and --apply).
    pub model_dirs: Vec<(String, PathBuf)>,
    /// Whether a CUDA GPU can be used here.
    pub gpu: bool,
    /// Set to true to stop (Ctrl-C).
    pub cancel: watch::Receiver<bool>,
    /// Progress lines go here (the terminal's progress bar, or nothing).
    pub progress: Box<dyn Fn(&str) + Send + Sync>,
}

/// The time one point needs at least: the warm-up allowance and three windows.
fn point_cost(args: &TuneArgs) -> Duration {
    Duration::from_millis(args.measurement_interval_ms.max(1)) * 4
}

struct Run<'a> {
    args: &'a TuneArgs,
    ctx: &'a Context,
    settings: measure::Settings,
    deadline: Option<Instant>,
    probes: measure::Probes,
    report: TuneReport,
    /// Set when the budget or Ctrl-C ended the search early.
    stopped: Option<String>,
    /// Points measured in the whole run.
    points: usize,
    /// Set while the model is loaded in-process with its own configuration (before its first variant),
    /// so measuring that configuration needs no reload.
    loaded_as_is: bool,
    /// The server's memory just before the loaded variant loaded (see [`Point::memory_mb`]), on this
    /// machine only.
    memory_before: Option<f64>,
}

impl Run<'_> {
    fn out_of_time(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() + point_cost(self.args) > d)
    }

    /// Loads and measures one variant at the concurrencies `sweep` gives; `None` when the run was stopped
    /// before it began.
    async fn variant(
        &mut self,
        model: &str,
        base: &ModelConfig,
        candidate: &Candidate,
        name: String,
        requests: &Arc<Vec<InferRequest>>,
        sweep: Sweep,
    ) -> Option<usize> {
        if self.stopped.is_some() {
            return None;
        }
        if self.out_of_time() {
            self.stopped = Some("the time budget ran out".into());
            return None;
        }
        let config = space::apply(base, candidate);
        let mut result = VariantResult {
            model: model.to_string(),
            name,
            candidate: candidate.clone(),
            config_pbtxt: config_to_pbtxt(&config),
            points: Vec::new(),
            error: None,
            best: None,
        };
        let as_is = std::mem::take(&mut self.loaded_as_is) && *candidate == space::current(base);
        if as_is || self.load(&mut result, &config).await {
            // The configuration as the server completed it (defaults filled in) is what gets exported.
            if let Ok(done) = self.ctx.target.config(model).await {
                result.config_pbtxt = config_to_pbtxt(&done);
            }
            self.sweep(&mut result, requests, sweep).await;
        }
        self.report.variants.push(result);
        Some(self.report.variants.len() - 1)
    }

    /// Before a variant loads on this machine: unloads the model's previous variant, so that what the
    /// next one costs is measured against the server without it, and reads the server's memory.
    async fn memory_baseline(&mut self, model: &str) {
        if !self.ctx.target.is_local() {
            return;
        }
        // A model not loaded yet (the first load) has nothing to unload.
        let _ = self.ctx.target.unload(model).await;
        self.memory_before = probe::settled_memory_mb().await;
    }

    /// Loads a variant's configuration; a failure is recorded in the result.
    async fn load(&mut self, result: &mut VariantResult, config: &ModelConfig) -> bool {
        (self.ctx.progress)(&format!("{} ({}): loading", result.name, result.candidate));
        self.memory_baseline(&result.model).await;
        match self.ctx.target.load(&result.model, config).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(
                    "Variant {} ({}) failed to load and is skipped: {}",
                    result.name,
                    result.candidate,
                    e.message
                );
                result.error = Some(format!("failed to load: {}", e.message));
                false
            }
        }
    }

    /// Measures the loaded variant at each concurrency of the sweep not measured yet, then ranks its
    /// points.
    async fn sweep(&mut self, result: &mut VariantResult, requests: &Arc<Vec<InferRequest>>, sweep: Sweep) {
        let (mut plan, automatic) = match sweep {
            Sweep::Fixed(list) => (list, false),
            Sweep::Doubling => (vec![1], true),
            Sweep::Upward(c) => (vec![c.clamp(1, self.args.max_concurrency.max(1))], true),
        };
        let batch = 1;
        let mut warm = false;
        let mut i = 0;
        while i < plan.len() {
            let c = plan[i];
            i += 1;
            let known = result.points.iter().find(|p| p.concurrency == c).map(|p| p.throughput);
            if known.is_none() {
                if self.out_of_time() {
                    self.stopped = Some("the time budget ran out".into());
                    break;
                }
                let (name, candidate) = (&result.name, &result.candidate);
                (self.ctx.progress)(&format!("{name} ({candidate}): concurrency {c}"));
                // Only the first point after a load warms the variant up; the later ones follow a
                // measured point, which warmed it as well as any warm-up would.
                let settings = if warm {
                    measure::Settings { warmup_requests: 0, ..self.settings.clone() }
                } else {
                    self.settings.clone()
                };
                let measured = measure::point(
                    &self.ctx.target,
                    &result.model,
                    requests.clone(),
                    batch,
                    c,
                    &settings,
                    &self.probes,
                    &self.ctx.cancel,
                )
                .await;
                warm = true;
                match measured {
                    Ok(mut p) => {
                        self.points += 1;
                        if let Some(before) = self.memory_before {
                            p.memory_mb = (p.memory_mb - before).max(0.0);
                        }
                        (self.ctx.progress)(&format!(
                            "{name} ({candidate}): concurrency {c}: {:.1} infer/s, p99 {:.2} ms",
                            p.throughput, p.p99_ms
                        ));
                        result.points.push(p);
                    }
                    Err(Stop::Cancelled) => {
                        self.stopped = Some("interrupted (Ctrl-C)".into());
                        break;
                    }
                    Err(Stop::Failed(e)) => {
                        tracing::warn!("Variant {name} ({candidate}) failed at concurrency {c} and is skipped: {e}");
                        result.error = Some(format!("a request failed at concurrency {c}: {e}"));
                        break;
                    }
                }
            }
            if automatic && c < self.args.max_concurrency {
                result.points.sort_by_key(|p| p.concurrency);
                let rising = keeps_rising(&result.points.iter().map(|p| p.throughput).collect::<Vec<_>>());
                let over_latency = self
                    .args
                    .max_p99_ms
                    .is_some_and(|m| result.points.iter().find(|p| p.concurrency == c).is_some_and(|p| p.p99_ms > m));
                if rising && !over_latency {
                    plan.push((c * 2).min(self.args.max_concurrency));
                }
            }
        }
        result.points.sort_by_key(|p| p.concurrency);
        result.rank(self.args.objective, &Constraints::from_args(self.args));
    }

    fn score(&self, index: usize) -> f64 {
        self.report.variants[index].best_point().map(|p| p.score(self.args.objective)).unwrap_or(f64::NEG_INFINITY)
    }

    /// Searches one model's variants.
    async fn model(&mut self, model: &str, base: &ModelConfig, requests: Arc<Vec<InferRequest>>) -> Result<()> {
        let here = space::current(base);
        let mut search = ModelSearch { model, base, requests, tried: vec![here.clone()], next_name: 0 };
        // Brute and custom searches sweep every variant; the quick search measures each variant at one
        // concurrency while it climbs and sweeps only its best three at the end, as Model Analyzer's
        // quick search does. Given --concurrency, every variant gets exactly those.
        let quick = matches!(self.args.search, SearchMode::Quick);
        let first = if quick { climb_sweep(&here, self.args) } else { self.full_sweep() };
        let default =
            self.variant(model, base, &here, format!("{model}_config_default"), &search.requests, first).await;
        let limits = self.space_limits();
        match &self.args.search {
            SearchMode::Brute | SearchMode::Custom(_) => self.every_variant(&mut search, limits).await?,
            SearchMode::Quick => self.quick_search(&mut search, limits, default).await,
        }
        Ok(())
    }

    /// The sweep of a variant measured fully: doubling from 1, or exactly the --concurrency values.
    fn full_sweep(&self) -> Sweep {
        match self.args.concurrency.is_empty() {
            true => Sweep::Doubling,
            false => Sweep::Fixed(self.args.concurrency.clone()),
        }
    }

    /// What the automatic search space may reach on this machine under the flags.
    fn space_limits(&self) -> space::Limits {
        space::Limits {
            max_instance_count: self.args.max_instance_count,
            max_batch_size: self.args.max_batch_size,
            gpu: self.ctx.gpu,
            cores: std::thread::available_parallelism().map(|n| n.get() as u32).unwrap_or(1),
        }
    }

    /// Brute and custom searches: every untried combination of the space, each swept fully.
    async fn every_variant(&mut self, search: &mut ModelSearch<'_>, limits: space::Limits) -> Result<()> {
        let (model, base) = (search.model, search.base);
        let space = match &self.args.search {
            SearchMode::Custom(path) => {
                space::CustomSpace::read(path).and_then(|s| s.space_for(model, base)).map_err(Error::invalid)?
            }
            _ => space::automatic(base, limits),
        };
        for c in space::combinations(&space) {
            let Some(n) = search.try_next(&c) else { continue };
            let sweep = self.full_sweep();
            if self.variant(model, base, &c, n, &search.requests, sweep).await.is_none() {
                break;
            }
        }
        Ok(())
    }

    /// The quick search: from the space's start, climb to the best neighbour while one beats the best
    /// so far, then sweep the best three fully.
    async fn quick_search(&mut self, search: &mut ModelSearch<'_>, limits: space::Limits, default: Option<usize>) {
        let (model, base) = (search.model, search.base);
        let space = space::automatic(base, limits);
        let start = space::start(base, &space);
        let mut current = default;
        if let Some(n) = search.try_next(&start) {
            let v = self.variant(model, base, &start, n, &search.requests, climb_sweep(&start, self.args)).await;
            if let Some(v) = v {
                if current.is_none_or(|c| self.score(v) > self.score(c)) {
                    current = Some(v);
                }
            }
        }
        // Hill climb: measure every untried neighbour of the best so far; move to the best of
        // them if it beats it, else stop.
        while let Some(at) = current {
            if self.stopped.is_some() {
                break;
            }
            match self.best_neighbour(search, &space, at).await {
                Some(b) if self.score(b) > self.score(at) => current = Some(b),
                _ => break,
            }
        }
        if self.args.concurrency.is_empty() {
            self.sweep_best_three(search).await;
        }
    }

    /// Measures every untried neighbour of variant `at` at its climbing concurrency; the best of them.
    async fn best_neighbour(&mut self, search: &mut ModelSearch<'_>, space: &space::Space, at: usize) -> Option<usize> {
        let (model, base) = (search.model, search.base);
        let from = self.report.variants[at].candidate.clone();
        let mut best_step: Option<usize> = None;
        for c in space::neighbours(&from, space) {
            let Some(n) = search.try_next(&c) else { continue };
            let sweep = climb_sweep(&c, self.args);
            let Some(v) = self.variant(model, base, &c, n, &search.requests, sweep).await else { break };
            if best_step.is_none_or(|b| self.score(v) > self.score(b)) {
                best_step = Some(v);
            }
        }
        best_step
    }

    /// The best three (the current configuration among them if it is) get the full sweep:
    /// from 1, or upward from their climbing concurrency when only throughput counts.
    async fn sweep_best_three(&mut self, search: &ModelSearch<'_>) {
        let mut ranked: Vec<usize> = (0..self.report.variants.len())
            .filter(|&i| self.report.variants[i].model == search.model && self.report.variants[i].error.is_none())
            .collect();
        ranked.sort_by(|&a, &b| self.score(b).total_cmp(&self.score(a)));
        for i in ranked.into_iter().take(3) {
            if self.stopped.is_some() {
                break;
            }
            let mut result = self.report.variants[i].clone();
            let sweep = match upward_sweep_suffices(self.args) {
                true => Sweep::Upward(quick_concurrency(&result.candidate, self.args.max_concurrency)),
                false => Sweep::Doubling,
            };
            if sweep_has_nothing_new(&result.points, &sweep, self.args.max_concurrency) {
                continue;
            }
            let config = space::apply(search.base, &result.candidate);
            if self.load(&mut result, &config).await {
                self.sweep(&mut result, &search.requests, sweep).await;
            }
            self.report.variants[i] = result;
        }
    }
}

/// One model's search: the model, its requests, the candidates tried so far and the next variant number.
struct ModelSearch<'m> {
    model: &'m str,
    base: &'m ModelConfig,
    requests: Arc<Vec<InferRequest>>,
    tried: Vec<Candidate>,
    next_name: usize,
}

impl ModelSearch<'_> {
    /// The name of the next variant when `c` was not tried yet (it counts as tried from now on).
    fn try_next(&mut self, c: &Candidate) -> Option<String> {
        if self.tried.contains(c) {
            return None;
        }
        self.tried.push(c.clone());
        let name = format!("{}_config_{}", self.model, self.next_name);
        self.next_name += 1;
        Some(name)
    }
}

/// The sweep of a variant while the quick search climbs: one concurrency, or the --concurrency values.
fn climb_sweep(c: &Candidate, args: &TuneArgs) -> Sweep {
    match args.concurrency.is_empty() {
        true => Sweep::Fixed(vec![quick_concurrency(c, args.max_concurrency)]),
        false => Sweep::Fixed(args.concurrency.clone()),
    }
}

/// Runs the whole tuning: every model's search, then the report, the export and --apply.
pub async fn run(args: &TuneArgs, ctx: &Context) -> Result<(TuneReport, Outcome)> {
    let started = Instant::now();
    let deadline = args.budget.map(|b| started + b);
    check_budget(args)?;
    let shapes = inputs::parse_shapes(&args.shapes)?;
    let mut run = Run::new(args, ctx, deadline);
    for model in &args.models {
        tune_model(&mut run, model, &shapes).await?;
        if run.stopped.is_some() {
            break;
        }
    }
    finish(run)
}

/// Refuses a --budget too small for one measurement.
fn check_budget(args: &TuneArgs) -> Result<()> {
    if let Some(b) = args.budget {
        if b < point_cost(args) {
            return Err(Error::invalid(format!(
                "--budget {} is too small for one measurement (at least {} with --measurement-interval-ms {})",
                humantime::format_duration(b),
                humantime::format_duration(point_cost(args)),
                args.measurement_interval_ms
            )));
        }
    }
    Ok(())
}

impl<'a> Run<'a> {
    /// A run with nothing measured yet; the probes start here.
    fn new(args: &'a TuneArgs, ctx: &'a Context, deadline: Option<Instant>) -> Run<'a> {
        // This machine's power is the server's only when the server runs here.
        let power = if ctx.target.same_machine() { probe::PowerProbe::start(Duration::from_millis(100)) } else { None };
        let power_source = power.as_ref().map(|p| p.source);
        Run {
            args,
            ctx,
            settings: measure::Settings {
                interval: Duration::from_millis(args.measurement_interval_ms.max(1)),
                stability_percent: args.stability_percentage,
                max_trials: args.max_trials,
                warmup_requests: args.warmup_requests,
            },
            deadline,
            probes: measure::Probes { power, gpu_memory: probe::GpuMemoryProbe::start() },
            report: TuneReport {
                objective: args.objective,
                constraints: Constraints::from_args(args),
                measured_by: ctx.target.describe(),
                power_source,
                ..Default::default()
            },
            stopped: None,
            points: 0,
            loaded_as_is: false,
            memory_before: None,
        }
    }
}

/// Tunes one model: loads it as it is, builds its requests, searches its variants, and under --via
/// gives the server its own configuration back.
async fn tune_model(run: &mut Run<'_>, model: &str, shapes: &HashMap<String, Vec<i64>>) -> Result<()> {
    let (args, ctx) = (run.args, run.ctx);
    // The model as it is: loaded once without an override, to learn its completed configuration.
    (ctx.progress)(&format!("{model}: loading its current configuration"));
    run.memory_baseline(model).await;
    let loaded = match &ctx.target {
        Target::InProcess(server) => server.load_model(model, Default::default()).await,
        Target::Via { .. } => Ok(()),
    };
    if let Err(e) = loaded {
        return Err(Error::new(e.kind, format!("cannot tune model '{model}': {}", e.message)));
    }
    run.loaded_as_is = ctx.target.is_local();
    let base =
        ctx.target.config(model).await.map_err(|e| Error::new(e.kind, format!("model '{model}': {}", e.message)))?;
    if let Some(why) = space::untunable(&base) {
        return Err(Error::invalid(format!("cannot tune model '{model}': {why}")));
    }
    let requests = requests_for(args, ctx, model, &base, shapes)?;
    run.model(model, &base, Arc::new(requests)).await?;
    // The server under --via goes back to its own configuration.
    if let Target::Via { .. } = &ctx.target {
        if let Err(e) = ctx.target.load(model, &base).await {
            tracing::warn!("Could not restore model '{model}' to its configuration on the server: {}", e.message);
        }
    }
    Ok(())
}

/// The requests a model is measured with: --input-data, else its warmup samples, else random data.
fn requests_for(
    args: &TuneArgs,
    ctx: &Context,
    model: &str,
    base: &ModelConfig,
    shapes: &HashMap<String, Vec<i64>>,
) -> Result<Vec<InferRequest>> {
    let model_dir = ctx.model_dirs.iter().find(|(n, _)| n == model).map(|(_, d)| d.clone());
    Ok(match (&args.input_data, &model_dir) {
        (Some(path), _) => inputs::from_json(base, model, path, shapes)?,
        (None, Some(dir)) if !base.model_warmup.is_empty() => {
            let w = inputs::from_warmup(base, model, dir)?;
            if w.is_empty() {
                inputs::random(base, model, shapes)?
            } else {
                w
            }
        }
        _ => inputs::random(base, model, shapes)?,
    })
}

/// The report of a finished (or stopped) run and how it ended.
fn finish(run: Run<'_>) -> Result<(TuneReport, Outcome)> {
    let args = run.args;
    if run.points == 0 && run.stopped.as_deref() == Some("the time budget ran out") {
        return Err(Error::invalid(format!(
            "--budget {} ran out before one measurement finished",
            humantime::format_duration(args.budget.unwrap_or_default())
        )));
    }
    let mut report = run.report;
    report.incomplete = run.stopped.clone();
    report.best = args.models.iter().map(|m| (m.clone(), report.best_of(m))).collect();
    let outcome = if run.stopped.as_deref() == Some("interrupted (Ctrl-C)") {
        Outcome::Interrupted
    } else if report.best.iter().any(|(_, b)| b.is_none()) {
        Outcome::NothingMeets
    } else {
        Outcome::Done
    };
    Ok((report, outcome))
}

/// The best point of each model's best variant, as one line per model.
pub fn best_lines(report: &TuneReport) -> Vec<String> {
    report
        .best
        .iter()
        .map(|(model, best)| match best.and_then(|i| report.variants.get(i)) {
            Some(v) => {
                let p: &Point = match v.best_point() {
                    Some(p) => p,
                    None => return format!("{model}: no variant meets the constraints"),
                };
                format!(
                    "{model}: best is {} ({}) at concurrency {}: {:.1} infer/s, p99 {:.2} ms",
                    v.name, v.candidate, p.concurrency, p.throughput, p.p99_ms
                )
            }
            None => match failures(report, model) {
                Some(why) => format!("{model}: {why}"),
                None => format!("{model}: no variant meets the constraints"),
            },
        })
        .collect()
}

/// When every variant of `model` failed (to load, or a request failed), rather than missing the
/// constraints: that, with the first reasons, each said once with the first variant that had it.
fn failures(report: &TuneReport, model: &str) -> Option<String> {
    let variants: Vec<&VariantResult> = report.variants.iter().filter(|v| v.model == model).collect();
    if variants.is_empty() || variants.iter().any(|v| v.error.is_none()) {
        return None;
    }
    let mut reasons: Vec<(&str, &str)> = Vec::new();
    for v in &variants {
        let why = v.error.as_deref().unwrap_or_default();
        if !reasons.iter().any(|(r, _)| *r == why) {
            reasons.push((why, &v.name));
        }
    }
    const SHOWN: usize = 2;
    let first: Vec<String> = reasons.iter().take(SHOWN).map(|(why, name)| format!("{name}: {why}")).collect();
    let more = match reasons.len().saturating_sub(SHOWN) {
        0 => String::new(),
        n => format!(" (and {n} other reasons, in the report)"),
    };
    let all = match variants.len() {
        1 => "its one variant failed".to_string(),
        n => format!("all {n} variants failed"),
    };
    Some(format!("{all}, so nothing was measured: {}{more}", first.join("; ")))
}

/// Why a run ended without a best variant for some model when that model's variants all failed
/// (`None` when some were measured and none met the constraints): the first such model.
pub fn all_failed(report: &TuneReport) -> Option<String> {
    report
        .best
        .iter()
        .filter(|(_, best)| best.is_none())
        .find_map(|(model, _)| failures(report, model).map(|why| format!("model '{model}': {why}")))
}

#[cfg(test)]
mod tests;
