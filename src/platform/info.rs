//! What the device is, as far as files tell without loading any library: the L4T (JetPack) release,
//! the CUDA toolkit version and the TensorRT libraries present. For the MQTT state topic and logs.

use serde_json::{json, Value};
use std::path::Path;

/// The L4T release from `/etc/nv_tegra_release` ("# R32 (release), REVISION: 7.1, ..." → "32.7.1").
pub fn l4t_release(text: &str) -> Option<String> {
    let line = text.lines().next()?;
    let major = line.split_whitespace().find_map(|w| w.strip_prefix('R'))?.trim_end_matches(',');
    let rev = line.split("REVISION:").nth(1)?.split(',').next()?.trim();
    (!major.is_empty() && major.chars().all(|c| c.is_ascii_digit())).then(|| format!("{major}.{rev}"))
}

/// The CUDA version from the toolkit's `version.json` (CUDA 11+) or `version.txt` (CUDA 10).
pub fn cuda_version(json_text: Option<&str>, txt: Option<&str>) -> Option<String> {
    if let Some(v) = json_text.and_then(|t| serde_json::from_str::<Value>(t).ok()) {
        if let Some(s) = v.pointer("/cuda/version").and_then(Value::as_str) {
            return Some(s.to_string());
        }
    }
    txt?.split("CUDA Version").nth(1).map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// The TensorRT version from a `libnvinfer.so.X.Y.Z` file name.
pub fn tensorrt_version<'a>(names: impl IntoIterator<Item = &'a str>) -> Option<String> {
    names
        .into_iter()
        .filter_map(|n| n.strip_prefix("libnvinfer.so."))
        .filter(|v| v.split('.').count() >= 3 && v.split('.').all(|p| p.chars().all(|c| c.is_ascii_digit())))
        .max_by_key(|v| v.split('.').map(|p| p.parse::<u32>().unwrap_or(0)).collect::<Vec<_>>())
        .map(str::to_string)
}

fn read(p: &str) -> Option<String> {
    std::fs::read_to_string(p).ok()
}

/// The platform as JSON: OS, architecture, and L4T / CUDA / TensorRT where found.
pub fn describe() -> Value {
    let mut libs = Vec::new();
    for dir in ["/usr/lib/aarch64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/usr/local/tensorrt/lib"] {
        if let Ok(rd) = std::fs::read_dir(Path::new(dir)) {
            libs.extend(rd.flatten().filter_map(|e| e.file_name().into_string().ok()));
        }
    }
    json!({
        "os": std::env::consts::OS,
        "arch": std::env::consts::ARCH,
        "l4t": read("/etc/nv_tegra_release").as_deref().and_then(l4t_release),
        "cuda": cuda_version(read("/usr/local/cuda/version.json").as_deref(), read("/usr/local/cuda/version.txt").as_deref()),
        "tensorrt": tensorrt_version(libs.iter().map(String::as_str)),
    })
}

#[cfg(test)]
mod tests;
