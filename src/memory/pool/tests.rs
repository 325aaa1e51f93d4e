use super::*;

/// Host memory that can run out (to test allocator failures).
struct Limited {
    left: AtomicUsize,
}

impl Allocator for Limited {
    fn memory_type(&self) -> MemoryType {
        MemoryType::CpuPinned
    }
    fn allocate(&self, len: usize) -> Result<usize> {
        self.left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |l| l.checked_sub(len))
            .map_err(|_| Error::unavailable("page-locking failed"))?;
        HostAllocator.allocate(len)
    }
    unsafe fn release(&self, addr: usize, len: usize) {
        self.left.fetch_add(len, Ordering::AcqRel);
        // SAFETY: the caller's contract (a block this allocator handed out, released once) is passed on.
        unsafe { HostAllocator.release(addr, len) };
    }
}

#[test]
fn blocks_come_from_the_budget_then_from_the_fallback() {
    let pool =
        Pool::new("pinned", 16 << 10, Box::new(Limited { left: AtomicUsize::new(1 << 30) }), Box::new(HostAllocator));
    let mut a = pool.allocate(5000).unwrap(); // an 8 KiB class
    assert_eq!(a.memory_type(), MemoryType::CpuPinned);
    assert_eq!(a.len(), 5000);
    a.as_mut_slice().unwrap().fill(7);
    assert!(a.as_ref().iter().all(|&b| b == 7));
    let b = pool.allocate(8192).unwrap();
    assert_eq!(
        pool.stats(),
        PoolStats { name: "pinned".into(), total_bytes: 16 << 10, used_bytes: 16 << 10, fallbacks: 0 }
    );
    // The budget is spent: plain host memory, counted.
    let c = pool.allocate(100).unwrap();
    assert_eq!(c.memory_type(), MemoryType::Cpu);
    assert_eq!(pool.stats().fallbacks, 1);
    drop(c);
    assert_eq!(pool.stats().used_bytes, 16 << 10);
    // A freed block is reused for the same size class, without a new allocation.
    let addr = b.addr();
    drop(b);
    assert_eq!(pool.stats().used_bytes, 8 << 10);
    let d = pool.allocate(6000).unwrap();
    assert_eq!((d.addr(), d.memory_type()), (addr, MemoryType::CpuPinned));
    drop((a, d));
    assert_eq!(pool.stats().used_bytes, 0);
}

#[test]
fn a_failing_allocator_falls_back_and_returns_its_budget() {
    let pool =
        Pool::new("pinned", 1 << 20, Box::new(Limited { left: AtomicUsize::new(4096) }), Box::new(HostAllocator));
    let a = pool.allocate(10).unwrap();
    assert_eq!(a.memory_type(), MemoryType::CpuPinned);
    let b = pool.allocate(10).unwrap(); // the allocator is out: fallback
    assert_eq!(b.memory_type(), MemoryType::Cpu);
    assert_eq!(pool.stats().fallbacks, 1);
    assert_eq!(pool.stats().used_bytes, 4096);
    drop((a, b));
}

#[test]
fn pools_are_safe_to_share_between_threads() {
    let pool = Pool::new("pinned", 64 << 10, Box::new(HostAllocator), Box::new(HostAllocator));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let pool = pool.clone();
            std::thread::spawn(move || {
                for n in 0..200 {
                    let mut b = pool.allocate(1000 + (n * 37 + t) % 9000).unwrap();
                    let s = b.as_mut_slice().unwrap();
                    s.fill(t as u8);
                    assert!(s.iter().all(|&x| x == t as u8));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = pool.stats();
    assert_eq!(s.used_bytes, 0);
    assert!(s.fallbacks <= 800);
}

#[test]
fn host_pools_need_no_gpu() {
    let pools = Pools::new(&PoolOptions { pinned_bytes: 1 << 20, cuda_bytes: vec![(0, 1 << 20)] }, &HostOnly);
    // This machine may or may not have a GPU; the pinned pool works either way.
    let b = pools.pinned.allocate(100).unwrap();
    assert!(matches!(b.memory_type(), MemoryType::Cpu | MemoryType::CpuPinned));
    assert_eq!(pools.pinned.stats().total_bytes, 1 << 20);
}

#[test]
fn cuda_pool_flags_parse() {
    assert_eq!(parse_cuda_pool("0:67108864"), Ok((0, 67108864)));
    assert_eq!(parse_cuda_pool(" 1 : 0 "), Ok((1, 0)));
    for bad in ["67108864", "a:1", "-1:5", "0:x", "0:-5", ""] {
        assert!(parse_cuda_pool(bad).is_err(), "{bad}");
    }
}
