//! A model load request's `config` override: JSON text through `read_model_config` (JSON →
//! ModelConfig, normalisation, the limits on sizes, path confinement and validation; auto-complete
//! off, as for a repository configuration), then what loading builds from an accepted configuration:
//! the instance list and the warmup samples. Nothing may panic or abort, and what is built stays within
//! the limits (libFuzzer's -malloc_limit_mb catches a huge allocation).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;
use tritonrs::core::lifecycle::instance_specs;
use tritonrs::core::repository::{limits, read_model_config, RepoOptions};
use tritonrs::core::warmup;

/// Largest tensor a configuration may size here (the server's default is 64 MiB).
const MAX_TENSOR_BYTES: usize = 1 << 20;

/// A model folder `m` with a version, a warmup data file, a label file and an initial-state file, made
/// once per process.
fn model_dir() -> &'static PathBuf {
    static DIR: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &DIR.get_or_init(|| {
        let root = tempfile::tempdir().expect("a temporary folder");
        let m = root.path().join("m");
        for d in ["1", "warmup", "initial_state"] {
            std::fs::create_dir_all(m.join(d)).expect("model folders");
        }
        std::fs::write(m.join("warmup/data"), [1u8; 64]).expect("warmup data");
        std::fs::write(m.join("initial_state/state"), [0u8; 64]).expect("initial state");
        std::fs::write(m.join("labels.txt"), "cat\ndog\n").expect("labels");
        (root, m)
    })
    .1
}

fuzz_target!(|data: &[u8]| {
    let Ok(json) = std::str::from_utf8(data) else {
        return;
    };
    let dir = model_dir();
    let opts = RepoOptions { autocomplete: false, max_tensor_bytes: MAX_TENSOR_BYTES, ..Default::default() };
    let Ok(cfg) = read_model_config(dir, "m", &opts, Some(json)) else {
        return;
    };
    let specs = instance_specs(&cfg);
    assert!(specs.len() as u64 <= limits::MAX_INSTANCES, "{} instances passed the limits", specs.len());
    if let Ok(samples) = warmup::samples(&cfg, dir, MAX_TENSOR_BYTES) {
        drop(samples);
    }
});
