//! Unit tests of `backend/python/stub_memory.rs`.

use super::*;

#[test]
fn allocator_first_fit_and_merges_on_free() {
    let mut a = Allocator::new(64, 64 * 8);
    let x = a.alloc(10).unwrap();
    let y = a.alloc(65).unwrap();
    let z = a.alloc(64).unwrap();
    assert_eq!((x, y, z), (64, 128, 256));
    assert!(a.alloc(64 * 5).is_none(), "only 4 blocks are left");
    a.free(y);
    // The hole of two blocks is reused first.
    assert_eq!(a.alloc(100), Some(128));
    a.free(128);
    a.free(x);
    a.free(z);
    assert_eq!(a.in_use(), 0);
    // Everything merged back into one range.
    assert_eq!(a.alloc(64 * 8), Some(64));
}

#[test]
fn allocator_ignores_unknown_offsets() {
    let mut a = Allocator::new(64, 256);
    let x = a.alloc(1).unwrap();
    a.free(x + 1);
    a.free(12345);
    assert_eq!(a.in_use(), 1);
    a.free(x);
    a.free(x);
    assert_eq!(a.alloc(256), Some(64));
}

#[test]
fn region_round_trips_and_checks_ring_bounds() {
    let r = SharedRegion::create(1 << 16, "tritonrs-test-").unwrap();
    let path = r.path().unwrap();
    assert!(path.exists());
    let off = r.put(b"hello").unwrap();
    assert_eq!(off, HEADER);
    assert_eq!(r.blocks_in_use(), 1);
    r.release([off as u64]);
    assert_eq!(r.blocks_in_use(), 0);
    assert!(r.read_ring(0, 8).is_err(), "the header is not in the stub's area");
    assert!(r.read_ring(HEADER as u64, 8).is_err(), "nor is the server's area");
    let (main, main_len) = r.ring(Ring::Main);
    let (side, side_len) = r.ring(Ring::Side);
    assert_eq!(main + main_len, side);
    assert!(r.read_ring(side as u64, (side_len + 1) as u64).is_err());
    assert!(r.read_ring(u64::MAX, 2).is_err());
    assert_eq!(r.read_ring(main as u64, 4).unwrap(), vec![0; 4]);
    r.consumed(Ring::Main, 42);
    r.consumed(Ring::Side, 7);
    r.unlink();
    assert!(!path.exists());
}
