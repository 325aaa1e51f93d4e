//! Unit tests of `platform/info.rs`.

use super::*;

#[test]
fn versions_are_read_from_their_files() {
    let tegra = "# R32 (release), REVISION: 7.1, GCID: 29818004, BOARD: t210ref, EABI: aarch64\n";
    assert_eq!(l4t_release(tegra).as_deref(), Some("32.7.1"));
    assert_eq!(l4t_release("# R36 (release), REVISION: 4.0, GCID: 1").as_deref(), Some("36.4.0"));
    assert_eq!(l4t_release("garbage"), None);
    assert_eq!(
        cuda_version(Some(r#"{"cuda": {"name": "CUDA SDK", "version": "12.6.68"}}"#), None).as_deref(),
        Some("12.6.68")
    );
    assert_eq!(cuda_version(None, Some("CUDA Version 10.2.300\n")).as_deref(), Some("10.2.300"));
    assert_eq!(cuda_version(Some("{}"), None), None);
    let libs = ["libnvinfer.so", "libnvinfer.so.8", "libnvinfer.so.8.2.1", "libnvinfer.so.8.10.0", "libfoo.so.1.2.3"];
    assert_eq!(tensorrt_version(libs).as_deref(), Some("8.10.0"));
    assert_eq!(tensorrt_version(["libnvinfer.so.10"]), None);
}
