use super::*;

const GIB: u64 = 1 << 30;

#[test]
fn a_load_is_refused_only_above_the_limit_of_its_device() {
    let limits = parse_gpu_limits(&["0:0.5".into()]).unwrap();
    let reading = |used| Some(MemoryReading { used, total: 4 * GIB });
    check(&limits, 0, reading(GIB)).unwrap();
    check(&limits, 0, reading(2 * GIB)).unwrap();
    let e = check(&limits, 0, reading(3 * GIB)).unwrap_err();
    assert!(e.message.contains("GPU 0 has 75.0%") && e.message.contains("50.0%"), "{}", e.message);
    // Another device has no limit; a device whose memory cannot be read is not limited.
    check(&limits, 1, reading(4 * GIB)).unwrap();
    check(&limits, 0, None).unwrap();
}

#[test]
fn limits_parse_as_tritonserver_writes_them() {
    assert_eq!(parse_gpu_limits(&["1:0.25".into()]).unwrap()[&1], 0.25);
    for bad in ["0", "x:0.5", "0:1.5", "-1:0.5", "0:abc"] {
        assert!(parse_gpu_limits(&[bad.into()]).is_err(), "{bad}");
    }
}

#[test]
fn meminfo_gives_used_as_total_less_available() {
    let r = meminfo("MemTotal:        4000 kB\nMemFree:  100 kB\nMemAvailable:    1000 kB\n").unwrap();
    assert_eq!(r, MemoryReading { used: 3000 << 10, total: 4000 << 10 });
}
