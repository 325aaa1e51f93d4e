//! Unit tests of `tune/mod.rs`.

use super::*;

#[test]
fn a_sweep_goes_on_while_the_last_four_points_still_gain() {
    assert!(keeps_rising(&[]));
    assert!(keeps_rising(&[100.0]));
    assert!(keeps_rising(&[100.0, 120.0]));
    assert!(!keeps_rising(&[100.0, 103.0]));
    // One flat point after a rise does not stop it; four flat ones do.
    assert!(keeps_rising(&[100.0, 200.0, 205.0]));
    assert!(keeps_rising(&[100.0, 200.0, 205.0, 206.0]));
    assert!(!keeps_rising(&[100.0, 200.0, 205.0, 206.0, 204.0]));
}

#[test]
fn the_quick_concurrency_fills_every_instance_twice() {
    let c = Candidate { instance_count: 2, max_batch_size: 8, ..Default::default() };
    assert_eq!(quick_concurrency(&c, 64), 32);
    assert_eq!(quick_concurrency(&c, 16), 16);
    assert_eq!(quick_concurrency(&Candidate::default(), 64), 2);
}

fn args(flags: &[&str]) -> TuneArgs {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        tune: TuneArgs,
    }
    let argv = ["tritonrs-tune", "--model-repository", "/r", "--model", "m"].into_iter().chain(flags.iter().copied());
    <Cli as clap::Parser>::try_parse_from(argv).map(|c| c.tune).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_final_sweep_starts_low_only_where_latency_or_power_decides() {
    assert!(upward_sweep_suffices(&args(&[])));
    assert!(upward_sweep_suffices(&args(&["--min-throughput", "10", "--max-memory-mb", "100"])));
    assert!(!upward_sweep_suffices(&args(&["--objective", "latency"])));
    assert!(!upward_sweep_suffices(&args(&["--objective", "efficiency"])));
    assert!(!upward_sweep_suffices(&args(&["--max-p99-ms", "50"])));
    assert!(!upward_sweep_suffices(&args(&["--max-power-w", "5"])));
}

#[test]
fn a_variant_climbed_at_the_largest_concurrency_is_not_loaded_again() {
    let at = |c| Point { concurrency: c, throughput: 100.0, ..Default::default() };
    assert!(sweep_has_nothing_new(&[at(16)], &Sweep::Upward(16), 16));
    assert!(!sweep_has_nothing_new(&[at(8)], &Sweep::Upward(8), 16));
    assert!(!sweep_has_nothing_new(&[], &Sweep::Upward(16), 16));
    assert!(!sweep_has_nothing_new(&[at(16)], &Sweep::Doubling, 16));
}

#[test]
fn a_model_whose_variants_all_failed_says_why_not_that_the_constraints_were_missed() {
    let variant = |name: &str, error: Option<&str>, points: Vec<Point>| VariantResult {
        model: "m".into(),
        name: name.into(),
        candidate: Candidate::default(),
        config_pbtxt: String::new(),
        points,
        error: error.map(String::from),
        best: None,
    };
    let refused = "failed to load: explicit model load is not allowed";
    let mut report = TuneReport {
        variants: vec![
            variant("m_config_default", Some(refused), Vec::new()),
            variant("m_config_0", Some(refused), Vec::new()),
            variant("m_config_1", Some("a request failed at concurrency 2: boom"), Vec::new()),
        ],
        best: vec![("m".into(), None)],
        ..Default::default()
    };
    let why = all_failed(&report).expect("every variant failed");
    assert_eq!(
        why,
        format!(
            "model 'm': all 3 variants failed, so nothing was measured: m_config_default: {refused}; m_config_1: a \
             request failed at concurrency 2: boom"
        )
    );
    assert_eq!(best_lines(&report), [format!("m: {}", why.trim_start_matches("model 'm': "))]);
    // One variant measured (and missing the constraints): the constraints are to blame.
    report.variants[1] = variant("m_config_0", None, vec![Point { concurrency: 1, ..Default::default() }]);
    assert_eq!(all_failed(&report), None);
    assert_eq!(best_lines(&report), ["m: no variant meets the constraints"]);
}
