//! Finding a runtime's shared library (ONNX Runtime, OpenVINO) at run time, the same way for both:
//! the places are tried in stages, each stage saying where its files come from (for the log line that
//! names the library used, and for the reasons of models that cannot load), and a stage's places are
//! only worked out when every earlier stage has failed, so `python3` is asked where its packages are
//! only when nothing on disk served.
//!
//! The order, as both backends use it: the backend's `library=` setting given on the command line (or
//! its `TRITONRS_BACKEND_CONFIG`), the runtime's environment variable, the setting given in the
//! configuration file (the file < environment < command line order of every other setting); the first
//! of these that is set is the only place tried. Otherwise: beside the binary, the usual library
//! folders, the Python package of the `python3` on the PATH, and the checkout the binary was built in.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// One stage of a search: where its files come from (said in the log and in reasons), and a function
/// that lists them, called only when the stages before it found nothing that loads.
pub struct Stage<'a> {
    pub origin: String,
    pub places: Box<dyn FnOnce() -> Vec<PathBuf> + 'a>,
}

impl<'a> Stage<'a> {
    pub fn new(origin: impl Into<String>, places: impl FnOnce() -> Vec<PathBuf> + 'a) -> Self {
        Stage { origin: origin.into(), places: Box::new(places) }
    }
}

/// The library that loaded, and from where.
#[derive(Debug)]
pub struct Found<T> {
    pub value: T,
    pub path: PathBuf,
    pub origin: String,
}

/// Tries each stage's places in order with `load` (a place that does not exist is noted, not loaded);
/// the first that loads, or every place tried with why it failed.
pub fn first_loadable<T>(
    stages: Vec<Stage<'_>>,
    mut load: impl FnMut(&Path) -> Result<T, String>,
) -> Result<Found<T>, Vec<String>> {
    let mut tried: Vec<String> = Vec::new();
    let mut seen: Vec<PathBuf> = Vec::new();
    for stage in stages {
        for path in (stage.places)() {
            if seen.contains(&path) {
                continue;
            }
            seen.push(path.clone());
            if !path.exists() {
                tried.push(format!("{} (not found)", path.display()));
                continue;
            }
            match load(&path) {
                Ok(value) => return Ok(Found { value, path, origin: stage.origin }),
                Err(e) => tried.push(format!("{} ({e})", path.display())),
            }
        }
    }
    Err(tried)
}

/// `dir/<name>`, then the versioned files `dir/<name>.<version>` that exist (`libonnxruntime.so.1.22.1`,
/// `libopenvino_c.so.2641`), newest version first.
pub fn libs_in(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut list = vec![dir.join(name)];
    let Ok(entries) = std::fs::read_dir(dir) else { return list };
    let mut versioned: Vec<(Vec<u64>, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let file = e.file_name().into_string().ok()?;
            let version = file.strip_prefix(name)?.strip_prefix('.')?;
            let parts: Vec<u64> = version.split('.').map(|n| n.parse().ok()).collect::<Option<_>>()?;
            Some((parts, e.path()))
        })
        .collect();
    versioned.sort_by(|a, b| b.0.cmp(&a.0));
    list.extend(versioned.into_iter().map(|(_, p)| p));
    list
}

/// A path as given, made absolute against the working directory.
pub fn absolute(p: PathBuf) -> PathBuf {
    if p.is_absolute() {
        p
    } else {
        std::env::current_dir().map(|d| d.join(&p)).unwrap_or(p)
    }
}

/// The usual library folders of this machine's architecture, in the order the loader's own search
/// would try them.
pub fn usual_lib_dirs() -> Vec<PathBuf> {
    let triplet = format!("/usr/lib/{}-linux-gnu", std::env::consts::ARCH);
    ["/usr/local/lib", "/usr/lib", triplet.as_str(), "/usr/local/lib64", "/usr/lib64"]
        .iter()
        .map(PathBuf::from)
        .collect()
}

/// The first folder named `name` in the folder of `exe` or one above it: the checkout a binary in
/// `<checkout>/target/release/` was built in keeps `.ort/` and `.venv/` at its top.
pub fn above(exe: &Path, name: &str) -> Option<PathBuf> {
    exe.parent()?.ancestors().map(|d| d.join(name)).find(|d| d.is_dir())
}

/// This binary's path, with links resolved (so a link on the PATH still finds the checkout).
pub fn current_exe() -> Option<PathBuf> {
    std::env::current_exe().ok().map(|e| e.canonicalize().unwrap_or(e))
}

/// How long `python3` may take to say where one of its packages is (it normally takes well under a
/// second; the first run after boot may read its files from a slow SD card).
pub const PYTHON_TIMEOUT: Duration = Duration::from_secs(5);

/// The folder of the package `package` that the `python3` on the PATH would import, if it has one.
/// The package is located without being imported (importing loads the whole runtime); a `python3`
/// that does not answer within [`PYTHON_TIMEOUT`] is stopped, with a warning.
pub fn python_package_dir(package: &str) -> Option<PathBuf> {
    let script = format!(
        "import importlib.util as u\ns = u.find_spec('{package}')\n\
         print(s.submodule_search_locations[0] if s and s.submodule_search_locations else '')"
    );
    let mut cmd = Command::new("python3");
    cmd.args(["-c", &script]);
    let (status, stdout) = match output_within(cmd, PYTHON_TIMEOUT) {
        Ok(Some(done)) => done,
        Ok(None) => {
            tracing::warn!(
                "python3 on the PATH did not answer within {} s where its {package} package is; it was stopped, \
                 and that package is not used.",
                PYTHON_TIMEOUT.as_secs()
            );
            return None;
        }
        Err(_) => return None, // no python3: nothing to ask
    };
    if !status.success() {
        return None;
    }
    let dir = String::from_utf8(stdout).ok()?.trim().to_string();
    (!dir.is_empty()).then(|| PathBuf::from(dir)).filter(|d| d.is_dir())
}

/// Runs `cmd` (stdin empty, stderr dropped) and collects its standard output; `Ok(None)` when it has
/// not finished within `limit`, in which case it is killed and reaped.
pub fn output_within(mut cmd: Command, limit: Duration) -> std::io::Result<Option<(ExitStatus, Vec<u8>)>> {
    let deadline = Instant::now() + limit;
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn()?;
    // Read on a thread of its own, so that neither a full pipe nor a process that keeps the pipe open
    // after the child exits can block this one past the deadline.
    let (tx, rx) = std::sync::mpsc::channel();
    if let Some(mut out) = child.stdout.take() {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = out.read_to_end(&mut buf);
            let _ = tx.send(buf);
        });
    }
    loop {
        if let Some(status) = child.try_wait()? {
            let left = deadline.saturating_duration_since(Instant::now());
            return Ok(rx.recv_timeout(left).ok().map(|out| (status, out)));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The version of `package` that scripts/requirements.txt pins (`onnxruntime==1.22.1` gives
/// `1.22.1`): the one the tests run with, so the one to tell users to install.
pub fn pinned_version(package: &str) -> Option<&'static str> {
    const REQUIREMENTS: &str = include_str!("../../scripts/requirements.txt");
    REQUIREMENTS.lines().find_map(|line| {
        let (name, version) = line.split_once("==")?;
        (name.trim() == package).then(|| version.split([';', ' ']).next().unwrap_or(version).trim())
    })
}

#[cfg(test)]
mod tests;
