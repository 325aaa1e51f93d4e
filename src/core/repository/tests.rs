use super::*;
use std::fs;

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("model-repos/examples")
}

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

#[test]
fn version_folders_ignore_non_numeric_and_leading_zero() {
    let tmp = tempfile::tempdir().unwrap();
    for d in ["1", "2", "10", "01", "0", "abc", "3x"] {
        fs::create_dir_all(tmp.path().join(d)).unwrap();
    }
    fs::write(tmp.path().join("4"), "a file, not a folder").unwrap();
    assert_eq!(list_versions(tmp.path()).into_iter().collect::<Vec<_>>(), vec![1, 2, 10]);
}

#[test]
fn duplicate_names_across_repositories_are_errors_for_that_model_only() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    fs::create_dir_all(a.path().join("dup")).unwrap();
    fs::create_dir_all(a.path().join("only_a")).unwrap();
    fs::create_dir_all(b.path().join("dup")).unwrap();
    fs::create_dir_all(b.path().join(".hidden")).unwrap();
    let missing = a.path().join("missing");
    let (found, errors) = scan(&[a.path().to_path_buf(), b.path().to_path_buf(), missing]);
    assert_eq!(found.len(), 2);
    assert!(found["only_a"].is_ok());
    let msg = found["dup"].as_ref().unwrap_err().message.clone();
    assert!(msg.contains("more than one model repository"), "{msg}");
    assert_eq!(errors.len(), 1);
    // With namespacing the name is one model per repository, each under a key naming its repository.
    let (found, _) = scan_ns(&[a.path().to_path_buf(), b.path().to_path_buf()], true);
    let keys: Vec<&String> = found.keys().filter(|k| namespace::plain(k) == "dup").collect();
    assert_eq!(keys.len(), 2, "{found:?}");
    for k in keys {
        let dir = found[k].as_ref().unwrap();
        assert_eq!(namespace::sibling_key("dup", dir).as_ref(), Some(k));
    }
    assert!(found["only_a"].is_ok());
}

#[test]
fn example_simple_config_reads_and_normalizes() {
    let cfg = read_model_config(&examples().join("simple"), "simple", &RepoOptions::default(), None).unwrap();
    assert_eq!(cfg.max_batch_size, 8);
    assert_eq!(cfg.input.len(), 2);
    assert_eq!(cfg.input[0].dims, vec![16]);
    assert_eq!(cfg.instance_group.len(), 1);
    assert_eq!(cfg.instance_group[0].name, "simple");
    assert_eq!(cfg.instance_group[0].count, 1);
    assert_eq!(cfg.instance_group[0].kind, Kind::Cpu as i32);
    assert_eq!(VersionPolicy::from_config(&cfg), VersionPolicy::Latest(1));
    assert_eq!(model_filename(&cfg), "model.onnx");
}

#[test]
fn missing_config_is_autocompleted_from_the_onnx_file() {
    let dir = examples().join("autocomplete_add");
    let cfg = read_model_config(&dir, "autocomplete_add", &RepoOptions::default(), None).unwrap();
    assert_eq!(cfg.backend, "onnxruntime");
    assert_eq!(cfg.platform, "onnxruntime_onnx");
    assert_eq!(cfg.max_batch_size, 4);
    let names: Vec<_> = cfg.input.iter().map(|i| (i.name.as_str(), i.dims.clone(), i.data_type)).collect();
    assert_eq!(names, vec![("INPUT0", vec![8], 11), ("INPUT1", vec![8], 11)]);
    assert_eq!(cfg.output[0].name, "OUTPUT");
    let strict = RepoOptions { autocomplete: false, ..Default::default() };
    let err = read_model_config(&dir, "autocomplete_add", &strict, None).unwrap_err();
    assert!(err.message.contains("auto-complete is disabled"), "{}", err.message);
}

#[test]
fn custom_default_max_batch_size_applies() {
    let dir = examples().join("autocomplete_add");
    let opts = RepoOptions { autocomplete: true, default_max_batch_size: 16, ..Default::default() };
    assert_eq!(read_model_config(&dir, "autocomplete_add", &opts, None).unwrap().max_batch_size, 16);
}

#[test]
fn config_errors_name_file_line_and_field() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bad");
    write(&dir.join("config.pbtxt"), "name: \"bad\"\nbackend: \"onnxruntime\"\nmax_batch_sizee: 4\n");
    fs::create_dir_all(dir.join("1")).unwrap();
    let e = read_model_config(&dir, "bad", &RepoOptions::default(), None).unwrap_err();
    assert!(e.message.contains("config.pbtxt:3:"), "{}", e.message);
    assert!(e.message.contains("max_batch_sizee"), "{}", e.message);
}

#[test]
fn a_tensorflow_model_gets_triton_platform_and_file_name_from_its_model_file() {
    let tmp = tempfile::tempdir().unwrap();
    let io =
        r#"input [{name: "x" data_type: TYPE_FP32 dims: [4]}] output [{name: "y" data_type: TYPE_FP32 dims: [3]}]"#;
    let opts = RepoOptions { autocomplete: false, ..Default::default() };
    let read = |name: &str, file: &str, folder: bool, text: &str| {
        let dir = tmp.path().join(name);
        let path = dir.join("1").join(file);
        if folder {
            fs::create_dir_all(&path).unwrap();
        } else {
            write(&path, "");
        }
        write(&dir.join("config.pbtxt"), text);
        read_model_config(&dir, name, &opts, None).unwrap()
    };
    let cfg = read("gd", "model.graphdef", false, &format!("backend: \"tensorflow\" {io}"));
    assert_eq!((cfg.platform.as_str(), cfg.default_model_filename.as_str()), ("tensorflow_graphdef", "model.graphdef"));
    let cfg = read("sm", "model.savedmodel", true, &format!("backend: \"tensorflow\" {io}"));
    assert_eq!(
        (cfg.platform.as_str(), cfg.default_model_filename.as_str()),
        ("tensorflow_savedmodel", "model.savedmodel")
    );
    // A platform alone names the backend, and a model folder without a configuration is found by its file.
    let cfg = read("p", "model.graphdef", false, &format!("platform: \"tensorflow_graphdef\" {io}"));
    assert_eq!((cfg.backend.as_str(), cfg.default_model_filename.as_str()), ("tensorflow", "model.graphdef"));
    let cfg = read("bare", "model.graphdef", false, io);
    assert_eq!((cfg.backend.as_str(), cfg.platform.as_str()), ("tensorflow", "tensorflow_graphdef"));
}

#[test]
fn semantic_errors_are_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    fs::create_dir_all(dir.join("1")).unwrap();
    let check = |text: &str, needle: &str| {
        write(&dir.join("config.pbtxt"), text);
        let e =
            read_model_config(&dir, "m", &RepoOptions { autocomplete: false, ..Default::default() }, None).unwrap_err();
        assert!(e.message.contains(needle), "{needle:?} not in {:?}", e.message);
    };
    let io =
        r#"input [{name: "A" data_type: TYPE_FP32 dims: [2]}] output [{name: "B" data_type: TYPE_FP32 dims: [2]}]"#;
    check(&format!("name: \"other\" backend: \"onnxruntime\" {io}"), "but the model is 'm'");
    check(&format!("backend: \"../x\" {io}"), "is not a backend name");
    // Backends other than the built-in ones are libraries the load looks for; the configuration is fine.
    write(&dir.join("config.pbtxt"), &format!("backend: \"tensorflow\" {io}"));
    let cfg = read_model_config(&dir, "m", &RepoOptions { autocomplete: false, ..Default::default() }, None).unwrap();
    assert_eq!(cfg.backend, "tensorflow");
    write(&dir.join("config.pbtxt"), &format!("platform: \"pytorch_libtorch\" {io}"));
    let cfg = read_model_config(&dir, "m", &RepoOptions { autocomplete: false, ..Default::default() }, None).unwrap();
    assert_eq!(cfg.backend, "pytorch");
    check(&format!("platform: \"weird\" {io}"), "unknown platform");
    check("backend: \"onnxruntime\" output [{name: \"B\" data_type: TYPE_FP32 dims: [2]}]", "has no inputs");
    check(
        r#"backend: "onnxruntime" input [{name: "A" data_type: TYPE_FP32 dims: [0]}] output [{name: "B" data_type: TYPE_FP32 dims: [2]}]"#,
        "dimension 0",
    );
    check(
        r#"backend: "onnxruntime" input [{name: "A" dims: [2]}] output [{name: "B" data_type: TYPE_FP32 dims: [2]}]"#,
        "no valid data_type",
    );
    check(
        r#"backend: "onnxruntime" input [{name: "A" data_type: TYPE_FP32 dims: [2]}, {name: "A" data_type: TYPE_FP32 dims: [2]}] output [{name: "B" data_type: TYPE_FP32 dims: [2]}]"#,
        "declared twice",
    );
    check(
        r#"backend: "onnxruntime" input [{name: "A" data_type: TYPE_FP32 dims: [2] reshape: {shape: [3]}}] output [{name: "B" data_type: TYPE_FP32 dims: [2]}]"#,
        "different element count",
    );
    check(
        r#"backend: "onnxruntime" input [{name: "A" data_type: TYPE_FP32 dims: [2]}] output [{name: "B" data_type: TYPE_FP32 dims: [2] label_filename: "nope.txt"}]"#,
        "label file 'nope.txt' not found",
    );
    check("max_batch_size: 2", "unable to determine the backend");
}

#[test]
fn json_override_replaces_config_pbtxt() {
    let json = r#"{"backend":"onnxruntime","max_batch_size":2,
        "input":[{"name":"INPUT0","data_type":"TYPE_INT32","dims":[16]},{"name":"INPUT1","data_type":"TYPE_INT32","dims":[16]}],
        "output":[{"name":"OUTPUT0","data_type":"TYPE_INT32","dims":[16]}]}"#;
    let cfg = read_model_config(&examples().join("simple"), "simple", &RepoOptions::default(), Some(json)).unwrap();
    assert_eq!(cfg.max_batch_size, 2);
    assert_eq!(cfg.output.len(), 1);
    let e =
        read_model_config(&examples().join("simple"), "simple", &RepoOptions::default(), Some("{nope")).unwrap_err();
    assert!(e.message.contains("invalid 'config' parameter"), "{}", e.message);
}

#[test]
fn labels_and_fingerprint() {
    let dir = examples().join("classifier");
    let cfg = read_model_config(&dir, "classifier", &RepoOptions::default(), None).unwrap();
    let labels = read_labels(&cfg, &dir).unwrap();
    assert_eq!(labels["OUTPUT"].as_slice(), ["cat", "dog", "bird", "fish", "horse"]);

    let tmp = tempfile::tempdir().unwrap();
    fs::create_dir_all(tmp.path().join("1")).unwrap();
    let before = fingerprint(tmp.path());
    assert_eq!(before, fingerprint(tmp.path()));
    fs::create_dir_all(tmp.path().join("2")).unwrap();
    assert_ne!(before, fingerprint(tmp.path()));
}

const ENSEMBLE: &str = r#"name: "ens" platform: "ensemble" max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [ { model_name: "m" model_version: -1 input_map { key: "I" value: "IN" }
  output_map { key: "O" value: "OUT" } } ] }
"#;

#[test]
fn an_ensemble_config_gets_no_instances_or_optimization() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ens");
    write(&dir.join("config.pbtxt"), ENSEMBLE);
    fs::create_dir_all(dir.join("1")).unwrap();
    let cfg = read_model_config(&dir, "ens", &RepoOptions::default(), None).unwrap();
    assert_eq!(cfg.backend, "");
    assert!(cfg.instance_group.is_empty());
    assert!(cfg.optimization.is_none());
    assert!(cfg.default_model_filename.is_empty());
    assert_eq!(cfg.model_transaction_policy, Some(Default::default()));
    assert_eq!(VersionPolicy::from_config(&cfg), VersionPolicy::Latest(1));
}

#[test]
fn an_ensemble_config_is_checked_as_triton_does() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ens");
    fs::create_dir_all(dir.join("1")).unwrap();
    let read = |text: &str| {
        write(&dir.join("config.pbtxt"), text);
        read_model_config(&dir, "ens", &RepoOptions::default(), None).unwrap_err().message
    };
    let msg = read(&format!("{ENSEMBLE}instance_group [ {{ count: 2 }} ]"));
    assert!(msg.contains("field 'instance_group'") && msg.contains("no instances"), "{msg}");
    let msg = read(&format!("{ENSEMBLE}optimization {{ input_pinned_memory {{ enable: false }} }}"));
    assert!(msg.contains("field 'optimization'"), "{msg}");
    let msg = read(&ENSEMBLE.replace(r#"value: "IN" }"#, r#"value: "elsewhere" }"#));
    assert!(msg.contains("field 'ensemble_scheduling'") && msg.contains("'elsewhere'"), "{msg}");
    let msg = read(&ENSEMBLE.replace(r#"platform: "ensemble""#, r#"backend: "onnxruntime""#));
    assert!(msg.contains("field 'ensemble_scheduling'") && msg.contains("only an ensemble"), "{msg}");
}

#[test]
fn validate_checks_an_ensemble_against_the_repository() {
    let ens = pbtxt::parse_config(ENSEMBLE, "config.pbtxt").unwrap();
    let m = pbtxt::parse_config(
        r#"name: "m" backend: "onnxruntime" max_batch_size: 8
           input [ { name: "I" data_type: TYPE_FP32 dims: [ 4 ] } ]
           output [ { name: "O" data_type: TYPE_FP32 dims: [ 4 ] } ]"#,
        "config.pbtxt",
    )
    .unwrap();
    let mut configs = BTreeMap::new();
    let msg = check_ensemble_in_repository(&ens, &configs).unwrap_err().message;
    assert!(msg.contains("composing model 'm' is not in the model repositories"), "{msg}");
    configs.insert("m".to_string(), Err(Error::invalid("bad config")));
    let msg = check_ensemble_in_repository(&ens, &configs).unwrap_err().message;
    assert!(msg.contains("composing model 'm' is invalid: bad config"), "{msg}");
    configs.insert("m".to_string(), Ok(m.clone()));
    check_ensemble_in_repository(&ens, &configs).unwrap();
    let mut renamed = m;
    renamed.output[0].name = "P".into();
    configs.insert("m".to_string(), Ok(renamed));
    assert!(check_ensemble_in_repository(&ens, &configs).unwrap_err().message.contains("no such output"));
}

#[test]
fn kind_auto_never_means_an_nvidia_gpu_for_openvino_models() {
    // The normalizer asks for usable GPUs only for backends that can run on them.
    assert!(runs_on_cpu_only("openvino") && runs_on_cpu_only("tensorflow"));
    assert!(!runs_on_cpu_only("onnxruntime") && !runs_on_cpu_only("tensorrt") && !runs_on_cpu_only("python"));
}
