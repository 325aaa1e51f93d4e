//! Unit tests of `model_api/mod.rs`.

use super::*;

#[test]
fn backend_config_parses_both_forms() {
    let cfg =
        BackendConfig::parse(&["onnxruntime,library=/opt/ort.so".into(), "default-max-batch-size=8".into()]).unwrap();
    assert_eq!(cfg.get("onnxruntime", "library"), Some("/opt/ort.so"));
    assert_eq!(cfg.get("onnxruntime", "default-max-batch-size"), Some("8"));
    assert_eq!(cfg.get("python", "library"), None);
    assert!(BackendConfig::parse(&["onnxruntime,library".into()]).is_err());
}

#[test]
fn memory_reports_replace_their_reporters_last_and_sum_across_reporters() {
    use super::{MemoryKind, MemoryUsage};
    let m = MemoryUsage::default();
    m.set(1, &[(MemoryKind::Gpu, 0, 100), (MemoryKind::Gpu, 0, 50), (MemoryKind::Cpu, 0, 7)]);
    m.set(2, &[(MemoryKind::Gpu, 0, 10)]);
    m.set(2, &[(MemoryKind::Gpu, 0, 20)]);
    assert_eq!(m.entries(), vec![(MemoryKind::Cpu, 0, 7), (MemoryKind::Gpu, 0, 170)]);
    m.set(1, &[]);
    assert_eq!(m.entries(), vec![(MemoryKind::Gpu, 0, 20)]);
    assert_eq!(MemoryKind::CpuPinned.as_str(), "CPU_PINNED");
}
