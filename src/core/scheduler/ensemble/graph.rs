//! An ensemble's data flow as a pure structure: the checks Triton makes on `ensemble_scheduling` when
//! the configuration is read (and, once the composing models are known, against their
//! configurations), and [`Run`], the state of one request that says which steps may start given the
//! tensors produced so far. Nothing here runs a model, so all of it is unit-tested without a runtime.

use crate::error::{Error, Result};
use crate::model_api::types::DataType;
use crate::proto::inference::{model_config::SchedulingChoice, model_ensembling, ModelConfig};
use std::collections::{BTreeSet, HashMap, HashSet};

/// One step of an ensemble: a composing model and how its tensors map to ensemble tensors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The composing model's name.
    pub model: String,
    /// The version to run; `None` for `model_version: -1`, the latest ready version.
    pub version: Option<i64>,
    /// (composing model input, ensemble tensor), sorted by input name.
    pub inputs: Vec<(String, String)>,
    /// (composing model output, ensemble tensor), sorted by output name.
    pub outputs: Vec<(String, String)>,
}

/// The validated data flow of one ensemble, built once when its configuration is read.
#[derive(Debug, Clone)]
pub struct EnsembleGraph {
    /// The ensemble's name, for messages.
    name: String,
    /// The steps, in configuration order (a step's index is its number in messages).
    steps: Vec<Step>,
    /// The ensemble's input tensors.
    inputs: Vec<String>,
    /// The ensemble's output tensors.
    outputs: Vec<String>,
    /// Ensemble tensor → the step that writes it; ensemble inputs have none.
    producer: HashMap<String, usize>,
    /// Ensemble tensor → the steps that read it, ascending, each once.
    consumers: HashMap<String, Vec<usize>>,
    /// Every step after the steps whose outputs it reads.
    order: Vec<usize>,
}

/// "step 1 (model 'classify')", the way every message names a step.
fn describe(index: usize, step: &Step) -> String {
    format!("step {index} (model '{}')", step.model)
}

/// The distinct ensemble tensors a step reads, in input-name order.
fn read_tensors(step: &Step) -> Vec<&str> {
    let mut seen = HashSet::new();
    step.inputs.iter().map(|(_, t)| t.as_str()).filter(|t| seen.insert(*t)).collect()
}

impl EnsembleGraph {
    /// Reads `ensemble_scheduling` and checks what can be checked without the composing models: every
    /// step names a model and maps inputs and outputs, each tensor has one writer, every tensor a step
    /// reads is an ensemble input or another step's output, the steps form no cycle, every ensemble
    /// output is written, and nothing is written or declared that nobody reads (Triton refuses all of
    /// these when it loads the ensemble).
    pub fn from_config(cfg: &ModelConfig) -> Result<EnsembleGraph> {
        let name = cfg.name.as_str();
        let Some(SchedulingChoice::EnsembleScheduling(sched)) = &cfg.scheduling_choice else {
            return Err(invalid(name, "the configuration has no 'ensemble_scheduling'".into()));
        };
        if sched.step.is_empty() {
            return Err(invalid(name, "'ensemble_scheduling' has no 'step'".into()));
        }
        let inputs: Vec<String> = cfg.input.iter().map(|i| i.name.clone()).collect();
        let outputs: Vec<String> = cfg.output.iter().map(|o| o.name.clone()).collect();
        let mut steps = Vec::with_capacity(sched.step.len());
        let mut producer: HashMap<String, usize> = HashMap::new();
        for (i, s) in sched.step.iter().enumerate() {
            let step = read_step(name, i, s)?;
            record_outputs(name, i, &step, &steps, &inputs, &mut producer)?;
            steps.push(step);
        }
        let consumers = find_consumers(name, &steps, &inputs, &producer)?;
        let mut graph =
            EnsembleGraph { name: name.to_string(), steps, inputs, outputs, producer, consumers, order: vec![] };
        graph.order = graph.topological_order()?;
        graph.check_all_used()?;
        Ok(graph)
    }

    /// Checks that every ensemble output is written, every ensemble input is read, and every step output
    /// is read by a step or is an ensemble output.
    fn check_all_used(&self) -> Result<()> {
        for output in &self.outputs {
            if !self.producer.contains_key(output) {
                return Err(invalid(&self.name, format!("ensemble output '{output}' is not written by any step")));
            }
        }
        for input in &self.inputs {
            if !self.consumers.contains_key(input) {
                return Err(invalid(&self.name, format!("ensemble input '{input}' is not read by any step")));
            }
        }
        for (i, step) in self.steps.iter().enumerate() {
            for (output, tensor) in &step.outputs {
                if !self.consumers.contains_key(tensor) && !self.outputs.contains(tensor) {
                    return Err(invalid(
                        &self.name,
                        format!(
                            "ensemble tensor '{tensor}' (output '{output}' of {}) is neither read by a step nor an \
                             ensemble output",
                            describe(i, step)
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Kahn's algorithm over the steps; a step that never becomes ready sits on a cycle (or after one),
    /// and the error spells the cycle out.
    fn topological_order(&self) -> Result<Vec<usize>> {
        let producers_of = |i: usize| -> Vec<usize> {
            read_tensors(&self.steps[i]).iter().filter_map(|t| self.producer.get(*t).copied()).collect()
        };
        let mut waiting: Vec<usize> = (0..self.steps.len()).map(|i| producers_of(i).len()).collect();
        let mut ready: Vec<usize> = (0..self.steps.len()).filter(|&i| waiting[i] == 0).collect();
        ready.reverse();
        let mut order = Vec::with_capacity(self.steps.len());
        while let Some(i) = ready.pop() {
            order.push(i);
            let mut next = Vec::new();
            for (_, tensor) in &self.steps[i].outputs {
                for &c in self.consumers.get(tensor).map(Vec::as_slice).unwrap_or(&[]) {
                    waiting[c] -= 1;
                    if waiting[c] == 0 {
                        next.push(c);
                    }
                }
            }
            // Lowest step index first among the newly ready ones, so the order is deterministic.
            next.sort_unstable_by(|a, b| b.cmp(a));
            ready.extend(next);
        }
        if order.len() == self.steps.len() {
            return Ok(order);
        }
        // Walk backwards from a blocked step through blocked producers until a step repeats.
        let blocked: HashSet<usize> = (0..self.steps.len()).filter(|i| !order.contains(i)).collect();
        let mut path: Vec<usize> = vec![*blocked.iter().min().unwrap_or(&0)];
        let start = loop {
            let current = *path.last().unwrap_or(&0);
            let Some(prev) = producers_of(current).into_iter().filter(|p| blocked.contains(p)).min() else {
                // Cannot happen: a blocked step always reads from a blocked producer.
                break current;
            };
            if let Some(pos) = path.iter().position(|&s| s == prev) {
                path.drain(..pos);
                break prev;
            }
            path.push(prev);
        };
        // `path` runs from a step back to its producers (and `start` produces the last one); print the
        // cycle in data-flow order, starting and ending at `start`.
        path.reverse();
        path.insert(0, start);
        let mut text = describe(start, &self.steps[start]);
        for (k, pair) in path.windows(2).enumerate() {
            let (from, to) = (pair[0], pair[1]);
            let tensor = self.steps[from]
                .outputs
                .iter()
                .map(|(_, t)| t)
                .find(|t| self.consumers.get(*t).is_some_and(|c| c.contains(&to)))
                .map(String::as_str)
                .unwrap_or("?");
            let which = if k == 0 { "" } else { ", which" };
            text.push_str(&format!("{which} writes '{tensor}', read by {}", describe(to, &self.steps[to])));
        }
        Err(Error::invalid(format!("ensemble '{}': the steps form a cycle: {text}", self.name)))
    }

    /// The ensemble's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The ensemble's input tensors.
    pub fn inputs(&self) -> &[String] {
        &self.inputs
    }

    /// The steps, in configuration order.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The step indices in an order where every step follows the steps it reads from.
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    /// The composing models, each once, sorted.
    pub fn composing_models(&self) -> BTreeSet<String> {
        self.steps.iter().map(|s| s.model.clone()).collect()
    }

    /// Checks the ensemble against the configurations of the models its steps run (`composing[i]` is
    /// step `i`'s model): every mapped input and output exists, every required input is mapped, the
    /// composing models allow the ensemble's batch size, and every ensemble tensor has one data type
    /// and compatible shapes wherever it appears (a batching and a non-batching model may share a
    /// tensor when the shapes agree once the batch dimension is counted, as in Triton).
    pub fn check_composing(&self, cfg: &ModelConfig, composing: &[&ModelConfig]) -> Result<()> {
        if composing.len() != self.steps.len() {
            return Err(Error::internal(format!(
                "ensemble '{}': {} composing configurations for {} steps; this is a bug",
                self.name,
                composing.len(),
                self.steps.len()
            )));
        }
        // Every place an ensemble tensor appears.
        let mut uses: HashMap<&str, Vec<Place>> = HashMap::new();
        let batching = cfg.max_batch_size > 0;
        for i in &cfg.input {
            let dims = i.reshape.as_ref().map(|r| r.shape.clone()).unwrap_or_else(|| i.dims.clone());
            uses.entry(&i.name).or_default().push(Place::new("the ensemble input".into(), i.data_type, dims, batching));
        }
        for o in &cfg.output {
            let dims = o.reshape.as_ref().map(|r| r.shape.clone()).unwrap_or_else(|| o.dims.clone());
            uses.entry(&o.name).or_default().push(Place::new(
                "the ensemble output".into(),
                o.data_type,
                dims,
                batching,
            ));
        }
        for (i, (step, model)) in self.steps.iter().zip(composing).enumerate() {
            self.add_step_places(cfg, i, step, model, &mut uses)?;
        }
        self.check_places(uses)
    }

    /// Checks the ensemble's decoupled steps (`decoupled[i]`: whether step `i`'s model is decoupled) as
    /// Triton does, and says whether the ensemble is decoupled (it is when any step is). Each response
    /// of a decoupled step flows on through the steps after it, so a step may not read tensors that
    /// come from different decoupled steps (or from one and from the request's own tensors): Triton
    /// could not tell which responses go together. The same holds for the ensemble's outputs.
    pub fn check_decoupled(&self, decoupled: &[bool]) -> Result<bool> {
        // Where each tensor's data comes from: 0 for the request's tensors, else a decoupled step's
        // number plus one, passed on by the steps that are not decoupled.
        let mut origin: HashMap<&str, usize> = self.inputs.iter().map(|t| (t.as_str(), 0)).collect();
        let mixed = |tensors: &[&str], origin: &HashMap<&str, usize>| -> Option<usize> {
            let mut found = tensors.iter().filter_map(|t| origin.get(t).copied());
            let first = found.next().unwrap_or(0);
            found.all(|o| o == first).then_some(first)
        };
        for &i in &self.order {
            let step = &self.steps[i];
            let Some(from) = mixed(&read_tensors(step), &origin) else {
                return Err(invalid(
                    &self.name,
                    format!("{} receives inputs originated from different decoupled models", describe(i, step)),
                ));
            };
            let out = if decoupled.get(i).copied().unwrap_or(false) { i + 1 } else { from };
            for (_, tensor) in &step.outputs {
                origin.insert(tensor, out);
            }
        }
        let outputs: Vec<&str> = self.outputs.iter().map(String::as_str).collect();
        if mixed(&outputs, &origin).is_none() {
            return Err(invalid(
                &self.name,
                "the ensemble's outputs originated from different decoupled models".into(),
            ));
        }
        Ok(decoupled.iter().any(|&d| d))
    }

    /// Checks step `i` against its model's configuration (the batch size it allows, every mapped input
    /// and output exists, every required input is mapped) and adds the places of its tensors to `uses`.
    fn add_step_places<'a>(
        &self,
        cfg: &ModelConfig,
        i: usize,
        step: &'a Step,
        model: &ModelConfig,
        uses: &mut HashMap<&'a str, Vec<Place>>,
    ) -> Result<()> {
        let err = |msg: String| invalid(&self.name, msg);
        let who = describe(i, step);
        if model.max_batch_size != 0 && model.max_batch_size < cfg.max_batch_size {
            return Err(err(format!(
                "the ensemble allows a batch size of up to {}, but {who} allows at most {}",
                cfg.max_batch_size, model.max_batch_size
            )));
        }
        let step_batching = model.max_batch_size > 0;
        for (input, tensor) in &step.inputs {
            let Some(spec) = model.input.iter().find(|x| &x.name == input) else {
                let names: Vec<&str> = model.input.iter().map(|x| x.name.as_str()).collect();
                return Err(err(format!(
                    "{who}: input_map maps ensemble tensor '{tensor}' to input '{input}', but model '{}' has \
                     no such input (its inputs: {})",
                    step.model,
                    names.join(", ")
                )));
            };
            uses.entry(tensor).or_default().push(Place::new(
                format!("input '{input}' of {who}"),
                spec.data_type,
                spec.dims.clone(),
                step_batching,
            ));
        }
        for spec in model.input.iter().filter(|x| !x.optional) {
            if !step.inputs.iter().any(|(input, _)| input == &spec.name) {
                return Err(err(format!(
                    "{who}: the model's input '{}' is not mapped to any ensemble tensor",
                    spec.name
                )));
            }
        }
        for (output, tensor) in &step.outputs {
            let Some(spec) = model.output.iter().find(|x| &x.name == output) else {
                let names: Vec<&str> = model.output.iter().map(|x| x.name.as_str()).collect();
                return Err(err(format!(
                    "{who}: output_map maps output '{output}' to ensemble tensor '{tensor}', but model '{}' \
                     has no such output (its outputs: {})",
                    step.model,
                    names.join(", ")
                )));
            };
            uses.entry(tensor).or_default().push(Place::new(
                format!("output '{output}' of {who}"),
                spec.data_type,
                spec.dims.clone(),
                step_batching,
            ));
        }
        Ok(())
    }

    /// Checks that every ensemble tensor has one data type and compatible shapes in all its places,
    /// each compared with its first place, tensors in name order.
    fn check_places(&self, uses: HashMap<&str, Vec<Place>>) -> Result<()> {
        let err = |msg: String| invalid(&self.name, msg);
        let type_name = |t: i32| DataType::from_config(t).map(DataType::as_str).unwrap_or("INVALID");
        let full = |dims: &[i64], batching: bool| -> Vec<i64> {
            if batching {
                std::iter::once(-1).chain(dims.iter().copied()).collect()
            } else {
                dims.to_vec()
            }
        };
        let mut tensors: Vec<_> = uses.into_iter().collect();
        tensors.sort_by(|a, b| a.0.cmp(b.0));
        for (tensor, places) in tensors {
            let Some(Place { who: first_who, data_type: first_type, dims: first_dims, batching: first_batching }) =
                places.first()
            else {
                continue;
            };
            for Place { who, data_type, dims, batching } in &places[1..] {
                if data_type != first_type {
                    return Err(err(format!(
                        "ensemble tensor '{tensor}' is {} for {first_who} but {} for {who}",
                        type_name(*first_type),
                        type_name(*data_type)
                    )));
                }
                if !dims_match(first_dims, dims)
                    && !dims_match(&full(first_dims, *first_batching), &full(dims, *batching))
                {
                    return Err(err(format!(
                        "ensemble tensor '{tensor}' has shape {} for {first_who} but {} for {who}",
                        fmt_dims(&full(first_dims, *first_batching)),
                        fmt_dims(&full(dims, *batching))
                    )));
                }
            }
        }
        Ok(())
    }
}

/// The error for a configuration of ensemble `name` that Triton refuses.
fn invalid(name: &str, msg: String) -> Error {
    Error::invalid(format!("ensemble '{name}': {msg}"))
}

/// Reads step `i` of ensemble `name`: it names a model and a valid version and maps at least one input
/// and one output (the maps sorted by the composing model's tensor names).
fn read_step(name: &str, i: usize, s: &model_ensembling::Step) -> Result<Step> {
    if s.model_name.is_empty() {
        return Err(invalid(name, format!("step {i} has no 'model_name'")));
    }
    let mut step = Step {
        model: s.model_name.clone(),
        version: match s.model_version {
            -1 => None,
            v if v >= 0 => Some(v),
            v => {
                return Err(invalid(
                    name,
                    format!(
                        "step {i} (model '{}') has model_version {v}; use -1 for the latest version or a version \
                         number",
                        s.model_name
                    ),
                ))
            }
        },
        inputs: s.input_map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        outputs: s.output_map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
    };
    step.inputs.sort();
    step.outputs.sort();
    if step.inputs.is_empty() {
        return Err(invalid(name, format!("{} has an empty 'input_map'", describe(i, &step))));
    }
    if step.outputs.is_empty() {
        return Err(invalid(name, format!("{} has an empty 'output_map'", describe(i, &step))));
    }
    Ok(step)
}

/// Records step `i` (`step`; `steps` are the ones before it) as the writer of its output tensors in
/// `producer`, refusing a write to an ensemble input and a tensor written twice.
fn record_outputs(
    name: &str,
    i: usize,
    step: &Step,
    steps: &[Step],
    inputs: &[String],
    producer: &mut HashMap<String, usize>,
) -> Result<()> {
    for (output, tensor) in &step.outputs {
        if inputs.contains(tensor) {
            return Err(invalid(
                name,
                format!("{} writes its output '{output}' to '{tensor}', which is an ensemble input", describe(i, step)),
            ));
        }
        match producer.get(tensor) {
            Some(&other) if other == i => {
                return Err(invalid(
                    name,
                    format!("{} maps more than one of its outputs to ensemble tensor '{tensor}'", describe(i, step)),
                ))
            }
            Some(&other) => {
                return Err(invalid(
                    name,
                    format!(
                        "ensemble tensor '{tensor}' is written by both {} and {}; a tensor may appear in output \
                         maps only once",
                        describe(other, &steps[other]),
                        describe(i, step)
                    ),
                ))
            }
            None => {}
        }
        producer.insert(tensor.clone(), i);
    }
    Ok(())
}

/// The steps that read each ensemble tensor, refusing a read of a tensor that no ensemble input or
/// step output provides.
fn find_consumers(
    name: &str,
    steps: &[Step],
    inputs: &[String],
    producer: &HashMap<String, usize>,
) -> Result<HashMap<String, Vec<usize>>> {
    let mut consumers: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, step) in steps.iter().enumerate() {
        for tensor in read_tensors(step) {
            consumers.entry(tensor.to_string()).or_default().push(i);
        }
        for (input, tensor) in &step.inputs {
            if !inputs.contains(tensor) && !producer.contains_key(tensor) {
                return Err(invalid(
                    name,
                    format!(
                        "{} reads ensemble tensor '{tensor}' into its input '{input}', but no ensemble input or \
                         step output provides '{tensor}'",
                        describe(i, step)
                    ),
                ));
            }
        }
    }
    Ok(consumers)
}

/// One place an ensemble tensor appears: an ensemble input or output, or a step's input or output.
struct Place {
    /// How messages name the place.
    who: String,
    /// The configured data type there.
    data_type: i32,
    /// The configured dims there (without the batch dimension).
    dims: Vec<i64>,
    /// Whether the model there batches.
    batching: bool,
}

impl Place {
    fn new(who: String, data_type: i32, dims: Vec<i64>, batching: bool) -> Place {
        Place { who, data_type, dims, batching }
    }
}

/// Whether two shapes agree, `-1` matching anything (Triton's `CompareDimsWithWildcard`).
pub fn dims_match(a: &[i64], b: &[i64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(&x, &y)| x == y || x == -1 || y == -1)
}

fn fmt_dims(d: &[i64]) -> String {
    format!("[{}]", d.iter().map(i64::to_string).collect::<Vec<_>>().join(","))
}

/// The shape to give a tensor passed from one model to another when one of them batches and the other
/// does not, as Triton does: a tensor from a non-batching source that matches a batching model's dims
/// gets a batch dimension of 1; a batch-of-1 tensor that does not match a non-batching model's dims
/// loses its batch dimension. `tensor_batch` is the batch size of the request that produced the tensor
/// (0 when that model does not batch). Any other shape passes unchanged and is checked by the receiver.
pub fn adapt_shape(config_dims: &[i64], config_batching: bool, tensor_batch: i64, shape: &[i64]) -> Vec<i64> {
    if config_batching == (tensor_batch != 0) {
        return shape.to_vec();
    }
    if config_batching {
        if dims_match(config_dims, shape) {
            return std::iter::once(1).chain(shape.iter().copied()).collect();
        }
    } else if tensor_batch == 1 && !dims_match(config_dims, shape) && !shape.is_empty() {
        return shape[1..].to_vec();
    }
    shape.to_vec()
}

/// Which response of a decoupled step a tensor comes from. The request's own tensors, and what steps
/// make from them, are iteration 0; each response of a decoupled step starts a new iteration, which
/// the steps after it keep: they run once per iteration, as in Triton, where each response of a
/// decoupled step flows on through the rest of the graph.
pub type Iteration = u64;

/// The state of one ensemble request: which tensors exist in which iteration, which steps ran, and
/// which steps are needed at all (only those leading to a requested output run, as in Triton).
#[derive(Debug)]
pub struct Run<'g> {
    /// The ensemble's data flow.
    graph: &'g EnsembleGraph,
    /// Per step: whether a requested output depends on it.
    needed: Vec<bool>,
    /// Tensor → reads it gets in each iteration: the needed steps reading it, plus one when requested.
    reads: HashMap<String, usize>,
    /// Tensors produced (or given, or known to be absent) in an iteration that something will still
    /// read, with the reads to come.
    live: HashMap<(String, Iteration), usize>,
    /// Steps to look at in an iteration because one of their inputs arrived there.
    candidates: BTreeSet<(Iteration, usize)>,
    /// Steps started, in the iteration they run in.
    started: HashSet<(usize, Iteration)>,
    /// Steps started and not yet completed.
    running: usize,
    /// The outputs the request asked for.
    requested: Vec<String>,
    /// The last iteration handed out.
    last_iteration: Iteration,
}

impl<'g> Run<'g> {
    /// Starts a request that asks for `requested` (ensemble output names, already validated).
    pub fn new(graph: &'g EnsembleGraph, requested: &[String]) -> Result<Run<'g>> {
        let n = graph.steps.len();
        let mut needed = vec![false; n];
        let mut pending: Vec<&str> = Vec::new();
        for r in requested {
            if !graph.outputs.contains(r) {
                return Err(Error::invalid(format!("unexpected inference output '{r}' for ensemble '{}'", graph.name)));
            }
            pending.push(r);
        }
        // Backwards from the requested outputs: a step is needed when it writes a tensor that is needed.
        while let Some(t) = pending.pop() {
            if let Some(&p) = graph.producer.get(t) {
                if !needed[p] {
                    needed[p] = true;
                    pending.extend(read_tensors(&graph.steps[p]));
                }
            }
        }
        let mut reads: HashMap<String, usize> = HashMap::new();
        for step in graph.steps.iter().zip(&needed).filter(|(_, n)| **n).map(|(s, _)| s) {
            for t in read_tensors(step) {
                *reads.entry(t.to_string()).or_default() += 1;
            }
        }
        for r in requested {
            *reads.entry(r.clone()).or_default() += 1;
        }
        Ok(Run {
            graph,
            needed,
            reads,
            live: HashMap::new(),
            candidates: BTreeSet::new(),
            started: HashSet::new(),
            running: 0,
            requested: requested.to_vec(),
            last_iteration: 0,
        })
    }

    /// A new iteration, for a response of a decoupled step.
    pub fn new_iteration(&mut self) -> Iteration {
        self.last_iteration += 1;
        self.last_iteration
    }

    /// Records that `tensor` exists now in iteration `it` (or is known to be absent there). Returns
    /// whether anything will read it, i.e. whether the caller should keep the data.
    pub fn provide(&mut self, tensor: &str, it: Iteration) -> bool {
        let reads = self.reads.get(tensor).copied().unwrap_or(0);
        if reads == 0 {
            return false;
        }
        let key = (tensor.to_string(), it);
        if let std::collections::hash_map::Entry::Vacant(e) = self.live.entry(key) {
            e.insert(reads);
            for &c in self.graph.consumers.get(tensor).map(Vec::as_slice).unwrap_or(&[]) {
                if self.needed[c] {
                    self.candidates.insert((it, c));
                }
            }
        }
        true
    }

    /// The needed steps whose inputs are all available in an iteration and that have not started there;
    /// they count as running from now on. Earliest iteration first, then lowest index.
    pub fn ready_steps(&mut self) -> Vec<(usize, Iteration)> {
        let mut ready = Vec::new();
        for (it, c) in std::mem::take(&mut self.candidates) {
            let all_in =
                read_tensors(&self.graph.steps[c]).iter().all(|t| self.live.contains_key(&(t.to_string(), it)));
            if all_in && self.started.insert((c, it)) {
                ready.push((c, it));
            }
        }
        self.running += ready.len();
        ready
    }

    /// Counts the reads of a started step's inputs; returns the tensors nobody will read any more in
    /// that iteration, so the caller can drop them early.
    pub fn consume_inputs(&mut self, step: usize, it: Iteration) -> Vec<String> {
        let tensors: Vec<String> = read_tensors(&self.graph.steps[step]).into_iter().map(str::to_string).collect();
        tensors.into_iter().filter(|t| self.read_once(t, it)).collect()
    }

    /// Counts one read of `tensor` in `it`; true when it was the last.
    fn read_once(&mut self, tensor: &str, it: Iteration) -> bool {
        let key = (tensor.to_string(), it);
        match self.live.get_mut(&key) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            Some(_) => {
                self.live.remove(&key);
                true
            }
            None => false,
        }
    }

    /// Marks a running step as finished (its last response came); the caller then provides its outputs.
    pub fn complete(&mut self, step: usize, it: Iteration) {
        if self.started.contains(&(step, it)) {
            self.running = self.running.saturating_sub(1);
        }
    }

    /// Steps handed out and not yet completed.
    pub fn running(&self) -> usize {
        self.running
    }

    /// Whether every requested output is available in iteration `it`: a response is ready.
    pub fn outputs_ready(&self, it: Iteration) -> bool {
        self.requested.iter().all(|r| self.live.contains_key(&(r.clone(), it)))
    }

    /// Counts the response's read of every requested output in `it`; returns the outputs nothing else
    /// reads there any more (the caller may move their data instead of sharing it).
    pub fn take_outputs(&mut self, it: Iteration) -> Vec<String> {
        let requested = self.requested.clone();
        requested.into_iter().filter(|r| self.read_once(r, it)).collect()
    }

    /// Steps this request runs (for tests and logs).
    pub fn needed_steps(&self) -> Vec<usize> {
        (0..self.needed.len()).filter(|&i| self.needed[i]).collect()
    }
}

#[cfg(test)]
mod tests;
