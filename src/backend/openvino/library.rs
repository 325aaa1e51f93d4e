//! Finding and loading OpenVINO's C library (`libopenvino_c.so`) at run time, once per process.
//!
//! The places, in order: `TRITONRS_OPENVINO_LIB` (a file or a folder; when set, nothing else is
//! tried, as with `ORT_DYLIB_PATH`), `INTEL_OPENVINO_DIR` / `OPENVINO_INSTALL_DIR` (an OpenVINO
//! archive or `setupvars.sh`), `LD_LIBRARY_PATH` and the usual install folders, then the `openvino`
//! Python package of the `python3` on the PATH, whose `libs/` folder holds the libraries with a
//! version suffix (`libopenvino_c.so.2641`), so `pip install openvino` alone is enough.
//!
//! A candidate is opened here first and checked (every function `ffi` calls is present, and the
//! version is 2025.1 or newer, whose element-type numbering openvino-sys's bindings use) before
//! openvino-sys is pointed at it: openvino-sys panics on a missing function and keeps the first
//! library it loads for the whole process.
#![allow(unsafe_code)]

use openvino_sys::{ov_status_e, ov_version_t};
use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The C library's file name, without a version suffix.
const LIB_NAME: &str = "libopenvino_c.so";

/// What to do to get OpenVINO, for the reasons of models that cannot load without it.
pub const HOW_TO_INSTALL: &str = "install OpenVINO (`pip install openvino` for the python3 on the PATH, or an \
    OpenVINO archive with INTEL_OPENVINO_DIR set) or set TRITONRS_OPENVINO_LIB to its libopenvino_c.so or the \
    folder holding it";

/// Folders OpenVINO's packages and archives install into (besides `/opt/intel/openvino*`).
const USUAL_DIRS: &[&str] = &[
    "/usr/local/lib",
    "/usr/lib",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/local/lib64",
    "/usr/lib64",
];

/// Every function of the C API that this backend calls (`ffi`, `check`). A library lacking one is
/// not used: openvino-sys panics when a missing function is called.
const REQUIRED: &[&str] = &[
    "ov_get_openvino_version",
    "ov_version_free",
    "ov_get_last_err_msg",
    "ov_free",
    "ov_core_create",
    "ov_core_free",
    "ov_core_read_model",
    "ov_core_compile_model",
    "ov_core_set_property",
    "ov_core_add_extension",
    "ov_core_get_available_devices",
    "ov_available_devices_free",
    "ov_model_free",
    "ov_model_inputs_size",
    "ov_model_outputs_size",
    "ov_model_const_input_by_index",
    "ov_model_const_output_by_index",
    "ov_model_reshape",
    "ov_output_const_port_free",
    "ov_port_get_any_name",
    "ov_port_get_element_type",
    "ov_port_get_partial_shape",
    "ov_partial_shape_create",
    "ov_partial_shape_free",
    "ov_compiled_model_free",
    "ov_compiled_model_get_property",
    "ov_compiled_model_create_infer_request",
    "ov_infer_request_free",
    "ov_infer_request_set_tensor",
    "ov_infer_request_get_tensor",
    "ov_infer_request_infer",
    "ov_shape_create",
    "ov_shape_free",
    "ov_tensor_create",
    "ov_tensor_create_from_host_ptr",
    "ov_tensor_free",
    "ov_tensor_data",
    "ov_tensor_get_shape",
    "ov_tensor_get_element_type",
    "ov_tensor_get_byte_size",
];

/// The library that serves OpenVINO models in this process.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub path: PathBuf,
    /// OpenVINO's build number, such as `2026.4.1-22982-...`.
    pub version: String,
}

static LOADED: OnceLock<Result<Loaded, String>> = OnceLock::new();

/// Loads OpenVINO the first time it is asked for; later calls give the same answer. The `Err` is a
/// model's reason: what was tried (in short) and how to install OpenVINO.
pub fn load() -> Result<&'static Loaded, String> {
    LOADED.get_or_init(find_and_load).as_ref().map_err(Clone::clone)
}

fn find_and_load() -> Result<Loaded, String> {
    let explicit = std::env::var_os("TRITONRS_OPENVINO_LIB").filter(|v| !v.is_empty()).map(PathBuf::from);
    let list = match &explicit {
        Some(p) if p.is_dir() => libs_in(p),
        Some(p) => vec![p.clone()],
        None => candidates(),
    };
    let mut tried = Vec::new();
    for path in list {
        if !path.exists() {
            tried.push(format!("{} (not found)", path.display()));
            continue;
        }
        match check(&path) {
            Ok(version) => match openvino_sys::load_from(path.clone()) {
                Ok(()) => {
                    tracing::info!("OpenVINO {version} is loaded from '{}'.", path.display());
                    return Ok(Loaded { path, version });
                }
                Err(e) => tried.push(format!("{} ({e})", path.display())),
            },
            Err(e) => tried.push(format!("{} ({e})", path.display())),
        }
    }
    if tried.is_empty() {
        tried.push("no libopenvino_c.so in any of the usual places".into());
    }
    tracing::warn!(
        "OpenVINO's C library ({LIB_NAME}) could not be loaded, so OpenVINO models cannot be served. Tried: {}",
        tried.join("; ")
    );
    let where_ = match (&explicit, tried.as_slice()) {
        (Some(p), [one]) if !p.is_dir() => format!("from {one} (TRITONRS_OPENVINO_LIB)"),
        (Some(p), _) => format!("from TRITONRS_OPENVINO_LIB='{}': {}", p.display(), tried.join("; ")),
        (None, [one]) => format!("({one})"),
        (None, _) => format!("from any of {} places (the server's log lists them)", tried.len()),
    };
    Err(format!("OpenVINO's C library ({LIB_NAME}) could not be loaded {where_}; {HOW_TO_INSTALL}"))
}

/// The places to look when `TRITONRS_OPENVINO_LIB` is not set, in order.
fn candidates() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for var in ["INTEL_OPENVINO_DIR", "OPENVINO_INSTALL_DIR"] {
        if let Some(root) = std::env::var_os(var).filter(|v| !v.is_empty()).map(PathBuf::from) {
            dirs.extend(install_lib_dirs(&root));
        }
    }
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&paths).filter(|p| !p.as_os_str().is_empty()));
    }
    dirs.extend(USUAL_DIRS.iter().map(PathBuf::from));
    // Intel's archives unpack as /opt/intel/openvino_<version>, often with an `openvino` link.
    if let Ok(entries) = std::fs::read_dir("/opt/intel") {
        let mut roots: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("openvino"))
            .map(|e| e.path())
            .collect();
        roots.sort();
        roots.reverse();
        for root in roots {
            dirs.extend(install_lib_dirs(&root));
        }
    }
    dirs.extend(python_package_libs());
    let mut list = Vec::new();
    for d in dirs {
        for p in libs_in(&d) {
            if !list.contains(&p) {
                list.push(p);
            }
        }
    }
    list
}

/// Where an OpenVINO archive's root keeps its libraries.
fn install_lib_dirs(root: &Path) -> Vec<PathBuf> {
    ["runtime/lib/intel64", "runtime/lib/aarch64", "runtime/lib/arm64", "lib", "."]
        .iter()
        .map(|sub| root.join(sub))
        .filter(|d| d.is_dir())
        .collect()
}

/// The `libs/` folder of the `openvino` package that `python3` on the PATH imports, if any. The
/// package is located without importing it (importing loads the whole runtime).
fn python_package_libs() -> Option<PathBuf> {
    let script = "import importlib.util as u\ns = u.find_spec('openvino')\n\
                  print(s.submodule_search_locations[0] if s and s.submodule_search_locations else '')";
    let out = Command::new("python3").args(["-c", script]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let dir = String::from_utf8(out.stdout).ok()?.trim().to_string();
    let libs = PathBuf::from(dir).join("libs");
    libs.is_dir().then_some(libs)
}

/// `libopenvino_c.so` in `dir`, then its versioned files there (`libopenvino_c.so.2641`, as the
/// wheel ships them; `libopenvino_c.so.2026.4.1`), newest first.
fn libs_in(dir: &Path) -> Vec<PathBuf> {
    let mut list = vec![dir.join(LIB_NAME)];
    let Ok(entries) = std::fs::read_dir(dir) else { return list };
    let mut versioned: Vec<(Vec<u64>, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let version = name.strip_prefix(LIB_NAME)?.strip_prefix('.')?;
            let parts: Vec<u64> = version.split('.').map(|n| n.parse().ok()).collect::<Option<_>>()?;
            Some((parts, e.path()))
        })
        .collect();
    versioned.sort_by(|a, b| b.0.cmp(&a.0));
    list.extend(versioned.into_iter().map(|(_, p)| p));
    list
}

/// Opens `path` on its own and checks it is a usable OpenVINO C library; its version on success.
fn check(path: &Path) -> Result<String, String> {
    // SAFETY: dlopen runs the library's initializers. The file was named as OpenVINO's C library by
    // the user or found under that name in OpenVINO's install folders; it is closed again when this
    // function returns (the crate opens it again, which the loader counts).
    let lib = unsafe { libloading::Library::new(path) }.map_err(|e| match std::error::Error::source(&e) {
        Some(why) => format!("{e}: {why}"),
        None => e.to_string(),
    })?;
    let missing: Vec<&str> = REQUIRED
        .iter()
        .copied()
        // SAFETY: the symbol is only looked up, as an untyped address, and never called or read here.
        .filter(|name| unsafe { lib.get::<*const std::ffi::c_void>(name.as_bytes()) }.is_err())
        .collect();
    if !missing.is_empty() {
        return Err(format!("not OpenVINO's C library: it lacks {}", missing.join(", ")));
    }
    // SAFETY: `ov_get_openvino_version` is present (checked above) and has this signature in every
    // OpenVINO 2.0 C API (`ov_status_e ov_get_openvino_version(ov_version_t*)`), as does
    // `ov_version_free(ov_version_t*)`.
    let (get, free) = unsafe {
        let get = lib
            .get::<unsafe extern "C" fn(*mut ov_version_t) -> ov_status_e>(b"ov_get_openvino_version")
            .map_err(|e| e.to_string())?;
        let free = lib.get::<unsafe extern "C" fn(*mut ov_version_t)>(b"ov_version_free").map_err(|e| e.to_string())?;
        (get, free)
    };
    let mut v = ov_version_t { buildNumber: std::ptr::null(), description: std::ptr::null() };
    // SAFETY: `v` is a valid, writable ov_version_t; on success OpenVINO fills it with strings it owns
    // until `ov_version_free`, which is called once after the build number is copied out.
    let version = unsafe {
        if get(&mut v) != ov_status_e::OK || v.buildNumber.is_null() {
            return Err("it does not report its version".into());
        }
        let s = CStr::from_ptr(v.buildNumber).to_string_lossy().into_owned();
        free(&mut v);
        s
    };
    match year_minor(&version) {
        Some((y, m)) if (y, m) >= (2025, 1) => Ok(version),
        Some(_) => Err(format!("OpenVINO {version} is too old; 2025.1 or newer is needed")),
        None => Err(format!("its version '{version}' is not of the form <year>.<release>")),
    }
}

/// `2026.4.1-22982-abc` -> (2026, 4).
fn year_minor(version: &str) -> Option<(usize, usize)> {
    let mut parts = version.split(['.', '-']);
    let year = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((year, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_as_year_and_release() {
        assert_eq!(year_minor("2026.4.1-22982-7a5c2b3e9f1-releases/2026/4"), Some((2026, 4)));
        assert_eq!(year_minor("2025.1.0"), Some((2025, 1)));
        assert_eq!(year_minor("custom_master"), None);
        assert_eq!(year_minor("2024"), None);
    }

    #[test]
    fn versioned_files_follow_the_plain_name_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        for f in ["libopenvino_c.so.2540", "libopenvino_c.so.2641", "libopenvino_c.so.x", "libopenvino.so.2641"] {
            std::fs::write(dir.path().join(f), b"").unwrap();
        }
        let names: Vec<String> =
            libs_in(dir.path()).iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(names, ["libopenvino_c.so", "libopenvino_c.so.2641", "libopenvino_c.so.2540"]);
    }
}
