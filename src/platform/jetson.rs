//! Jetson readings from sysfs (there is no NVML on Jetson before JetPack 7), found by discovery under a
//! root folder rather than at fixed paths, so one reader serves the Nano (JetPack 4.6), Xavier
//! (JetPack 5) and Orin (JetPack 6), and tests read fixture trees shaped like them:
//!
//! - GPU load and frequency: the `/sys/class/devfreq/*` entry whose name is the GPU's (`gpu`, `gp10b`,
//!   `gv11b`, `ga10b`, ...): `cur_freq` in Hz, and `load` (per mille) in the GPU device's folder;
//! - temperatures: `/sys/devices/virtual/thermal/thermal_zone*/{type,temp}` (millidegrees Celsius);
//! - power rails of the INA3221 monitors under `/sys/bus/i2c/devices/*`: `iio:device*/rail_name_<n>`
//!   with `in_power<n>_input` in mW (JetPack 4), or `hwmon/hwmon*/in<n>_label` with `in<n>_input` (mV)
//!   times `curr<n>_input` (mA) (JetPack 5 and 6);
//! - the power mode: `/var/lib/nvpmodel/status` (`pmode:0000`, with ` fmode:<fan mode>` after it on
//!   JetPack 5.1 and 6) named by `/etc/nvpmodel.conf`.

use std::fs;
use std::path::{Path, PathBuf};

/// Names of Jetson GPUs as their devfreq entries and device folders show them.
const GPU_NAMES: &[&str] = &["gpu", "gp10b", "gv11b", "ga10b", "gb10b", "gm20b"];

/// One reading of a Jetson.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JetsonReading {
    /// The devfreq entry of the GPU (`57000000.gpu`, `17000000.ga10b`).
    pub gpu: Option<String>,
    /// GPU load in [0, 1].
    pub gpu_load: Option<f64>,
    pub gpu_frequency_hz: Option<u64>,
    /// (thermal zone type, degrees Celsius).
    pub temperatures: Vec<(String, f64)>,
    /// (rail name, watts).
    pub rails: Vec<(String, f64)>,
    /// The nvpmodel power mode: (id, name).
    pub power_mode: Option<(u32, String)>,
}

/// A Jetson's sysfs, under `root` (`/` on a device).
#[derive(Debug, Clone)]
pub struct Jetson {
    root: PathBuf,
}

fn read(p: &Path) -> Option<String> {
    fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

fn number<T: std::str::FromStr>(p: &Path) -> Option<T> {
    read(p)?.parse().ok()
}

/// Folder entries sorted by name (stable output), or nothing.
fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> =
        fs::read_dir(dir).map(|r| r.filter_map(|e| e.ok()).map(|e| e.path()).collect()).unwrap_or_default();
    v.sort();
    v
}

fn file_name(p: &Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

fn is_gpu_name(name: &str) -> bool {
    // `57000000.gpu`, `17000000.ga10b`, `gpu.0`: the part after the unit address, or before the index.
    let parts: Vec<&str> = name.split('.').collect();
    parts.iter().any(|p| GPU_NAMES.contains(p))
}

impl Jetson {
    /// The Jetson under `root`, if it is one (`/etc/nv_tegra_release`, or a Tegra device tree).
    pub fn detect(root: &Path) -> Option<Jetson> {
        let tegra_release = root.join("etc/nv_tegra_release").is_file();
        let tegra_dt = fs::read(root.join("proc/device-tree/compatible"))
            .map(|b| String::from_utf8_lossy(&b).contains("nvidia,tegra"))
            .unwrap_or(false);
        (tegra_release || tegra_dt).then(|| Jetson { root: root.to_path_buf() })
    }

    /// The root from `TRITONRS_SYSFS_ROOT` (tests point it at a fixture tree), else `/`.
    pub fn root_from_env() -> PathBuf {
        std::env::var_os("TRITONRS_SYSFS_ROOT")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| "/".into())
    }

    pub fn read(&self) -> JetsonReading {
        let mut r = JetsonReading::default();
        if let Some(devfreq) = self.gpu_devfreq() {
            r.gpu = Some(file_name(&devfreq));
            r.gpu_frequency_hz = number(&devfreq.join("cur_freq"));
            r.gpu_load = self.gpu_load(&devfreq).map(|per_mille| (per_mille / 1000.0).clamp(0.0, 1.0));
        }
        r.temperatures = self.temperatures();
        r.rails = self.rails();
        r.power_mode = self.power_mode();
        r
    }

    fn gpu_devfreq(&self) -> Option<PathBuf> {
        entries(&self.root.join("sys/class/devfreq")).into_iter().find(|e| {
            is_gpu_name(&file_name(e))
                || fs::read_link(e.join("device")).map(|l| is_gpu_name(&file_name(&l))).unwrap_or(false)
        })
    }

    /// The GPU's `load` file: in the devfreq entry's device folder, else in a GPU device folder under
    /// `/sys/devices` (one level, or under `platform/` and `platform/bus@0/`).
    fn gpu_load(&self, devfreq: &Path) -> Option<f64> {
        if let Some(v) = number(&devfreq.join("device/load")) {
            return Some(v);
        }
        let devices = self.root.join("sys/devices");
        for dir in [devices.clone(), devices.join("platform"), devices.join("platform/bus@0")] {
            for e in entries(&dir) {
                if is_gpu_name(&file_name(&e)) {
                    if let Some(v) = number(&e.join("load")) {
                        return Some(v);
                    }
                }
            }
        }
        None
    }

    fn temperatures(&self) -> Vec<(String, f64)> {
        let mut out = Vec::new();
        for z in entries(&self.root.join("sys/devices/virtual/thermal")) {
            if !file_name(&z).starts_with("thermal_zone") {
                continue;
            }
            let (Some(kind), Some(milli)) = (read(&z.join("type")), number::<i64>(&z.join("temp"))) else { continue };
            // Some zones report a sentinel (-256 °C and below) when their sensor is off.
            if milli > -100_000 {
                out.push((kind, milli as f64 / 1000.0));
            }
        }
        out
    }

    fn rails(&self) -> Vec<(String, f64)> {
        let mut out = Vec::new();
        for dev in entries(&self.root.join("sys/bus/i2c/devices")) {
            // JetPack 4: the ina3221x IIO driver names its rails and reports power in mW.
            for iio in entries(&dev).into_iter().filter(|p| file_name(p).starts_with("iio:device")) {
                for f in entries(&iio) {
                    let name = file_name(&f);
                    let Some(n) = name.strip_prefix("rail_name_") else { continue };
                    let (Some(rail), Some(mw)) = (read(&f), number::<f64>(&iio.join(format!("in_power{n}_input"))))
                    else {
                        continue;
                    };
                    out.push((rail, mw / 1000.0));
                }
            }
            // JetPack 5 and 6: the ina3221 hwmon driver labels each channel; power is volts times amps.
            for hwmon in entries(&dev.join("hwmon")) {
                for f in entries(&hwmon) {
                    let name = file_name(&f);
                    let Some(n) = name.strip_prefix("in").and_then(|s| s.strip_suffix("_label")) else { continue };
                    let Some(rail) = read(&f) else { continue };
                    if rail == "NC" || rail.to_ascii_lowercase().starts_with("sum") {
                        continue;
                    }
                    let mv = number::<f64>(&hwmon.join(format!("in{n}_input")));
                    let ma = number::<f64>(&hwmon.join(format!("curr{n}_input")));
                    if let (Some(mv), Some(ma)) = (mv, ma) {
                        out.push((rail, mv * ma / 1e6));
                    }
                }
            }
        }
        out
    }

    fn power_mode(&self) -> Option<(u32, String)> {
        let status = read(&self.root.join("var/lib/nvpmodel/status"))?;
        // `pmode:0002`, or `pmode:0002 fmode:quiet` on JetPack 5.1 and 6: the first token.
        let id: u32 = status.split_whitespace().next()?.strip_prefix("pmode:")?.parse().ok()?;
        let conf = read(&self.root.join("etc/nvpmodel.conf")).unwrap_or_default();
        let name = conf
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                let body = l.strip_prefix('<')?.strip_suffix('>')?.trim();
                let rest = body.strip_prefix("POWER_MODEL")?;
                let mut mid = None;
                let mut mname = None;
                for kv in rest.split_whitespace() {
                    if let Some(v) = kv.strip_prefix("ID=") {
                        mid = v.parse::<u32>().ok();
                    } else if let Some(v) = kv.strip_prefix("NAME=") {
                        mname = Some(v.to_string());
                    }
                }
                (mid? == id).then_some(mname).flatten()
            })
            .next()
            .unwrap_or_default();
        Some((id, name))
    }
}

#[cfg(test)]
mod tests;
