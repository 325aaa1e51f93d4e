use super::*;
use object_store::memory::InMemory;
use object_store::PutPayload;
use std::os::unix::fs::MetadataExt;

async fn put(store: &InMemory, key: &str, body: &str) {
    store.put(&ObjPath::from(key), PutPayload::from(body.as_bytes().to_vec())).await.unwrap();
}

fn repo(store: &Arc<InMemory>, cache: &Path) -> CloudRepository {
    CloudRepository::with_store("s3://bucket/models", store.clone(), "models", cache).unwrap()
}

#[tokio::test]
async fn syncs_switches_generations_and_survives_a_restart() {
    let cache = tempfile::tempdir().unwrap();
    let store = Arc::new(InMemory::new());
    put(&store, "models/a/config.pbtxt", "name: \"a\"").await;
    put(&store, "models/a/1/model.onnx", "weights-1").await;
    put(&store, "models/b/1/model.onnx", "b").await;
    put(&store, "models/README.md", "not a model").await;
    put(&store, "elsewhere/c/1/model.onnx", "not in the repository").await;
    let r = repo(&store, cache.path());
    assert!(r.sync(SyncScope::All).await.is_empty());
    let view = r.local_dir().to_path_buf();
    assert_eq!(r.listed_models(), vec!["a", "b"]);
    assert_eq!(std::fs::read_to_string(view.join("a/1/model.onnx")).unwrap(), "weights-1");
    assert_eq!(r.progress(), SyncProgress { bytes: 9 + 9 + 1, files: 3, pending_bytes: 0, failures: 0 });
    let config_inode = std::fs::metadata(view.join("a/config.pbtxt")).unwrap().ino();

    // A changed object: a new generation, the unchanged file linked from the old one.
    let old_target = std::fs::read_link(view.join("a")).unwrap();
    put(&store, "models/a/1/model.onnx", "weights-2").await;
    assert!(r.sync(SyncScope::All).await.is_empty());
    assert_ne!(std::fs::read_link(view.join("a")).unwrap(), old_target);
    assert_eq!(std::fs::read_to_string(view.join("a/1/model.onnx")).unwrap(), "weights-2");
    assert_eq!(std::fs::metadata(view.join("a/config.pbtxt")).unwrap().ino(), config_inode);
    assert_eq!(r.progress().bytes, 19 + 9, "only the changed file was fetched");
    // The previous generation stays (a load may read it); nothing older does.
    put(&store, "models/a/1/model.onnx", "weights-3").await;
    assert!(r.sync(SyncScope::All).await.is_empty());
    let gens = CloudRepository::generations(
        &cache.path().join("repositories").join(slug("s3://bucket/models")).join("store/a"),
    );
    assert_eq!(gens, vec![2, 3]);

    // A restart with the same cache: nothing to download.
    drop(r);
    let r = repo(&store, cache.path());
    assert!(r.sync(SyncScope::All).await.is_empty());
    assert_eq!(r.progress().bytes, 0);
    assert_eq!(std::fs::read_to_string(view.join("a/1/model.onnx")).unwrap(), "weights-3");

    // A model removed from the bucket leaves the view, and its files go at the next sync.
    store.delete(&ObjPath::from("models/b/1/model.onnx")).await.unwrap();
    assert!(r.sync(SyncScope::All).await.is_empty());
    assert!(!view.join("b").exists());
    assert!(r.sync(SyncScope::All).await.is_empty());
    assert!(!cache.path().join("repositories").join(slug("s3://bucket/models")).join("store/b").exists());
}

#[tokio::test]
async fn explicit_scope_brings_only_the_named_models() {
    let cache = tempfile::tempdir().unwrap();
    let store = Arc::new(InMemory::new());
    put(&store, "models/a/1/x", "a").await;
    put(&store, "models/b/1/x", "b").await;
    let r = repo(&store, cache.path());
    assert!(r.sync(SyncScope::List).await.is_empty());
    assert_eq!(r.listed_models(), vec!["a", "b"]);
    assert!(!r.local_dir().join("a").exists());
    let names = vec!["b".to_string(), "nope".to_string()];
    assert!(r.sync(SyncScope::Models(&names)).await.is_empty());
    assert!(r.local_dir().join("b/1/x").is_file());
    assert!(!r.local_dir().join("a").exists());
}

#[tokio::test]
async fn an_empty_or_missing_repository_is_an_error_and_changes_nothing() {
    let cache = tempfile::tempdir().unwrap();
    let store = Arc::new(InMemory::new());
    put(&store, "models/a/1/x", "a").await;
    let r = repo(&store, cache.path());
    assert!(r.sync(SyncScope::All).await.is_empty());
    store.delete(&ObjPath::from("models/a/1/x")).await.unwrap();
    let errors = r.sync(SyncScope::All).await;
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].message.contains("s3://bucket/models") && errors[0].message.contains("holds no objects"),
        "{}",
        errors[0].message
    );
    assert!(r.local_dir().join("a/1/x").is_file(), "the served model keeps its files");
    assert_eq!(r.progress().failures, 1);
}

#[test]
fn groups_objects_by_model_and_drops_markers() {
    let e = |size| Entry { size, etag: Some("e".into()), modified: String::new() };
    let (g, skipped) = group(
        "p",
        [
            ("p/m/1/".to_string(), e(0)),
            ("p/m/1/model.onnx".to_string(), e(3)),
            ("p/m/config.pbtxt".to_string(), e(1)),
            ("p/.hidden/1/x".to_string(), e(1)),
            ("p/top.txt".to_string(), e(1)),
            ("q/m/1/x".to_string(), e(1)),
            ("pm/1/x".to_string(), e(1)),
            ("p/m/a\\b".to_string(), e(1)),
            ("p/n\\m/x".to_string(), e(1)),
        ],
    );
    assert_eq!(g.keys().collect::<Vec<_>>(), vec!["m"]);
    assert_eq!(g["m"].keys().collect::<Vec<_>>(), vec!["1/model.onnx", "config.pbtxt"]);
    // Names no cache entry may have are returned to be named; hidden folders and the root's files are
    // simply not models.
    assert_eq!(skipped.iter().map(|s| s.key.as_str()).collect::<Vec<_>>(), vec!["p/m/a\\b", "p/n\\m/x"]);
}

#[test]
fn label_files_are_read_from_the_configuration() {
    let cfg = b"name: \"m\"\noutput [ { name: \"a\" data_type: TYPE_FP32 dims: [1] label_filename: \"./labels/a.txt\" },\n { name: \"b\" data_type: TYPE_FP32 dims: [1] label_filename: \"../x\" },\n { name: \"c\" data_type: TYPE_FP32 dims: [1] } ]";
    assert_eq!(label_files(cfg), vec!["labels/a.txt"]);
    assert!(label_files(b"not { a config").is_empty());
}

#[tokio::test]
async fn files_over_their_bound_are_refused_before_any_download() {
    let cache = tempfile::tempdir().unwrap();
    let store = Arc::new(InMemory::new());
    put(&store, "models/ok/1/model.onnx", "small").await;
    put(&store, "models/big/config.pbtxt", "name: \"big\"").await;
    put(&store, "models/big/1/model.onnx", &"x".repeat(2048)).await;
    let r = repo(&store, cache.path()).with_max_file_bytes(1024);
    let errors = r.sync(SyncScope::All).await;
    let messages: Vec<&str> = errors.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert!(messages[0].contains("'s3://bucket/models/big/1/model.onnx' is listed at 2048 bytes"), "{}", messages[0]);
    assert!(r.local_dir().join("ok/1/model.onnx").is_file());
    assert!(!r.local_dir().join("big").exists());
    assert_eq!(r.progress().bytes, 5, "nothing of 'big' was fetched");
}

#[tokio::test]
async fn configurations_and_label_files_have_the_servers_bounds() {
    let cache = tempfile::tempdir().unwrap();
    let store = Arc::new(InMemory::new());
    let labels = "name: \"lab\"\noutput [ { name: \"o\" data_type: TYPE_FP32 dims: [1] label_filename: \"l.txt\" } ]";
    put(&store, "models/lab/config.pbtxt", labels).await;
    put(&store, "models/lab/l.txt", &"y\n".repeat((MAX_LABEL_FILE_BYTES as usize) / 2 + 1)).await;
    put(&store, "models/cfg/config.pbtxt", &"#".repeat(MAX_CONFIG_BYTES + 1)).await;
    let r = repo(&store, cache.path());
    let errors = r.sync(SyncScope::All).await;
    let messages: Vec<&str> = errors.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert!(messages[0].contains("cfg/config.pbtxt' is listed at 1048577 bytes, over the limit of 1048576 bytes"));
    assert!(messages[1].contains("lab/l.txt' is listed at 16777218 bytes, over the limit of 16777216 bytes"));
    // Only `lab`'s configuration was fetched, to learn its label files.
    assert_eq!(r.progress().bytes, labels.len() as u64);
    assert!(!r.local_dir().join("lab").exists() && !r.local_dir().join("cfg").exists());
}

#[tokio::test]
async fn named_configurations_have_the_configuration_bound() {
    let cache = tempfile::tempdir().unwrap();
    let store = Arc::new(InMemory::new());
    put(&store, "models/m/config.pbtxt", "name: \"m\"").await;
    put(&store, "models/m/configs/alt.pbtxt", &"#".repeat(MAX_CONFIG_BYTES + 1)).await;
    let errors = repo(&store, cache.path()).sync(SyncScope::All).await;
    let messages: Vec<&str> = errors.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert!(messages[0].contains("m/configs/alt.pbtxt' is listed at 1048577 bytes, over the limit of 1048576 bytes"));
}

#[tokio::test]
async fn keys_with_url_characters_are_fetched_as_listed() {
    let cache = tempfile::tempdir().unwrap();
    let store = Arc::new(InMemory::new());
    // `ObjPath::parse` keeps a key as it is; `from` would have encoded these characters.
    for name in ["notes~1.txt", "100%.txt", "a#b.txt", "x%7E.txt"] {
        store
            .put(&ObjPath::parse(format!("models/m/{name}")).unwrap(), PutPayload::from(name.as_bytes().to_vec()))
            .await
            .unwrap();
    }
    let r = repo(&store, cache.path());
    assert!(r.sync(SyncScope::All).await.is_empty());
    for name in ["notes~1.txt", "100%.txt", "a#b.txt", "x%7E.txt"] {
        assert_eq!(std::fs::read_to_string(r.local_dir().join("m").join(name)).unwrap(), name);
    }
}

#[test]
fn the_default_cache_follows_systemd_then_xdg() {
    // Only the shape: the variables belong to the process.
    let d = default_cache_dir();
    assert!(d.is_absolute() || d.starts_with("/var/tmp"), "{}", d.display());
    assert!(slug("s3://b/m").starts_with("s3___b_m-"));
    assert_ne!(slug("s3://b/m"), slug("s3://b_m"));
}
