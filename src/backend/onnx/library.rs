//! Where `libonnxruntime.so` is looked for, in order (see [`crate::backend::libsearch`]):
//! `--backend-config=onnxruntime,library=PATH` given on the command line, `ORT_DYLIB_PATH`, the same
//! setting in the configuration file (the first of these that is set is the only place tried; each a
//! file or the folder holding it); else beside the binary, the usual library folders (the .deb's
//! `/opt/tritonrs/lib`, `/usr/local/lib`, `/usr/lib`, `/usr/lib/<arch>-linux-gnu`, ...), the
//! `onnxruntime` package of the `python3` on the PATH (its `capi/libonnxruntime.so.<version>`), and
//! the `.ort/` folder of the checkout the binary was built in (which `scripts/env.sh` fills). Each
//! name is tried as is and as the versioned files beside it, newest first.

use crate::backend::libsearch::{self, Stage};
use std::path::{Path, PathBuf};

/// The library's file name, without a version suffix.
pub const LIB_NAME: &str = "libonnxruntime.so";

/// The setting's name in messages.
pub const SETTING: &str = "--backend-config=onnxruntime,library";

/// Folders where packages of ONNX Runtime put it, besides the usual library folders: the .deb's own
/// folder first, and the folder of NVIDIA's and Microsoft's archives last.
const DEB_DIR: &str = "/opt/tritonrs/lib";
const ARCHIVE_DIR: &str = "/opt/onnxruntime/lib";

/// What the search looks at, as this process sees it (the tests give their own).
pub struct Inputs<'a> {
    /// `--backend-config=onnxruntime,library=PATH`, and whether the configuration file gave it.
    pub setting: Option<(PathBuf, bool)>,
    /// `ORT_DYLIB_PATH`.
    pub env: Option<PathBuf>,
    /// This binary.
    pub exe: Option<PathBuf>,
    /// The library folders to look in, in order.
    pub lib_dirs: Vec<PathBuf>,
    /// The folder of the `onnxruntime` package of `python3` on the PATH; asked only when needed.
    pub python_package: Box<dyn FnOnce() -> Option<PathBuf> + 'a>,
}

impl Inputs<'static> {
    /// This process's: its environment, its binary, this machine's folders and `python3`.
    pub fn of_this_process(setting: Option<(PathBuf, bool)>) -> Self {
        let mut lib_dirs = vec![PathBuf::from(DEB_DIR)];
        lib_dirs.extend(libsearch::usual_lib_dirs());
        lib_dirs.push(PathBuf::from(ARCHIVE_DIR));
        Inputs {
            setting: setting.map(|(p, f)| (libsearch::absolute(p), f)),
            env: std::env::var_os("ORT_DYLIB_PATH").filter(|p| !p.is_empty()).map(|p| libsearch::absolute(p.into())),
            exe: libsearch::current_exe(),
            lib_dirs,
            python_package: Box::new(|| libsearch::python_package_dir("onnxruntime")),
        }
    }
}

/// The place the user named, and by what, when one is named.
pub fn named<'i>(inputs: &'i Inputs<'_>) -> Option<(&'i Path, &'static str)> {
    match (&inputs.setting, &inputs.env) {
        (Some((p, false)), _) => Some((p, SETTING)),
        (_, Some(p)) => Some((p, "ORT_DYLIB_PATH")),
        (Some((p, true)), None) => Some((p, "backend-config in the configuration file")),
        (None, None) => None,
    }
}

/// A named place: the file, or the library in the folder.
fn named_places(p: &Path) -> Vec<PathBuf> {
    if p.is_dir() {
        libsearch::libs_in(p, LIB_NAME)
    } else {
        vec![p.to_path_buf()]
    }
}

/// The stages of the search, in order.
pub fn stages<'a>(inputs: Inputs<'a>) -> Vec<Stage<'a>> {
    if let Some((p, by)) = named(&inputs) {
        let p = p.to_path_buf();
        return vec![Stage::new(by, move || named_places(&p))];
    }
    let Inputs { exe, lib_dirs, python_package, .. } = inputs;
    let exe_dir = exe.as_deref().and_then(Path::parent).map(Path::to_path_buf);
    let checkout = exe.as_deref().and_then(|e| libsearch::above(e, ".ort"));
    let mut stages = Vec::new();
    if let Some(dir) = exe_dir {
        stages.push(Stage::new("beside the binary", move || {
            let mut list = libsearch::libs_in(&dir, LIB_NAME);
            // `<prefix>/bin/tritonrs` beside `<prefix>/lib/`.
            if let Some(prefix) = dir.parent() {
                list.extend(libsearch::libs_in(&prefix.join("lib"), LIB_NAME));
            }
            list
        }));
    }
    stages.push(Stage::new("a usual library folder", move || {
        lib_dirs.iter().flat_map(|d| libsearch::libs_in(d, LIB_NAME)).collect()
    }));
    stages.push(Stage::new("the onnxruntime package of python3 on the PATH", move || {
        python_package().map(|pkg| libsearch::libs_in(&pkg.join("capi"), LIB_NAME)).unwrap_or_default()
    }));
    if let Some(dir) = checkout {
        stages.push(Stage::new(format!("the checkout's {}, which scripts/env.sh fills", dir.display()), move || {
            libsearch::libs_in(&dir, LIB_NAME)
        }));
    }
    stages
}

/// What to do when the library is found nowhere: the pinned wheel for `python3`, or a path.
pub fn how_to_install() -> String {
    let pip = match libsearch::pinned_version("onnxruntime") {
        Some(v) => format!("pip install onnxruntime=={v}"),
        None => "pip install onnxruntime".to_string(),
    };
    format!(
        "install it (`{pip}` for the python3 on the PATH, or ONNX Runtime's release archive into /usr/local/lib) \
         or set ORT_DYLIB_PATH (or {SETTING}=PATH) to its {LIB_NAME}"
    )
}

/// The reason of every ONNX model when nothing loaded: what was tried (a named place in full, a search
/// in short: the log lists it) and what to do.
pub fn reason(named: Option<&str>, tried: &[String]) -> String {
    let where_ = match (named, tried) {
        (Some(by), [one]) => format!("from {one}, which {by} names"),
        (Some(by), _) => format!("from the folder {by} names: {}", tried.join("; ")),
        (None, _) => format!("from any of {} places (the server's log lists them)", tried.len()),
    };
    format!("the ONNX Runtime library ({LIB_NAME}) could not be loaded {where_}; {}", how_to_install())
}

#[cfg(test)]
mod tests;
