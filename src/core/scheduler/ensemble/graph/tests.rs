use super::*;
use crate::model_config::pbtxt::parse_config;

fn config(text: &str) -> ModelConfig {
    parse_config(text, "config.pbtxt").unwrap()
}

/// An ensemble named `e` with FP32 input `IN` [4] and output `OUT` [5], batching up to 4, and `steps`.
fn ensemble(steps: &str) -> ModelConfig {
    config(&format!(
        r#"name: "e" platform: "ensemble" max_batch_size: 4
           input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }} ]
           output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 5 ] }} ]
           ensemble_scheduling {{ step [ {steps} ] }}"#
    ))
}

fn step(model: &str, inputs: &[(&str, &str)], outputs: &[(&str, &str)]) -> String {
    let map = |kind: &str, pairs: &[(&str, &str)]| {
        pairs.iter().map(|(k, v)| format!(r#"{kind} {{ key: "{k}" value: "{v}" }} "#)).collect::<String>()
    };
    format!(
        r#"{{ model_name: "{model}" model_version: -1 {} {} }}"#,
        map("input_map", inputs),
        map("output_map", outputs)
    )
}

/// pre: IN → x; cls: x → OUT.
fn chain() -> ModelConfig {
    ensemble(
        &[step("pre", &[("RAW", "IN")], &[("NORM", "x")]), step("cls", &[("F", "x")], &[("LOGITS", "OUT")])].join(","),
    )
}

fn error(cfg: &ModelConfig) -> String {
    EnsembleGraph::from_config(cfg).unwrap_err().message
}

#[test]
fn a_chain_is_valid_and_ordered() {
    let g = EnsembleGraph::from_config(&chain()).unwrap();
    assert_eq!(g.order(), &[0, 1]);
    assert_eq!(g.steps()[0].model, "pre");
    assert_eq!(g.steps()[0].version, None);
    assert_eq!(g.steps()[1].inputs, vec![("F".to_string(), "x".to_string())]);
    assert_eq!(g.composing_models().into_iter().collect::<Vec<_>>(), vec!["cls", "pre"]);
}

#[test]
fn steps_listed_out_of_order_are_ordered_by_data_flow() {
    let cfg = ensemble(
        &[step("cls", &[("F", "x")], &[("LOGITS", "OUT")]), step("pre", &[("RAW", "IN")], &[("NORM", "x")])].join(","),
    );
    let g = EnsembleGraph::from_config(&cfg).unwrap();
    assert_eq!(g.order(), &[1, 0]);
}

#[test]
fn a_cycle_is_refused_and_spelled_out() {
    let cfg = ensemble(
        &[
            step("a", &[("I", "b")], &[("O", "a")]),
            step("b", &[("I", "a")], &[("O", "b")]),
            step("c", &[("I", "IN")], &[("O", "OUT")]),
        ]
        .join(","),
    );
    let msg = error(&cfg);
    assert!(msg.contains("cycle"), "{msg}");
    assert!(
        msg.contains(
            "step 0 (model 'a') writes 'a', read by step 1 (model 'b'), which writes 'b', read by step 0 (model 'a')"
        ),
        "{msg}"
    );
}

#[test]
fn a_step_reading_its_own_output_is_a_cycle() {
    let cfg = ensemble(&step("m", &[("I", "IN"), ("J", "loop")], &[("O", "OUT"), ("P", "loop")]));
    let msg = error(&cfg);
    assert!(msg.contains("cycle") && msg.contains("step 0 (model 'm') writes 'loop'"), "{msg}");
}

#[test]
fn an_unmapped_tensor_is_refused() {
    let cfg = ensemble(
        &[step("pre", &[("RAW", "IN")], &[("NORM", "x")]), step("cls", &[("F", "nowhere")], &[("LOGITS", "OUT")])]
            .join(","),
    );
    let msg = error(&cfg);
    assert!(msg.contains("step 1 (model 'cls') reads ensemble tensor 'nowhere' into its input 'F'"), "{msg}");
}

#[test]
fn an_output_nobody_writes_is_refused() {
    let cfg = ensemble(&step("pre", &[("RAW", "IN")], &[("NORM", "x")]));
    let msg = error(&cfg);
    // The unwritten output is reported before the unused tensor.
    assert!(msg.contains("ensemble output 'OUT' is not written by any step"), "{msg}");
}

#[test]
fn unused_inputs_and_tensors_are_refused() {
    let cfg = config(
        r#"name: "e" platform: "ensemble"
           input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "EXTRA" data_type: TYPE_FP32 dims: [ 4 ] } ]
           output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 5 ] } ]
           ensemble_scheduling { step [ { model_name: "m" input_map { key: "I" value: "IN" } output_map { key: "O" value: "OUT" } } ] }"#,
    );
    assert!(error(&cfg).contains("ensemble input 'EXTRA' is not read by any step"));
    let cfg = ensemble(&step("m", &[("I", "IN")], &[("O", "OUT"), ("P", "dangling")]));
    let msg = error(&cfg);
    assert!(msg.contains("'dangling' (output 'P' of step 0 (model 'm')) is neither read"), "{msg}");
}

#[test]
fn structural_mistakes_are_refused() {
    assert!(error(&config(r#"name: "e" platform: "ensemble""#)).contains("no 'ensemble_scheduling'"));
    assert!(error(&ensemble("")).contains("no 'step'"));
    assert!(error(&ensemble(r#"{ input_map { key: "I" value: "IN" } output_map { key: "O" value: "OUT" } }"#))
        .contains("step 0 has no 'model_name'"));
    assert!(
        error(&ensemble(r#"{ model_name: "m" output_map { key: "O" value: "OUT" } }"#)).contains("empty 'input_map'")
    );
    assert!(
        error(&ensemble(r#"{ model_name: "m" input_map { key: "I" value: "IN" } }"#)).contains("empty 'output_map'")
    );
    let two_writers =
        [step("a", &[("I", "IN")], &[("O", "OUT")]), step("b", &[("I", "IN")], &[("O", "OUT")])].join(",");
    assert!(
        error(&ensemble(&two_writers)).contains("'OUT' is written by both step 0 (model 'a') and step 1 (model 'b')")
    );
    let same_step = step("a", &[("I", "IN")], &[("O", "OUT"), ("P", "OUT")]);
    assert!(error(&ensemble(&same_step)).contains("more than one of its outputs to ensemble tensor 'OUT'"));
    let writes_input = step("a", &[("I", "IN")], &[("O", "OUT"), ("P", "IN")]);
    assert!(error(&ensemble(&writes_input)).contains("'IN', which is an ensemble input"));
    let bad_version = r#"{ model_name: "m" model_version: -2 input_map { key: "I" value: "IN" } output_map { key: "O" value: "OUT" } }"#;
    assert!(error(&ensemble(bad_version)).contains("model_version -2"));
    let pinned = r#"{ model_name: "m" model_version: 3 input_map { key: "I" value: "IN" } output_map { key: "O" value: "OUT" } }"#;
    assert_eq!(EnsembleGraph::from_config(&ensemble(pinned)).unwrap().steps()[0].version, Some(3));
}

/// pre: IN → x; left: x → l; right: x → r; join: (l, r) → OUT, plus side: IN → SIDE as a second output.
fn diamond() -> EnsembleGraph {
    let cfg = config(&format!(
        r#"name: "d" platform: "ensemble"
           input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }} ]
           output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }}, {{ name: "SIDE" data_type: TYPE_FP32 dims: [ 4 ] }} ]
           ensemble_scheduling {{ step [ {} ] }}"#,
        [
            step("pre", &[("I", "IN")], &[("O", "x")]),
            step("left", &[("I", "x")], &[("O", "l")]),
            step("right", &[("I", "x")], &[("O", "r")]),
            step("join", &[("A", "l"), ("B", "r")], &[("O", "OUT")]),
            step("side", &[("I", "IN")], &[("O", "SIDE")]),
        ]
        .join(",")
    ));
    EnsembleGraph::from_config(&cfg).unwrap()
}

#[test]
fn independent_steps_are_ready_together() {
    let g = diamond();
    let mut run = Run::new(&g, &["OUT".to_string(), "SIDE".to_string()]).unwrap();
    assert!(run.ready_steps().is_empty());
    assert!(run.provide("IN", 0));
    // `pre` and `side` both only read IN.
    assert_eq!(run.ready_steps(), vec![(0, 0), (4, 0)]);
    assert_eq!(run.consume_inputs(0, 0), Vec::<String>::new());
    assert_eq!(run.consume_inputs(4, 0), vec!["IN".to_string()], "IN is released once both readers started");
    assert_eq!(run.running(), 2);
    run.complete(0, 0);
    assert!(run.provide("x", 0));
    // left and right run concurrently; join waits for both.
    assert_eq!(run.ready_steps(), vec![(1, 0), (2, 0)]);
    assert!(run.ready_steps().is_empty(), "a step is handed out once");
    assert!(run.consume_inputs(1, 0).is_empty());
    assert_eq!(run.consume_inputs(2, 0), vec!["x".to_string()]);
    run.complete(1, 0);
    assert!(run.provide("l", 0));
    assert!(run.ready_steps().is_empty());
    run.complete(2, 0);
    assert!(run.provide("r", 0));
    assert_eq!(run.ready_steps(), vec![(3, 0)]);
    run.consume_inputs(3, 0);
    run.complete(3, 0);
    assert!(run.provide("OUT", 0), "a requested output is kept");
    assert!(!run.outputs_ready(0));
    run.complete(4, 0);
    run.provide("SIDE", 0);
    assert!(run.outputs_ready(0));
    assert_eq!(run.running(), 0);
    let mut taken = run.take_outputs(0);
    taken.sort();
    assert_eq!(taken, vec!["OUT".to_string(), "SIDE".to_string()]);
    assert!(!run.outputs_ready(0), "a response takes its outputs");
}

#[test]
fn steps_leading_only_to_unrequested_outputs_are_pruned() {
    let g = diamond();
    let run = Run::new(&g, &["SIDE".to_string()]).unwrap();
    assert_eq!(run.needed_steps(), vec![4]);
    let mut run = Run::new(&g, &["OUT".to_string()]).unwrap();
    assert_eq!(run.needed_steps(), vec![0, 1, 2, 3]);
    run.provide("IN", 0);
    assert_eq!(run.ready_steps(), vec![(0, 0)]);
    assert!(Run::new(&g, &["x".to_string()]).is_err(), "an intermediate tensor is not an output");
}

#[test]
fn a_tensor_nobody_reads_is_not_kept() {
    let g = diamond();
    let mut run = Run::new(&g, &["SIDE".to_string()]).unwrap();
    assert!(run.provide("IN", 0));
    assert!(!run.provide("OUT", 0), "OUT was not requested");
}

#[test]
fn each_iteration_runs_the_steps_after_it_once() {
    // As if `pre` were decoupled: its responses are iterations 1 and 2, and the steps after it run in each.
    let g = diamond();
    let mut run = Run::new(&g, &["OUT".to_string()]).unwrap();
    run.provide("IN", 0);
    assert_eq!(run.ready_steps(), vec![(0, 0)]);
    run.consume_inputs(0, 0);
    let (first, second) = (run.new_iteration(), run.new_iteration());
    assert_eq!((first, second), (1, 2));
    run.provide("x", second);
    run.provide("x", first);
    assert_eq!(run.ready_steps(), vec![(1, 1), (2, 1), (1, 2), (2, 2)], "earliest iteration first");
    for it in [1, 2] {
        run.consume_inputs(1, it);
        assert_eq!(run.consume_inputs(2, it), vec!["x".to_string()]);
    }
    run.complete(0, 0);
    assert_eq!(run.running(), 4);
    for s in [1, 2] {
        run.complete(s, 2);
    }
    run.provide("l", 2);
    run.provide("r", 2);
    run.provide("l", 1);
    assert_eq!(run.ready_steps(), vec![(3, 2)], "join waits for both of its inputs in the same iteration");
    run.complete(3, 2);
    run.provide("OUT", 2);
    assert!(run.outputs_ready(2) && !run.outputs_ready(1));
    assert_eq!(run.running(), 2);
}

#[test]
fn a_step_is_not_started_twice_in_one_iteration() {
    let g = diamond();
    let mut run = Run::new(&g, &["OUT".to_string(), "SIDE".to_string()]).unwrap();
    run.provide("IN", 0);
    run.provide("IN", 0);
    assert_eq!(run.ready_steps(), vec![(0, 0), (4, 0)]);
    run.provide("IN", 0);
    assert!(run.ready_steps().is_empty());
    // A step that was never started does not count when it completes.
    run.complete(1, 0);
    assert_eq!(run.running(), 2);
}

fn models_decoupled(flags: &[bool]) -> std::result::Result<bool, String> {
    diamond().check_decoupled(flags).map_err(|e| e.message)
}

#[test]
fn an_ensemble_with_a_decoupled_step_is_decoupled() {
    assert_eq!(models_decoupled(&[false; 5]), Ok(false));
    // pre is decoupled: everything after it comes from its responses; SIDE comes from the request itself.
    let e = models_decoupled(&[true, false, false, false, false]).unwrap_err();
    assert_eq!(e, "ensemble 'd': the ensemble's outputs originated from different decoupled models");
    // left is decoupled, right is not: join cannot tell which of left's responses go with right's answer.
    let e = models_decoupled(&[false, true, false, false, false]).unwrap_err();
    assert_eq!(e, "ensemble 'd': step 3 (model 'join') receives inputs originated from different decoupled models");
    // Only one output path goes through a decoupled step: still mixed at the outputs.
    assert!(models_decoupled(&[false, false, false, true, false]).is_err());
    let chain = EnsembleGraph::from_config(&chain()).unwrap();
    assert_eq!(chain.check_decoupled(&[false, true]).map_err(|e| e.message), Ok(true));
    assert_eq!(chain.check_decoupled(&[true, true]).map_err(|e| e.message), Ok(true));
}

#[test]
fn topological_order_of_the_diamond() {
    assert_eq!(diamond().order(), &[0, 1, 2, 3, 4]);
}

/// A composing model config: `inputs`/`outputs` as (name, type, dims).
fn model(name: &str, max_batch: i32, inputs: &[(&str, &str, &str)], outputs: &[(&str, &str, &str)]) -> ModelConfig {
    let list = |v: &[(&str, &str, &str)]| {
        v.iter()
            .map(|(n, t, d)| format!(r#"{{ name: "{n}" data_type: {t} dims: [ {d} ] }}"#))
            .collect::<Vec<_>>()
            .join(",")
    };
    config(&format!(
        r#"name: "{name}" backend: "onnxruntime" max_batch_size: {max_batch} input [ {} ] output [ {} ]"#,
        list(inputs),
        list(outputs)
    ))
}

fn composing_error(pre: &ModelConfig, cls: &ModelConfig) -> String {
    let cfg = chain();
    EnsembleGraph::from_config(&cfg).unwrap().check_composing(&cfg, &[pre, cls]).unwrap_err().message
}

#[test]
fn composing_models_that_fit_pass() {
    let cfg = chain();
    let g = EnsembleGraph::from_config(&cfg).unwrap();
    let pre = model("pre", 8, &[("RAW", "TYPE_FP32", "4")], &[("NORM", "TYPE_FP32", "4")]);
    let cls = model("cls", 4, &[("F", "TYPE_FP32", "-1")], &[("LOGITS", "TYPE_FP32", "5")]);
    g.check_composing(&cfg, &[&pre, &cls]).unwrap();
    // A non-batching model may take the batched tensor when its dims include the batch dimension.
    let cls_nb = model("cls", 0, &[("F", "TYPE_FP32", "-1, 4")], &[("LOGITS", "TYPE_FP32", "-1, 5")]);
    g.check_composing(&cfg, &[&pre, &cls_nb]).unwrap();
}

#[test]
fn composing_mismatches_are_refused_with_the_step_named() {
    let pre = model("pre", 8, &[("RAW", "TYPE_FP32", "4")], &[("NORM", "TYPE_FP32", "4")]);

    let wrong_input = model("cls", 4, &[("FEATURES", "TYPE_FP32", "4")], &[("LOGITS", "TYPE_FP32", "5")]);
    let msg = composing_error(&pre, &wrong_input);
    assert!(msg.contains("step 1 (model 'cls'): input_map maps ensemble tensor 'x' to input 'F'"), "{msg}");
    assert!(msg.contains("its inputs: FEATURES"), "{msg}");

    let wrong_output = model("cls", 4, &[("F", "TYPE_FP32", "4")], &[("SCORES", "TYPE_FP32", "5")]);
    assert!(composing_error(&pre, &wrong_output).contains("output_map maps output 'LOGITS'"));

    let extra_input =
        model("cls", 4, &[("F", "TYPE_FP32", "4"), ("G", "TYPE_FP32", "4")], &[("LOGITS", "TYPE_FP32", "5")]);
    assert!(composing_error(&pre, &extra_input).contains("input 'G' is not mapped"));

    let int_input = model("cls", 4, &[("F", "TYPE_INT32", "4")], &[("LOGITS", "TYPE_FP32", "5")]);
    let msg = composing_error(&pre, &int_input);
    assert!(msg.contains("ensemble tensor 'x' is FP32 for output 'NORM' of step 0 (model 'pre') but INT32"), "{msg}");

    let short_input = model("cls", 4, &[("F", "TYPE_FP32", "3")], &[("LOGITS", "TYPE_FP32", "5")]);
    let msg = composing_error(&pre, &short_input);
    assert!(msg.contains("ensemble tensor 'x' has shape [-1,4]") && msg.contains("[-1,3]"), "{msg}");

    let small_batch = model("cls", 2, &[("F", "TYPE_FP32", "4")], &[("LOGITS", "TYPE_FP32", "5")]);
    assert!(composing_error(&pre, &small_batch).contains("up to 4, but step 1 (model 'cls') allows at most 2"));

    let wrong_out_dims = model("cls", 4, &[("F", "TYPE_FP32", "4")], &[("LOGITS", "TYPE_FP32", "6")]);
    let msg = composing_error(&pre, &wrong_out_dims);
    assert!(msg.contains("ensemble tensor 'OUT' has shape [-1,5] for the ensemble output but [-1,6]"), "{msg}");
    let wrong_out_type = model("cls", 4, &[("F", "TYPE_FP32", "4")], &[("LOGITS", "TYPE_FP16", "5")]);
    assert!(composing_error(&pre, &wrong_out_type).contains("'OUT' is FP32 for the ensemble output but FP16"));
}

#[test]
fn optional_inputs_may_stay_unmapped() {
    let cfg = chain();
    let g = EnsembleGraph::from_config(&cfg).unwrap();
    let pre = model("pre", 8, &[("RAW", "TYPE_FP32", "4")], &[("NORM", "TYPE_FP32", "4")]);
    let mut cls = model("cls", 4, &[("F", "TYPE_FP32", "4"), ("G", "TYPE_FP32", "4")], &[("LOGITS", "TYPE_FP32", "5")]);
    cls.input[1].optional = true;
    g.check_composing(&cfg, &[&pre, &cls]).unwrap();
}

#[test]
fn shapes_adapt_between_batching_and_non_batching_models() {
    // Same batching on both sides: unchanged.
    assert_eq!(adapt_shape(&[4], true, 2, &[2, 4]), vec![2, 4]);
    assert_eq!(adapt_shape(&[4], false, 0, &[4]), vec![4]);
    // From a non-batching model into a batching one: a batch of 1 is added when the dims match.
    assert_eq!(adapt_shape(&[4], true, 0, &[4]), vec![1, 4]);
    assert_eq!(adapt_shape(&[4], true, 0, &[3, 4]), vec![3, 4], "already batched: left for the model to check");
    // From a batch of 1 into a non-batching model: the batch dimension goes when the dims need it.
    assert_eq!(adapt_shape(&[4], false, 1, &[1, 4]), vec![4]);
    assert_eq!(adapt_shape(&[-1, 4], false, 1, &[1, 4]), vec![1, 4], "the model takes the batch as a dim");
    assert_eq!(adapt_shape(&[4], false, 2, &[2, 4]), vec![2, 4], "a larger batch is left for the model to refuse");
    assert!(dims_match(&[-1, 4], &[3, 4]) && !dims_match(&[4], &[1, 4]) && dims_match(&[2], &[-1]));
}
