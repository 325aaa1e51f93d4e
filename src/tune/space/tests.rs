//! Unit tests of `tune/space.rs`.

use super::*;

fn cfg(max_batch_size: i32, backend: &str) -> ModelConfig {
    ModelConfig { name: "m".into(), backend: backend.into(), max_batch_size, ..Default::default() }
}

const LIMITS: Limits = Limits { max_instance_count: 3, max_batch_size: 8, gpu: false, cores: 2 };

#[test]
fn a_batching_onnx_model_sweeps_instances_batch_sizes_batching_and_threads() {
    let space = automatic(&cfg(4, "onnxruntime"), LIMITS);
    assert_eq!(space.instance_counts, [1, 2, 3]);
    assert_eq!(space.max_batch_sizes, [1, 2, 4, 8]);
    assert_eq!(space.dynamic_batching, [false, true]);
    assert_eq!(space.intra_op_threads, [None, Some(1)]);
    assert_eq!(space.kinds, [false]);
    assert_eq!(combinations(&space).len(), 3 * 4 * 2 * 2);
}

#[test]
fn a_model_that_does_not_batch_only_varies_instances() {
    let space = automatic(&cfg(0, "python"), LIMITS);
    let all = combinations(&space);
    assert_eq!(all.len(), 3);
    assert!(all.iter().all(|c| c.max_batch_size == 0 && c.dynamic_batching.is_none()));
}

#[test]
fn quick_search_moves_one_setting_at_a_time() {
    let m = cfg(4, "onnxruntime");
    let space = automatic(&m, LIMITS);
    let s = start(&m, &space);
    assert_eq!(s.instance_count, 1);
    assert!(s.dynamic_batching.is_some());
    let n = neighbours(&s, &space);
    assert!(n.iter().any(|c| c.instance_count == 2 && c.max_batch_size == 4));
    assert!(n.iter().any(|c| c.max_batch_size == 8 && c.instance_count == 1));
    assert!(n.iter().any(|c| c.dynamic_batching.is_none()));
    assert!(n.iter().any(|c| c.intra_op_threads == Some(1)));
    // Each differs from the start in exactly one setting.
    for c in &n {
        let diffs = [
            c.instance_count != s.instance_count,
            c.max_batch_size != s.max_batch_size,
            c.dynamic_batching.is_some() != s.dynamic_batching.is_some(),
            c.intra_op_threads != s.intra_op_threads,
            c.gpu != s.gpu,
        ];
        assert_eq!(diffs.iter().filter(|&&d| d).count(), 1, "{c}");
    }
}

#[test]
fn applying_a_candidate_rewrites_only_its_settings() {
    let mut m = cfg(4, "onnxruntime");
    m.parameters.insert("keep".into(), ModelParameter { string_value: "yes".into() });
    let c = Candidate {
        instance_count: 2,
        max_batch_size: 8,
        dynamic_batching: Some((100, vec![4])),
        intra_op_threads: Some(1),
        ..Default::default()
    };
    let out = apply(&m, &c);
    assert_eq!(out.instance_group.len(), 1);
    assert_eq!(out.instance_group[0].count, 2);
    assert_eq!(out.instance_group[0].kind, Kind::Cpu as i32);
    assert_eq!(out.max_batch_size, 8);
    let Some(SchedulingChoice::DynamicBatching(d)) = &out.scheduling_choice else { panic!("no batching") };
    assert_eq!((d.max_queue_delay_microseconds, d.preferred_batch_size.as_slice()), (100, &[4][..]));
    assert_eq!(out.parameters["intra_op_thread_count"].string_value, "1");
    assert_eq!(out.parameters["keep"].string_value, "yes");
    assert_eq!(current(&out), c);
}

#[test]
fn a_custom_space_reads_toml_with_per_model_tables() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("space.toml");
    std::fs::write(&p, "instance_count = [1, 2]\ndynamic_batching = [true]\n[models.other]\ninstance_count = [3]\n")
        .unwrap();
    let s = CustomSpace::read(&p).unwrap();
    let m = cfg(4, "onnxruntime");
    let space = s.space_for("m", &m).unwrap();
    assert_eq!(space.instance_counts, [1, 2]);
    assert_eq!(space.max_batch_sizes, [4]);
    assert_eq!(combinations(&space).len(), 2);
    assert_eq!(s.space_for("other", &m).unwrap().instance_counts, [3]);
    // Batching a model that does not batch is refused with the reason.
    let e = s.space_for("m", &cfg(0, "onnxruntime")).unwrap_err();
    assert!(e.contains("dynamic batching"), "{e}");
    std::fs::write(&p, "instance_counts = [1]\n").unwrap();
    assert!(CustomSpace::read(&p).unwrap_err().contains("instance_counts"));
}

fn plan(profiles: &[&str]) -> ModelConfig {
    let mut c = cfg(8, "tensorrt");
    c.instance_group = vec![ModelInstanceGroup {
        kind: Kind::Gpu as i32,
        count: 2,
        profile: profiles.iter().map(|p| p.to_string()).collect(),
        ..Default::default()
    }];
    c
}

#[test]
fn a_plan_naming_several_profiles_searches_them_together_and_one_by_one() {
    let gpu = Limits { gpu: true, ..LIMITS };
    let space = automatic(&plan(&["0", "1"]), gpu);
    let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(space.profiles, [p(&["0", "1"]), p(&["0"]), p(&["1"])]);
    // Each profile choice is a neighbour of the start, and survives apply() into the group.
    let start = start(&plan(&["0", "1"]), &space);
    assert_eq!(start.profiles, p(&["0", "1"]));
    let next = neighbours(&start, &space);
    let alone = next.iter().find(|c| c.profiles == p(&["1"])).expect("profile 1 alone is a neighbour");
    assert_eq!(alone.to_string(), "1xGPU mbs=8 db(0us) profile=1");
    let out = apply(&plan(&["0", "1"]), alone);
    assert_eq!(out.instance_group[0].profile, p(&["1"]));
    assert_eq!(current(&out), *alone);
    assert_eq!(combinations(&space).iter().filter(|c| c.profiles == p(&["0"])).count(), combinations(&space).len() / 3);
    // One named profile, or none, gives nothing to search; other models never get profiles.
    assert_eq!(automatic(&plan(&["1"]), gpu).profiles, [p(&["1"])]);
    assert_eq!(automatic(&plan(&[]), gpu).profiles, [Vec::<String>::new()]);
    assert_eq!(automatic(&cfg(8, "onnxruntime"), gpu).profiles, [Vec::<String>::new()]);
}

#[test]
fn a_custom_space_lists_profiles_for_plans_only() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("space.toml");
    std::fs::write(&p, "profile = [[], [\"1\"], [\"0\", \"1\"]]\n").unwrap();
    let s = CustomSpace::read(&p).unwrap();
    let space = s.space_for("m", &plan(&[])).unwrap();
    assert_eq!(space.profiles.len(), 3);
    assert_eq!(combinations(&space).len(), 3);
    let e = s.space_for("m", &cfg(8, "onnxruntime")).unwrap_err();
    assert!(e.contains("not a TensorRT plan"), "{e}");
    std::fs::write(&p, "profile = [[\"fast\"]]\n").unwrap();
    let e = CustomSpace::read(&p).unwrap().space_for("m", &plan(&[])).unwrap_err();
    assert!(e.contains("'fast' is not a profile index"), "{e}");
}
