//! The search order, on temporary folders standing for this machine's: each test says which places
//! hold a library (a file holding "ok") and which hold a broken one, and checks what is used and from
//! where, without the machine's own folders, environment or `python3`.

use super::*;
use crate::backend::libsearch::first_loadable;
use std::cell::Cell;

fn touch(p: &Path, text: &str) -> PathBuf {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
    p.to_path_buf()
}

fn fake_load(p: &Path) -> Result<(), String> {
    match std::fs::read_to_string(p).unwrap_or_default().as_str() {
        "ok" => Ok(()),
        _ => Err("dlopen failed: invalid ELF header".into()),
    }
}

/// A machine in a temporary folder: a checkout with `.ort/` and the binary in `target/release/`, a
/// library folder, a Python package and a file the configuration names.
struct Machine {
    dir: tempfile::TempDir,
    python_asked: Cell<bool>,
}

impl Machine {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        touch(&dir.path().join("checkout/target/release/tritonrs"), "");
        std::fs::create_dir_all(dir.path().join("usr/lib")).unwrap();
        std::fs::create_dir_all(dir.path().join("site-packages/onnxruntime/capi")).unwrap();
        std::fs::create_dir_all(dir.path().join("checkout/.ort")).unwrap();
        Machine { dir, python_asked: Cell::new(false) }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn inputs(&self, setting: Option<(PathBuf, bool)>, env: Option<PathBuf>) -> Inputs<'_> {
        Inputs {
            setting,
            env,
            exe: Some(self.path("checkout/target/release/tritonrs")),
            lib_dirs: vec![self.path("usr/local/lib"), self.path("usr/lib")],
            python_package: Box::new(|| {
                self.python_asked.set(true);
                Some(self.path("site-packages/onnxruntime"))
            }),
        }
    }

    /// The library used and where it came from, or everything tried.
    fn search(&self, setting: Option<(PathBuf, bool)>, env: Option<PathBuf>) -> Result<(PathBuf, String), Vec<String>> {
        first_loadable(stages(self.inputs(setting, env)), fake_load).map(|f| (f.path, f.origin))
    }
}

#[test]
fn the_usual_folders_come_before_python_which_comes_before_the_checkout() {
    let m = Machine::new();
    let ort = touch(&m.path("checkout/.ort/libonnxruntime.so"), "ok");
    let wheel = touch(&m.path("site-packages/onnxruntime/capi/libonnxruntime.so.1.22.1"), "ok");
    let system = touch(&m.path("usr/lib/libonnxruntime.so.1.17.1"), "ok");

    assert_eq!(m.search(None, None).unwrap(), (system.clone(), "a usual library folder".into()));
    assert!(!m.python_asked.get(), "python3 was asked although a library folder had the library");

    std::fs::remove_file(&system).unwrap();
    let (path, origin) = m.search(None, None).unwrap();
    assert_eq!((path, origin.as_str()), (wheel.clone(), "the onnxruntime package of python3 on the PATH"));

    std::fs::remove_file(&wheel).unwrap();
    let (path, origin) = m.search(None, None).unwrap();
    assert_eq!(path, ort);
    assert!(origin.contains("checkout") && origin.contains(".ort"), "{origin}");
}

#[test]
fn a_broken_file_does_not_stop_the_search_and_the_newest_version_wins() {
    let m = Machine::new();
    touch(&m.path("usr/local/lib/libonnxruntime.so"), "not a library");
    touch(&m.path("usr/lib/libonnxruntime.so.1.16.3"), "ok");
    let newer = touch(&m.path("usr/lib/libonnxruntime.so.1.17.1"), "ok");
    assert_eq!(m.search(None, None).unwrap().0, newer);
}

#[test]
fn beside_the_binary_comes_first() {
    let m = Machine::new();
    touch(&m.path("usr/lib/libonnxruntime.so"), "ok");
    let beside = touch(&m.path("checkout/target/lib/libonnxruntime.so"), "ok");
    assert_eq!(m.search(None, None).unwrap(), (beside, "beside the binary".into()));
}

#[test]
fn the_command_line_then_ort_dylib_path_then_the_configuration_file_and_only_that_one() {
    let m = Machine::new();
    touch(&m.path("usr/lib/libonnxruntime.so"), "ok");
    let flag = touch(&m.path("flag/libonnxruntime.so"), "ok");
    let env = touch(&m.path("env/libonnxruntime.so"), "ok");
    let file = touch(&m.path("file/libonnxruntime.so"), "ok");

    let by = |setting, env| m.search(setting, env).unwrap();
    assert_eq!(by(Some((flag.clone(), false)), Some(env.clone())), (flag.clone(), SETTING.into()));
    assert_eq!(by(Some((file.clone(), true)), Some(env.clone())), (env.clone(), "ORT_DYLIB_PATH".into()));
    let (path, origin) = by(Some((file.clone(), true)), None);
    assert_eq!(path, file);
    assert!(origin.contains("configuration file"), "{origin}");
    // A folder is searched for the library.
    assert_eq!(by(None, Some(m.path("env"))).0, env);

    // A named place that does not load is the only place tried, though others would have served.
    let broken = touch(&m.path("broken/libonnxruntime.so"), "not a library");
    let tried = m.search(None, Some(broken.clone())).unwrap_err();
    assert_eq!(tried, [format!("{} (dlopen failed: invalid ELF header)", broken.display())]);
    assert!(!m.python_asked.get());
    let why = reason(named(&m.inputs(None, Some(broken))).map(|(_, by)| by), &tried);
    assert!(why.contains("which ORT_DYLIB_PATH names") && why.contains("invalid ELF header"), "{why}");
}

#[test]
fn found_nowhere_the_reason_says_what_to_install() {
    let m = Machine::new();
    let tried = m.search(None, None).unwrap_err();
    assert!(m.python_asked.get());
    assert!(tried.iter().all(|t| t.ends_with("(not found)")), "{tried:?}");
    // The checkout's .ort/ was among the places.
    assert!(tried.iter().any(|t| t.contains(".ort/libonnxruntime.so")), "{tried:?}");
    let why = reason(None, &tried);
    let pinned = crate::backend::libsearch::pinned_version("onnxruntime").unwrap();
    assert!(why.contains(&format!("pip install onnxruntime=={pinned}")), "{why}");
    assert!(why.contains("ORT_DYLIB_PATH") && why.contains(&format!("any of {} places", tried.len())), "{why}");
}
