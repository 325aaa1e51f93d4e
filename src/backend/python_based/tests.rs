use super::*;
use crate::model_config::Completer;

/// A completer that says which one it is by setting the configuration's platform.
struct Named(&'static str);

impl Completer for Named {
    fn complete(&self, _: &Path, _: &str, mut cfg: ModelConfig) -> std::result::Result<ModelConfig, ConfigFailure> {
        cfg.platform = self.0.into();
        Ok(cfg)
    }
}

fn resolver(directory: &Path) -> Resolver {
    Resolver {
        directory: directory.to_path_buf(),
        builtin: vec!["python", "onnxruntime"],
        python: Some(Arc::new(Named("python"))),
        libraries: Arc::new(Named("library")),
    }
}

fn model(backend: &str) -> ModelConfig {
    ModelConfig { name: "m".into(), backend: backend.into(), ..Default::default() }
}

#[test]
fn a_backend_folder_with_model_py_and_no_library_is_python_based() {
    let backends = tempfile::tempdir().unwrap();
    let repo = tempfile::tempdir().unwrap();
    let dir = repo.path().join("m");
    std::fs::create_dir_all(dir.join("1")).unwrap();
    std::fs::create_dir_all(backends.path().join("echo")).unwrap();
    std::fs::write(backends.path().join("echo").join("model.py"), "").unwrap();
    let r = resolver(backends.path());
    let mut cfg = model("echo");
    r.resolve(&dir, &mut cfg).unwrap();
    assert_eq!(cfg.runtime, "model.py");
    assert!(cfg.parameters.is_empty());
    assert_eq!(r.complete(&dir, "m", cfg).unwrap().platform, "python");

    // A backend without model.py, and built-in backends, are left alone.
    for name in ["other", "python", "onnxruntime", ""] {
        let mut cfg = model(name);
        r.resolve(&dir, &mut cfg).unwrap();
        assert_eq!(cfg.runtime, "", "{name}");
        assert_eq!(r.complete(&dir, "m", cfg).unwrap().platform, "library");
    }

    // A library wins over model.py, as in tritonserver: in the version folder, say.
    std::fs::write(dir.join("1").join("libtriton_echo.so"), "").unwrap();
    let mut cfg = model("echo");
    r.resolve(&dir, &mut cfg).unwrap();
    assert_eq!(cfg.runtime, "");
}

#[test]
fn the_backend_folder_may_hold_the_models_python_environment() {
    let backends = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let folder = backends.path().join("echo");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("model.py"), "").unwrap();
    std::fs::write(folder.join("pb_exec_env_model.py.tar.gz"), "").unwrap();
    let r = resolver(backends.path());
    let mut cfg = model("echo");
    r.resolve(dir.path(), &mut cfg).unwrap();
    let env = folder.join("pb_exec_env_model.py.tar.gz").display().to_string();
    assert_eq!(cfg.parameters["EXECUTION_ENV_PATH"].string_value, env);
    // One the model names itself stays.
    let mut cfg = model("echo");
    cfg.parameters.insert("EXECUTION_ENV_PATH".into(), ModelParameter { string_value: "/own".into() });
    r.resolve(dir.path(), &mut cfg).unwrap();
    assert_eq!(cfg.parameters["EXECUTION_ENV_PATH"].string_value, "/own");
}
