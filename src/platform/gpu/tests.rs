//! Unit tests of `platform/gpu.rs`.

use super::*;

/// NVML that reports fixed readings.
struct FakeNvml(Vec<NvmlReading>);

impl NvmlSource for FakeNvml {
    fn read(&mut self) -> Vec<NvmlReading> {
        self.0.clone()
    }
}

fn orin() -> Jetson {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/jetson/orin-jp6");
    Jetson::detect(&root).expect("the Orin fixture is a Jetson")
}

#[test]
fn a_gpu_that_nvml_and_sysfs_both_report_is_one_series() {
    let nvml = |uuid: &str| NvmlReading { uuid: uuid.into(), utilization: Some(0.75), ..Default::default() };
    // JetPack 7 (Thor): NVML and sysfs describe the same integrated GPU.
    let mut sources =
        Sources { nvml: Some(Box::new(FakeNvml(vec![nvml("GPU-thor")]))), jetson: Some(("GPU-thor".into(), orin())) };
    let mut out = String::new();
    render(&mut out, &sources.read());
    let series: Vec<&str> = out.lines().filter(|l| l.starts_with("nv_gpu_utilization{")).collect();
    assert_eq!(series, vec!["nv_gpu_utilization{gpu_uuid=\"GPU-thor\"} 0.75"], "{out}");
    // The board's other readings stay.
    assert!(out.contains("tritonrs_jetson_gpu_frequency_hertz{gpu_uuid=\"GPU-thor\"} 306000000"), "{out}");
    assert!(out.contains("tritonrs_jetson_nvpmodel_mode{id=\"2\",name=\"15W\"} 1"), "{out}");

    // A discrete GPU beside a Jetson's own: one series each.
    sources.nvml = Some(Box::new(FakeNvml(vec![nvml("GPU-dgpu")])));
    let mut out = String::new();
    render(&mut out, &sources.read());
    let series: Vec<&str> = out.lines().filter(|l| l.starts_with("nv_gpu_utilization{")).collect();
    assert_eq!(
        series,
        vec!["nv_gpu_utilization{gpu_uuid=\"GPU-dgpu\"} 0.75", "nv_gpu_utilization{gpu_uuid=\"GPU-thor\"} 0"],
        "{out}"
    );
}

#[test]
fn renders_nvml_and_jetson_readings() {
    let r = GpuReadings {
        nvml: vec![NvmlReading {
            uuid: "GPU-1".into(),
            utilization: Some(0.5),
            memory_total_bytes: Some(1024),
            memory_used_bytes: Some(512),
            power_watts: Some(70.5),
            power_limit_watts: Some(300.0),
            energy_joules: Some(12.0),
        }],
        jetson: Some((
            "jetson-57000000.gpu".into(),
            JetsonReading {
                gpu: Some("57000000.gpu".into()),
                gpu_load: Some(0.25),
                gpu_frequency_hz: Some(921600000),
                temperatures: vec![("GPU-therm".into(), 30.5)],
                rails: vec![("POM_5V_IN".into(), 3.8)],
                power_mode: Some((0, "MAXN".into())),
            },
        )),
    };
    let mut out = String::new();
    render(&mut out, &r);
    for line in [
        "# TYPE nv_gpu_utilization gauge",
        "nv_gpu_utilization{gpu_uuid=\"GPU-1\"} 0.5",
        "nv_gpu_utilization{gpu_uuid=\"jetson-57000000.gpu\"} 0.25",
        "nv_gpu_memory_total_bytes{gpu_uuid=\"GPU-1\"} 1024",
        "nv_gpu_memory_used_bytes{gpu_uuid=\"GPU-1\"} 512",
        "nv_gpu_power_usage{gpu_uuid=\"GPU-1\"} 70.5",
        "nv_gpu_power_limit{gpu_uuid=\"GPU-1\"} 300",
        "# TYPE nv_energy_consumption counter",
        "nv_energy_consumption{gpu_uuid=\"GPU-1\"} 12",
        "tritonrs_jetson_gpu_frequency_hertz{gpu_uuid=\"jetson-57000000.gpu\"} 921600000",
        "tritonrs_jetson_temperature_celsius{zone=\"GPU-therm\"} 30.5",
        "tritonrs_jetson_power_watts{rail=\"POM_5V_IN\"} 3.8",
        "tritonrs_jetson_nvpmodel_mode{id=\"0\",name=\"MAXN\"} 1",
    ] {
        assert!(out.lines().any(|l| l == line), "missing {line}:\n{out}");
    }
    let mut empty = String::new();
    render(&mut empty, &GpuReadings::default());
    assert!(empty.is_empty());
}
