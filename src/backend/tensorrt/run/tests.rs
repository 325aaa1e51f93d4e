//! The run over the fake stream: no pooled block goes back to its pool while queued work may use it,
//! whichever step fails.

use super::super::engine::{EngineDesc, IoDesc, Range};
use super::super::mock::{fake_pools, FakeStream, Script};
use super::*;
use crate::memory::pool::testing::TestAllocator;
use crate::memory::pool::{Allocator, HostAllocator, Pool};
use parking_lot::Mutex;
use std::sync::Arc;

fn desc() -> EngineDesc {
    let t = |name: &str, input: bool| IoDesc {
        name: name.into(),
        input,
        trt_dtype: 0,
        dims: vec![-1, 4],
        shape_tensor: false,
        host: false,
        not_linear: false,
    };
    let range = Some(Range { min: vec![1, 4], opt: vec![2, 4], max: vec![8, 4] });
    EngineDesc {
        // Two inputs, a requested output and one nobody asked for (it still needs memory).
        io: vec![t("A", true), t("B", true), t("OUT", false), t("SPARE", false)],
        profiles: vec![vec![range.clone(), range, None, None]],
        implicit_batch: false,
    }
}

fn fp32(batch: usize, v: f32) -> Buffer {
    let bytes: Vec<u8> = std::iter::repeat_n(v, batch * 4).flat_map(f32::to_le_bytes).collect();
    Buffer::host(bytes.into())
}

struct Setup {
    script: Arc<Mutex<Script>>,
    stream: FakeStream,
    pools: Pools,
}

fn setup(fail: &[usize]) -> Setup {
    let script = Script::new();
    let pools = fake_pools(0, 64 << 20, &script);
    {
        let mut s = script.lock();
        s.fail = fail.to_vec();
        s.watch = vec![pools.pinned.clone(), pools.gpus[0].1.clone()];
    }
    let stream = FakeStream::new(desc(), Arc::new(Mutex::new(Vec::new())), script.clone());
    Setup { script, stream, pools }
}

fn used(pools: &Pools) -> u64 {
    pools.pinned.stats().used_bytes + pools.gpus[0].1.stats().used_bytes
}

fn run_once(s: &mut Setup, readback: Readback, current: &mut Option<usize>) -> Result<Vec<RunOutput>> {
    let a = fp32(2, 1.5);
    let b = fp32(2, 2.0);
    let inputs = [RunInput { io: 0, shape: &[2, 4], data: &a }, RunInput { io: 1, shape: &[2, 4], data: &b }];
    let memory = Memory { pools: &s.pools, device: 0, mapped: false, readback };
    run(&mut s.stream, &memory, &desc(), current, 0, &inputs, &[2])
}

fn values(b: &Buffer) -> Vec<f32> {
    b.to_host().unwrap().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

#[test]
fn a_run_copies_in_runs_and_copies_back_after_one_sync() {
    for readback in [Readback::Pinned, Readback::Pageable] {
        let mut s = setup(&[]);
        let out = run_once(&mut s, readback, &mut None).expect("runs");
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].shape, vec![2, 4]);
        assert_eq!(values(&out[0].data), vec![3.5; 8]);
        let expected = if readback == Readback::Pinned { MemoryType::CpuPinned } else { MemoryType::Cpu };
        assert_eq!(out[0].data.memory_type(), expected);
        let events = s.script.lock().events.clone();
        assert_eq!(events.iter().filter(|e| *e == "sync").count(), 1, "{events:?}");
        assert_eq!(events.last().map(String::as_str), Some("sync"));
        // Only the response's pinned block (if any) is still out of the pools.
        drop(out);
        assert_eq!(used(&s.pools), 0);
    }
}

#[test]
fn no_block_returns_to_a_pool_before_the_stream_is_synchronized_whichever_step_fails() {
    // A clean run names the steps; the first queued one is `set_profile`.
    let mut clean = setup(&[]);
    run_once(&mut clean, Readback::Pinned, &mut None).expect("runs");
    let events = clean.script.lock().events.clone();
    let steps = events.len();
    let first_queued = events.iter().position(|e| e == "set_profile").expect("the profile is selected");
    let sync = steps - 1;
    for (fail_at, event) in events.iter().enumerate().take(sync).skip(first_queued) {
        // A failed device allocation falls back to more device memory (the next step): fail both.
        let fail = if event == "alloc" { vec![fail_at, fail_at + 1] } else { vec![fail_at] };
        let mut s = setup(&fail);
        let err = run_once(&mut s, Readback::Pinned, &mut None).expect_err("the step fails");
        assert!(err.message.contains("fake:") || err.message.contains("mock TensorRT"), "{}", err.message);
        let script = s.script.lock();
        let failed = script.events.iter().position(|e| e.ends_with('!')).expect("a step failed");
        // Work was queued before the failure, so the guard synchronized before anything was freed...
        assert_eq!(script.events.last().map(String::as_str), Some("sync"), "fail at {fail_at}: {:?}", script.events);
        assert!(script.events.len() > failed + 1);
        // ...and every block allocated so far was still out of its pool when it did.
        for &(at_sync, most) in &script.at_sync {
            assert_eq!(at_sync, most, "fail at {fail_at}: a block went back early: {:?}", script.events);
        }
        drop(script);
        // Afterwards everything is back.
        assert_eq!(used(&s.pools), 0, "fail at {fail_at}");
    }
}

#[test]
fn a_stream_that_cannot_be_synchronized_keeps_its_blocks_out_of_the_pools() {
    // Fail the final sync: the GPU may still use the memory, so it is leaked, never reused.
    let mut clean = setup(&[]);
    run_once(&mut clean, Readback::Pinned, &mut None).expect("runs");
    let sync = clean.script.lock().events.len() - 1;
    let mut s = setup(&[sync]);
    run_once(&mut s, Readback::Pinned, &mut None).expect_err("sync fails");
    let events = s.script.lock().events.clone();
    assert!(events.iter().any(|e| e == "sync!"), "{events:?}");
    // The guard synchronized once more when it was dropped, and that succeeded: then the blocks may go back.
    assert_eq!(events.last().map(String::as_str), Some("sync"), "{events:?}");
    assert_eq!(used(&s.pools), 0, "{events:?}");

    // Every sync fails (a sticky CUDA error): nothing is given back.
    let s = setup(&[sync]);
    let pools = s.pools.clone();
    struct Sticky(FakeStream);
    impl Stream for Sticky {
        fn set_profile(&mut self, p: usize) -> Result<()> {
            self.0.set_profile(p)
        }
        fn set_input_shape(&mut self, io: usize, shape: &[i64]) -> Result<()> {
            self.0.set_input_shape(io, shape)
        }
        fn tensor_shape(&mut self, io: usize) -> Result<Vec<i64>> {
            self.0.tensor_shape(io)
        }
        fn mapped_pointer(&mut self, host: usize) -> Result<u64> {
            self.0.mapped_pointer(host)
        }
        fn set_address(&mut self, io: usize, ptr: u64) -> Result<()> {
            self.0.set_address(io, ptr)
        }
        fn copy_in(&mut self, dst: u64, src: &[u8]) -> Result<()> {
            self.0.copy_in(dst, src)
        }
        fn copy_out(&mut self, dst: &mut [u8], src: u64) -> Result<()> {
            self.0.copy_out(dst, src)
        }
        fn enqueue(&mut self) -> Result<()> {
            self.0.enqueue()
        }
        fn sync(&mut self) -> Result<()> {
            Err(Error::internal("CUDA_ERROR_ILLEGAL_ADDRESS"))
        }
    }
    s.script.lock().fail.clear();
    let mut sticky = Sticky(s.stream);
    let a = fp32(2, 1.0);
    let inputs = [RunInput { io: 0, shape: &[2, 4], data: &a }, RunInput { io: 1, shape: &[2, 4], data: &a }];
    let memory = Memory { pools: &pools, device: 0, mapped: false, readback: Readback::Pinned };
    let before = used(&pools);
    assert_eq!(before, 0);
    run(&mut sticky, &memory, &desc(), &mut None, 0, &inputs, &[2]).expect_err("sync fails");
    assert!(used(&pools) > 0, "blocks the GPU may still use went back to the pools");
}

#[test]
fn a_refused_profile_is_selected_again_by_the_next_run() {
    let mut s = setup(&[]);
    let mut current = None;
    s.script.lock().fail = vec![0]; // set_profile
    run_once(&mut s, Readback::Pinned, &mut current).expect_err("refused");
    assert_eq!(current, None);
    run_once(&mut s, Readback::Pinned, &mut current).expect("runs");
    assert_eq!(current, Some(0));
    let before = s.script.lock().events.iter().filter(|e| *e == "set_profile").count();
    run_once(&mut s, Readback::Pinned, &mut current).expect("runs");
    let after = s.script.lock().events.iter().filter(|e| *e == "set_profile").count();
    assert_eq!(before, after, "the profile is selected once, not per run");
}

/// A pinned allocator that says its blocks are mapped (host memory underneath).
fn mapped_host() -> Box<dyn Allocator> {
    Box::new(TestAllocator::new(MemoryType::CpuPinned, true, true))
}

#[test]
fn mapped_slots_are_used_only_when_the_pinned_pool_maps_its_blocks() {
    let script = Script::new();
    // The pool's blocks are not mapped (the pool chose for another GPU): device slots and copies,
    // even though the context's own GPU would map.
    let mut s = setup(&[]);
    let memory = Memory { pools: &s.pools, device: 0, mapped: true, readback: Readback::Pinned };
    let a = fp32(1, 1.0);
    let inputs = [RunInput { io: 0, shape: &[1, 4], data: &a }, RunInput { io: 1, shape: &[1, 4], data: &a }];
    run(&mut s.stream, &memory, &desc(), &mut None, 0, &inputs, &[2]).expect("runs");
    let events = s.script.lock().events.clone();
    assert!(events.iter().any(|e| e == "copy_in") && !events.iter().any(|e| e == "mapped_pointer"), "{events:?}");

    // A mapped pool: the GPU addresses the blocks in place, no copies, and the output is the block.
    let mut pools = fake_pools(0, 64 << 20, &script);
    pools.pinned = Pool::new("pinned", 64 << 20, mapped_host(), Box::new(HostAllocator));
    let mut stream = FakeStream::new(desc(), Arc::new(Mutex::new(Vec::new())), script.clone());
    let memory = Memory { pools: &pools, device: 0, mapped: true, readback: Readback::Pinned };
    let out = run(&mut stream, &memory, &desc(), &mut None, 0, &inputs, &[2]).expect("runs");
    let events = script.lock().events.clone();
    assert!(events.iter().any(|e| e == "mapped_pointer"), "{events:?}");
    assert!(!events.iter().any(|e| e == "copy_in" || e == "copy_out"), "{events:?}");
    assert_eq!(out[0].data.memory_type(), MemoryType::CpuPinned);

    // The budget is spent: the fallback's plain host memory is not mapped, so it is not used in place.
    let mut pools = fake_pools(0, 64 << 20, &script);
    pools.pinned = Pool::new("pinned", 0, mapped_host(), Box::new(HostAllocator));
    script.lock().events.clear();
    let memory = Memory { pools: &pools, device: 0, mapped: true, readback: Readback::Pinned };
    run(&mut stream, &memory, &desc(), &mut None, 0, &inputs, &[2]).expect("runs");
    let events = script.lock().events.clone();
    assert!(events.iter().any(|e| e == "copy_in") && !events.iter().any(|e| e == "mapped_pointer"), "{events:?}");
}

#[test]
fn injected_faults_fail_the_named_call_once_and_the_run_still_cleans_up() {
    let faults = Faults::parse("enqueue:2, copy_out:2").unwrap();
    let mut s = setup(&[]);
    let mut current = None;
    let mut results = Vec::new();
    for _ in 0..4 {
        let a = fp32(2, 1.5);
        let b = fp32(2, 2.0);
        let inputs = [RunInput { io: 0, shape: &[2, 4], data: &a }, RunInput { io: 1, shape: &[2, 4], data: &b }];
        let memory = Memory { pools: &s.pools, device: 0, mapped: false, readback: Readback::Pinned };
        let mut faulty = Faulty { inner: &mut s.stream, faults: &faults };
        let r = run(&mut faulty, &memory, &desc(), &mut current, 0, &inputs, &[2]);
        results.push(r.map(|o| values(&o[0].data)).map_err(|e| e.message));
        assert_eq!(used(&s.pools), 0);
    }
    assert_eq!(results[0], Ok(vec![3.5; 8]));
    assert!(results[1].as_ref().is_err_and(|e| e.contains("enqueue call 2 failed: injected")), "{results:?}");
    // Run 3 makes the second copy_out call (run 2 made none).
    assert!(results[2].as_ref().is_err_and(|e| e.contains("copy_out call 2 failed")), "{:?}", results[2]);
    assert_eq!(results[3], Ok(vec![3.5; 8]));
    for bad in ["enqueue", "launch:1", "enqueue:0", "enqueue:x"] {
        assert!(Faults::parse(bad).is_err(), "{bad}");
    }
    assert!(Faults::parse("").unwrap().is_empty());
}

#[test]
fn a_profile_selected_at_load_is_not_selected_again_by_the_first_run() {
    let mut s = setup(&[]);
    let mut current = None;
    select(&mut s.stream, &mut current, 0).expect("selected");
    assert_eq!(current, Some(0));
    assert_eq!(s.script.lock().events, vec!["set_profile", "sync"]);
    run_once(&mut s, Readback::Pinned, &mut current).expect("runs");
    let events = s.script.lock().events.clone();
    assert_eq!(events.iter().filter(|e| *e == "set_profile").count(), 1, "{events:?}");
    // A refused selection leaves no profile recorded, so the next run selects it again.
    let mut s = setup(&[0]);
    let mut current = None;
    select(&mut s.stream, &mut current, 0).expect_err("refused");
    assert_eq!(current, None);
}
