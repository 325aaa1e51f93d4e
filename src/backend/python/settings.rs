//! The Python backend's settings (`--backend-config=python,...`, see the backend's doc), the stub files
//! every stub shares, the fork server stubs are forked from, and a model's Python environment
//! (`EXECUTION_ENV_PATH`). Below the backend and its stubs, which both read them.

use super::zygote;
use crate::error::{Error, Result};
use crate::model_api::BackendConfig;
use crate::proto::inference::ModelConfig;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The stub script, run by the interpreter.
const STUB_PY: &str = include_str!("stub/tritonrs_stub.py");
/// The module models import as `triton_python_backend_utils`.
const UTILS_PY: &str = include_str!("stub/triton_python_backend_utils.py");
/// The stubs' fork server.
const ZYGOTE_PY: &str = include_str!("stub/tritonrs_zygote.py");

/// Triton's default `stub-timeout-seconds`.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default size of each stub's shared-memory file.
const DEFAULT_SHM: usize = 8 << 20;

/// `--backend-config=python,...` settings, plus the files every stub shares.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The Python interpreter stubs run with, unless a model names an execution environment.
    pub executable: PathBuf,
    /// How long a stub may take to start, or stay silent while executing.
    pub timeout: Duration,
    /// Size of each stub's shared-memory file.
    pub shm_size: usize,
    /// The folder holding the stub files, written on first use and removed with the last clone.
    files: Arc<OnceLock<std::result::Result<tempfile::TempDir, String>>>,
    /// Execution environments unpacked from archives, by archive path.
    unpacked: Arc<Mutex<HashMap<PathBuf, Arc<tempfile::TempDir>>>>,
    /// Whether stubs of the server's interpreter are forked from the fork server (`zygote`, default true).
    pub zygote: bool,
    /// The fork server, started on first use (shared by every clone).
    zygote_process: Arc<Mutex<Option<zygote::Zygote>>>,
    /// `--backend-directory`: where a Python-based backend's `model.py` is (`<directory>/<backend>/`).
    pub backend_directory: PathBuf,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            executable: PathBuf::from("python3"),
            timeout: DEFAULT_TIMEOUT,
            shm_size: DEFAULT_SHM,
            files: Arc::new(OnceLock::new()),
            unpacked: Arc::new(Mutex::new(HashMap::new())),
            zygote: true,
            zygote_process: Arc::new(Mutex::new(None)),
            backend_directory: PathBuf::from(crate::model_api::DEFAULT_BACKEND_DIRECTORY),
        }
    }
}

impl Settings {
    /// Reads the `python` backend's `--backend-config` settings (Triton's names where Triton has them).
    pub fn from_config(cfg: &BackendConfig) -> Result<Settings> {
        let mut s = Settings::default();
        if let Some(dir) = cfg.global.get("backend-directory") {
            s.backend_directory = PathBuf::from(dir);
        }
        if let Some(exe) = cfg.get("python", "python-executable") {
            s.executable = PathBuf::from(exe);
        }
        if let Some(v) = cfg.get("python", "stub-timeout-seconds") {
            let secs = v.parse::<u64>().ok().filter(|&n| n > 0).ok_or_else(|| {
                Error::invalid(format!(
                    "--backend-config=python,stub-timeout-seconds must be a positive integer, got '{v}'"
                ))
            })?;
            s.timeout = Duration::from_secs(secs);
        }
        if let Some(v) = cfg.get("python", "zygote") {
            s.zygote = match v.to_ascii_lowercase().as_str() {
                "true" | "1" | "on" => true,
                "false" | "0" | "off" => false,
                _ => {
                    return Err(Error::invalid(format!(
                        "--backend-config=python,zygote must be true or false, got '{v}'"
                    )))
                }
            };
        }
        if let Some(v) = cfg.get("python", "shm-default-byte-size") {
            s.shm_size = v.parse::<usize>().ok().filter(|&n| n >= 1 << 16).ok_or_else(|| {
                Error::invalid(format!(
                    "--backend-config=python,shm-default-byte-size must be an integer of at least 65536, got '{v}'"
                ))
            })?;
        }
        Ok(s)
    }

    /// The folder of the Python-based backend that serves a model (`<backend-directory>/<backend>`, whose
    /// `model.py` is the model's code), when its configuration's `runtime` is `model.py`.
    pub fn python_based_backend(&self, cfg: &ModelConfig) -> Option<PathBuf> {
        (cfg.runtime == crate::model_config::PYTHON_RUNTIME).then(|| self.backend_directory.join(&cfg.backend))
    }

    /// The folder with the stub script and `triton_python_backend_utils.py`.
    pub fn stub_files(&self) -> Result<PathBuf> {
        let dir = self.files.get_or_init(|| {
            let dir = tempfile::Builder::new()
                .prefix("tritonrs-python-")
                .tempdir()
                .map_err(|e| format!("cannot create a folder for the Python stub files: {e}"))?;
            let all = [
                ("tritonrs_stub.py", STUB_PY),
                ("triton_python_backend_utils.py", UTILS_PY),
                ("tritonrs_zygote.py", ZYGOTE_PY),
            ];
            for (name, text) in all {
                std::fs::write(dir.path().join(name), text)
                    .map_err(|e| format!("cannot write the Python stub file '{name}': {e}"))?;
            }
            Ok(dir)
        });
        dir.as_ref().map(|d| d.path().to_path_buf()).map_err(|e| Error::internal(e.clone()))
    }
}

impl Settings {
    /// Forks a stub from the fork server (started, or started again, as needed), which shows `argv` as
    /// its command line. An error means the caller starts the stub as a fresh process instead.
    pub fn fork_stub(
        &self,
        argv: &[String],
        sys_path: &[PathBuf],
        env: &[(String, String)],
        socket: std::os::fd::BorrowedFd<'_>,
        stderr: std::os::fd::BorrowedFd<'_>,
    ) -> Result<rustix::process::Pid> {
        let files = self.stub_files()?;
        let mut z = self.zygote_process.lock();
        // A fork server that died is started again, once per request.
        for attempt in 0..2 {
            if !z.as_mut().is_some_and(|z| z.is_alive()) {
                *z = Some(zygote::Zygote::start(&self.executable, &files, self.timeout)?);
            }
            let Some(running) = z.as_ref() else { break };
            match running.fork(argv, sys_path, env, socket, stderr) {
                Ok(pid) => return Ok(pid),
                Err(e) if attempt == 1 => return Err(e),
                Err(_) => *z = None,
            }
        }
        Err(Error::unavailable("the Python stubs' fork server is not running"))
    }
}

/// The Python environment a model's stubs run in (`EXECUTION_ENV_PATH`).
#[derive(Debug, Clone)]
pub struct ExecEnv {
    /// Its interpreter.
    pub python: PathBuf,
    /// Variables that activate it.
    pub vars: Vec<(String, String)>,
    /// Keeps an unpacked archive alive while a stub may use it.
    _unpacked: Option<Arc<tempfile::TempDir>>,
}

impl ExecEnv {
    /// Reads the model's `EXECUTION_ENV_PATH` parameter (with Triton's `$$TRITON_MODEL_DIRECTORY`): a
    /// Python environment folder, or a `.tar.gz` / `.tar` archive of one (conda-pack), unpacked once.
    pub(super) fn resolve(settings: &Settings, cfg: &ModelConfig, model_dir: &Path) -> Result<Option<ExecEnv>> {
        let Some(raw) =
            cfg.parameters.get("EXECUTION_ENV_PATH").map(|p| p.string_value.trim()).filter(|s| !s.is_empty())
        else {
            return Ok(None);
        };
        let path = PathBuf::from(raw.replace("$$TRITON_MODEL_DIRECTORY", &model_dir.display().to_string()));
        let (root, unpacked) = if path.is_dir() {
            (path.clone(), None)
        } else if path.is_file() {
            let dir = unpack(settings, &path)?;
            (dir.path().to_path_buf(), Some(dir))
        } else {
            return Err(Error::invalid(format!("EXECUTION_ENV_PATH '{}' does not exist", path.display())));
        };
        let bin = root.join("bin");
        let python = ["python3", "python"]
            .iter()
            .map(|n| bin.join(n))
            .find(|p| p.exists())
            .ok_or_else(|| Error::invalid(format!("EXECUTION_ENV_PATH '{}' has no bin/python3", path.display())))?;
        let prepend = |var: &str, dir: &Path| {
            let old = std::env::var(var).unwrap_or_default();
            let new = if old.is_empty() { dir.display().to_string() } else { format!("{}:{old}", dir.display()) };
            (var.to_string(), new)
        };
        let vars = vec![
            prepend("PATH", &bin),
            prepend("LD_LIBRARY_PATH", &root.join("lib")),
            ("VIRTUAL_ENV".to_string(), root.display().to_string()),
            ("CONDA_PREFIX".to_string(), root.display().to_string()),
        ];
        Ok(Some(ExecEnv { python, vars, _unpacked: unpacked }))
    }
}

/// Unpacks an environment archive into a temporary folder (once per archive) with the system's `tar`.
fn unpack(settings: &Settings, archive: &Path) -> Result<Arc<tempfile::TempDir>> {
    let mut cache = settings.unpacked.lock();
    if let Some(d) = cache.get(archive) {
        return Ok(d.clone());
    }
    let dir = tempfile::Builder::new()
        .prefix("tritonrs-pyenv-")
        .tempdir()
        .map_err(|e| Error::internal(format!("cannot create a folder to unpack '{}': {e}", archive.display())))?;
    let out = std::process::Command::new("tar")
        .arg("-xf")
        .arg(archive)
        .arg("-C")
        .arg(dir.path())
        .output()
        .map_err(|e| Error::unavailable(format!("cannot run tar to unpack '{}': {e}", archive.display())))?;
    if !out.status.success() {
        return Err(Error::invalid(format!(
            "cannot unpack EXECUTION_ENV_PATH '{}': {}",
            archive.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let dir = Arc::new(dir);
    cache.insert(archive.to_path_buf(), dir.clone());
    Ok(dir)
}
