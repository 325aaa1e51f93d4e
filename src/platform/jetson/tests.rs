//! Unit tests of `platform/jetson.rs`.

use super::*;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/jetson").join(name)
}

#[test]
fn nano_jetpack_4_6() {
    let j = Jetson::detect(&fixture("nano-jp46")).expect("a Jetson");
    let r = j.read();
    assert_eq!(r.gpu.as_deref(), Some("57000000.gpu"));
    assert_eq!(r.gpu_load, Some(0.427));
    assert_eq!(r.gpu_frequency_hz, Some(921_600_000));
    assert_eq!(
        r.temperatures,
        vec![("AO-therm".to_string(), 38.5), ("CPU-therm".to_string(), 31.5), ("GPU-therm".to_string(), 30.0)]
    );
    assert_eq!(
        r.rails,
        vec![("POM_5V_IN".to_string(), 3.812), ("POM_5V_GPU".to_string(), 1.244), ("POM_5V_CPU".to_string(), 0.826)]
    );
    assert_eq!(r.power_mode, Some((0, "MAXN".to_string())));
}

#[test]
fn xavier_jetpack_5() {
    let r = Jetson::detect(&fixture("xavier-jp5")).expect("a Jetson").read();
    assert_eq!(r.gpu.as_deref(), Some("17000000.gv11b"));
    assert_eq!(r.gpu_load, Some(0.995));
    assert_eq!(r.gpu_frequency_hz, Some(1_109_250_000));
    assert_eq!(r.temperatures, vec![("GPU-therm".to_string(), 41.5), ("CPU-therm".to_string(), 43.0)]);
    // 5.12 V × 0.960 A, 5.12 V × 0.240 A; the "sum" channel is left out.
    assert_eq!(r.rails.len(), 2);
    assert_eq!(r.rails[0].0, "VDD_IN");
    assert!((r.rails[0].1 - 4.9152).abs() < 1e-9, "{:?}", r.rails);
    assert_eq!(r.rails[1].0, "VDD_CPU_GPU_CV");
    assert!((r.rails[1].1 - 1.2288).abs() < 1e-9, "{:?}", r.rails);
    assert_eq!(r.power_mode, Some((8, "MODE_20W_6CORE".to_string())));
}

#[test]
fn orin_jetpack_6() {
    let r = Jetson::detect(&fixture("orin-jp6")).expect("a Jetson").read();
    assert_eq!(r.gpu.as_deref(), Some("17000000.gpu"));
    assert_eq!(r.gpu_load, Some(0.0));
    assert_eq!(r.gpu_frequency_hz, Some(306_000_000));
    assert_eq!(r.temperatures, vec![("cpu-thermal".to_string(), 46.75), ("gpu-thermal".to_string(), 45.5)]);
    let names: Vec<&str> = r.rails.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"]);
    assert!((r.rails[0].1 - 5.056 * 1.328).abs() < 1e-9, "{:?}", r.rails);
    assert_eq!(r.power_mode, Some((2, "15W".to_string())));
}

#[test]
fn a_machine_that_is_not_a_jetson() {
    let dir = tempfile::tempdir().unwrap();
    assert!(Jetson::detect(dir.path()).is_none());
    // An incomplete tree reads as nothing rather than failing.
    std::fs::create_dir_all(dir.path().join("etc")).unwrap();
    std::fs::write(dir.path().join("etc/nv_tegra_release"), "# R32 (release)").unwrap();
    assert_eq!(Jetson::detect(dir.path()).unwrap().read(), JetsonReading::default());
}
