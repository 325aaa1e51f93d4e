//! Unit tests of `platform/cuda.rs`.

use super::*;

fn gpu(cc: (i32, i32), integrated: bool) -> Gpu {
    Gpu {
        index: 0,
        name: "x".into(),
        uuid: String::new(),
        compute_capability: cc,
        total_memory: 0,
        integrated,
        can_map_host_memory: true,
        unified_addressing: true,
    }
}

#[test]
fn jetsons_pick_mapped_memory_only_with_io_coherence() {
    assert_eq!(gpu((5, 3), true).pinned_strategy(), PinnedStrategy::Copy); // Nano
    assert_eq!(gpu((6, 2), true).pinned_strategy(), PinnedStrategy::Copy); // TX2
    assert_eq!(gpu((7, 2), true).pinned_strategy(), PinnedStrategy::Mapped); // Xavier
    assert_eq!(gpu((8, 7), true).pinned_strategy(), PinnedStrategy::Mapped); // Orin
    assert_eq!(gpu((9, 0), false).pinned_strategy(), PinnedStrategy::Copy); // H100
    assert!((gpu((5, 3), true).capability() - 5.3).abs() < 1e-9);
    // Where page-locked memory is uncached for the CPU, outputs it reads go to pageable memory.
    assert!(!gpu((5, 3), true).cpu_caches_pinned()); // Nano
    assert!(!gpu((6, 2), true).cpu_caches_pinned()); // TX2
    assert!(gpu((7, 2), true).cpu_caches_pinned()); // Xavier
    assert!(gpu((8, 7), true).cpu_caches_pinned()); // Orin
    assert!(gpu((9, 0), false).cpu_caches_pinned()); // H100
}

#[test]
fn uuids_print_as_nvidia_smi_does() {
    let b: [u8; 16] = [0x5e, 0x6f, 0x01, 0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0, 1, 2, 3, 4, 5, 6, 7];
    assert_eq!(format_uuid(&b), "GPU-5e6f0102-aabb-ccdd-0001-020304050607");
}

#[test]
fn a_machine_without_a_driver_says_so() {
    // This test machine has no GPU driver; where one exists the table must load completely.
    match driver() {
        Ok(d) => assert!(d.version > 0),
        Err(why) => assert!(why.starts_with("no CUDA driver could be loaded"), "{why}"),
    }
}
