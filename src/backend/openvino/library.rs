//! Finding and loading OpenVINO's C library (`libopenvino_c.so`) at run time, once per process.
//!
//! The places, in order (see [`crate::backend::libsearch`]): `--backend-config=openvino,library=PATH`
//! on the command line, then `TRITONRS_OPENVINO_LIB`, then that setting in the configuration file
//! (each a file or a folder; the first one set is the only place tried, as for ONNX Runtime's
//! `library=` and `ORT_DYLIB_PATH`); else `INTEL_OPENVINO_DIR` / `OPENVINO_INSTALL_DIR` (an OpenVINO
//! archive or `setupvars.sh`), `LD_LIBRARY_PATH` and the usual install folders, then the `openvino`
//! Python package of the `python3` on the PATH, whose `libs/` folder holds the libraries with a
//! version suffix (`libopenvino_c.so.2641`), so `pip install openvino` alone is enough. That `python3` gets
//! [`libsearch::PYTHON_TIMEOUT`] to answer, so a hanging one cannot stall model loading.
//!
//! A candidate is opened here first and checked (every function `ffi` calls is present, and the
//! version is 2025.1 or newer, whose element-type numbering openvino-sys's bindings use) before
//! openvino-sys is pointed at it: openvino-sys panics on a missing function and keeps the first
//! library it loads for the whole process.
#![allow(unsafe_code)]

use crate::backend::libsearch::{self, Stage};
use crate::model_api::BackendConfig;
use openvino_sys::{ov_status_e, ov_version_t};
use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The C library's file name, without a version suffix.
const LIB_NAME: &str = "libopenvino_c.so";

/// What to do to get OpenVINO, for the reasons of models that cannot load without it: the version
/// the tests run with.
pub fn how_to_install() -> String {
    let pip = match libsearch::pinned_version("openvino") {
        Some(v) => format!("pip install openvino=={v}"),
        None => "pip install openvino".to_string(),
    };
    format!(
        "install OpenVINO (`{pip}` for the python3 on the PATH, or an OpenVINO archive with INTEL_OPENVINO_DIR \
         set) or set --backend-config=openvino,library=PATH or TRITONRS_OPENVINO_LIB to its libopenvino_c.so or \
         the folder holding it"
    )
}

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

/// `--backend-config=openvino,library=PATH`, made absolute, and whether the configuration file gave
/// it: set by [`configure`] when the server is assembled, before anything loads the library (which
/// happens once per process).
static CONFIGURED: OnceLock<Option<(PathBuf, bool)>> = OnceLock::new();

/// The setting's name in messages.
const CONFIG_FLAG: &str = "--backend-config=openvino,library";

/// Records where `--backend-config=openvino,library=PATH` says the library is. Called with the
/// server's settings wherever the backend or its completer is made; the first call of the process
/// decides (the library itself is loaded once per process).
pub fn configure(config: &BackendConfig) {
    let path = config
        .get(super::NAME, "library")
        .filter(|v| !v.trim().is_empty())
        .map(|v| (libsearch::absolute(PathBuf::from(v.trim())), config.from_config_file));
    if CONFIGURED.set(path.clone()).is_err() && CONFIGURED.get() != Some(&path) {
        tracing::warn!(
            "{CONFIG_FLAG} was already set for this process; {} is not used.",
            path.map_or_else(|| "no setting".to_string(), |(p, _)| format!("'{}'", p.display()))
        );
    }
}

/// Loads OpenVINO the first time it is asked for; later calls give the same answer. The `Err` is a
/// model's reason: what was tried (in short) and how to install OpenVINO.
pub fn load() -> Result<&'static Loaded, String> {
    LOADED.get_or_init(find_and_load).as_ref().map_err(Clone::clone)
}

/// The library named by the user, and by what: the command line's setting, then the environment
/// variable, then the configuration file's setting (the order of every setting).
fn explicit() -> Option<(PathBuf, &'static str)> {
    let configured = CONFIGURED.get().cloned().flatten();
    if let Some((p, false)) = &configured {
        return Some((p.clone(), CONFIG_FLAG));
    }
    if let Some(env) = std::env::var_os("TRITONRS_OPENVINO_LIB").filter(|v| !v.is_empty()) {
        return Some((PathBuf::from(env), "TRITONRS_OPENVINO_LIB"));
    }
    configured.map(|(p, _)| (p, "backend-config=openvino,library in the configuration file"))
}

fn find_and_load() -> Result<Loaded, String> {
    let explicit = explicit();
    let stages = match &explicit {
        Some((p, by)) => {
            let p = p.clone();
            vec![Stage::new(*by, move || if p.is_dir() { libsearch::libs_in(&p, LIB_NAME) } else { vec![p] })]
        }
        None => stages(),
    };
    let load = |path: &Path| {
        let version = check(path)?;
        openvino_sys::load_from(path.to_path_buf()).map(|()| version).map_err(|e| e.to_string())
    };
    let mut tried = match libsearch::first_loadable(stages, load) {
        Ok(found) => {
            tracing::info!("OpenVINO {} is loaded from '{}' ({}).", found.value, found.path.display(), found.origin);
            return Ok(Loaded { path: found.path, version: found.value });
        }
        Err(tried) => tried,
    };
    if tried.is_empty() {
        tried.push("no libopenvino_c.so in any of the usual places".into());
    }
    tracing::warn!(
        "OpenVINO's C library ({LIB_NAME}) could not be loaded, so OpenVINO models cannot be served. Tried: {}",
        tried.join("; ")
    );
    let where_ = match (&explicit, tried.as_slice()) {
        (Some((p, by)), [one]) if !p.is_dir() => format!("from {one} ({by})"),
        (Some((p, by)), _) => format!("from {by}='{}': {}", p.display(), tried.join("; ")),
        (None, [one]) => format!("({one})"),
        (None, _) => format!("from any of {} places (the server's log lists them)", tried.len()),
    };
    Err(format!("OpenVINO's C library ({LIB_NAME}) could not be loaded {where_}; {}", how_to_install()))
}

/// The stages of the search when no place is named, in order; `python3` is asked only when the
/// folders before it hold no library that loads.
fn stages() -> Vec<Stage<'static>> {
    let mut installs: Vec<PathBuf> = Vec::new();
    for var in ["INTEL_OPENVINO_DIR", "OPENVINO_INSTALL_DIR"] {
        if let Some(root) = std::env::var_os(var).filter(|v| !v.is_empty()).map(PathBuf::from) {
            installs.extend(install_lib_dirs(&root));
        }
    }
    let in_dirs = |dirs: Vec<PathBuf>| dirs.iter().flat_map(|d| libsearch::libs_in(d, LIB_NAME)).collect();
    let mut stages = vec![Stage::new("INTEL_OPENVINO_DIR", move || in_dirs(installs))];
    stages.push(Stage::new("LD_LIBRARY_PATH", move || {
        let paths = std::env::var_os("LD_LIBRARY_PATH").unwrap_or_default();
        in_dirs(std::env::split_paths(&paths).filter(|p| !p.as_os_str().is_empty()).collect())
    }));
    stages.push(Stage::new("a usual library folder", move || in_dirs(libsearch::usual_lib_dirs())));
    stages.push(Stage::new("an OpenVINO archive in /opt/intel", move || in_dirs(intel_archives())));
    stages.push(Stage::new("the openvino package of python3 on the PATH", move || {
        libsearch::python_package_dir("openvino")
            .map(|pkg| libsearch::libs_in(&pkg.join("libs"), LIB_NAME))
            .unwrap_or_default()
    }));
    stages
}

/// The library folders of Intel's archives, which unpack as /opt/intel/openvino_<version>, often with
/// an `openvino` link; the newest name first.
fn intel_archives() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/opt/intel") else { return Vec::new() };
    let mut roots: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("openvino"))
        .map(|e| e.path())
        .collect();
    roots.sort();
    roots.reverse();
    roots.iter().flat_map(|r| install_lib_dirs(r)).collect()
}

/// Where an OpenVINO archive's root keeps its libraries.
fn install_lib_dirs(root: &Path) -> Vec<PathBuf> {
    ["runtime/lib/intel64", "runtime/lib/aarch64", "runtime/lib/arm64", "lib", "."]
        .iter()
        .map(|sub| root.join(sub))
        .filter(|d| d.is_dir())
        .collect()
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
}
