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
