//! Unit tests of `backend/capi/mod.rs`.

/// `exports.list` (what the linker exports) names exactly the functions the files of exported functions define.
#[test]
fn the_linker_exports_every_api_function_and_nothing_else() {
    let code = [
        include_str!("exports.rs"),
        include_str!("requests.rs"),
        include_str!("responses.rs"),
        include_str!("inprocess.rs"),
        include_str!("infer_requests.rs"),
        include_str!("infer_responses.rs"),
        include_str!("metrics.rs"),
        include_str!("resources.rs"),
        include_str!("agent_api.rs"),
        include_str!("cache_api.rs"),
    ]
    .concat();
    let mut defined: Vec<&str> = code
        .split("#[no_mangle]")
        .skip(1)
        .filter_map(|s| s.split("fn ").nth(1))
        .filter_map(|s| s.split('(').next())
        .map(str::trim)
        .collect();
    let list = include_str!("exports.list");
    let body = list.split('{').nth(1).unwrap_or_default();
    let mut listed: Vec<&str> = body.split(';').map(str::trim).filter(|s| s.starts_with("TRITON")).collect();
    defined.sort_unstable();
    listed.sort_unstable();
    assert_eq!(defined, listed);
    assert!(defined.len() > 170);
}

/// `TRITONCACHE_Copy` writes only into buffers the cache set, of the packed size, and copies a
/// look-up's buffers out; `TRITONCACHE_CacheEntry*Buffer` refuse what tritonserver refuses.
#[test]
fn cache_entries_copy_as_tritonserver_does_and_refuse_bad_buffers() {
    use super::abi::{register, unregister, BufferAttributesObj, Kind};
    use super::cache_api::*;
    use super::guard::take_error;
    use parking_lot::Mutex;
    use std::ffi::c_void;
    let failed = |e| take_error(e).is_some();
    let entry = CacheEntryObj { buffers: Mutex::new(vec![(0, 3)]) };
    let into = CacheAllocatorObj { direction: CopyDirection::Into(vec![vec![1, 2, 3]]), copied: Mutex::new(None) };
    let out = CacheAllocatorObj { direction: CopyDirection::OutOf, copied: Mutex::new(None) };
    let e = &entry as *const CacheEntryObj as *mut CacheEntryObj;
    let (i, o) = (&into as *const _ as *mut CacheAllocatorObj, &out as *const _ as *mut CacheAllocatorObj);
    let (two, three) = (BufferAttributesObj::host(2), BufferAttributesObj::host(3));
    let (a2, a3) = (&two as *const _ as *mut BufferAttributesObj, &three as *const _ as *mut BufferAttributesObj);
    for (p, kind) in
        [(e as *const c_void, Kind::CacheEntry), (i as _, Kind::CacheAllocator), (o as _, Kind::CacheAllocator)]
            .into_iter()
            .chain([(a2 as *const c_void, Kind::BufferAttributes), (a3 as _, Kind::BufferAttributes)])
    {
        register(p, kind);
    }
    // Insert: nothing set to copy into, then a buffer of the wrong size, then the right one.
    assert!(failed(TRITONCACHE_Copy(i, e)));
    let (mut small, mut room) = ([0u8; 2], [0u8; 3]);
    assert!(!failed(TRITONCACHE_CacheEntrySetBuffer(e, 0, small.as_mut_ptr() as *mut c_void, a2)));
    assert!(failed(TRITONCACHE_Copy(i, e)));
    assert!(!failed(TRITONCACHE_CacheEntrySetBuffer(e, 0, room.as_mut_ptr() as *mut c_void, a3)));
    assert!(!failed(TRITONCACHE_Copy(i, e)));
    assert_eq!((room, small), ([1, 2, 3], [0, 0]));
    assert!(failed(TRITONCACHE_CacheEntrySetBuffer(e, 1, room.as_mut_ptr() as *mut c_void, a3)));
    // Look-up: the cache's buffers are copied out; null or empty ones are refused.
    entry.buffers.lock().clear();
    assert!(failed(TRITONCACHE_CacheEntryAddBuffer(e, std::ptr::null_mut(), a3)));
    let empty = BufferAttributesObj::host(0);
    let a0 = &empty as *const _ as *mut BufferAttributesObj;
    register(a0 as *const c_void, Kind::BufferAttributes);
    assert!(failed(TRITONCACHE_CacheEntryAddBuffer(e, room.as_mut_ptr() as *mut c_void, a0)));
    assert!(!failed(TRITONCACHE_CacheEntryAddBuffer(e, room.as_mut_ptr() as *mut c_void, a3)));
    let mut count = 0;
    assert!(!failed(TRITONCACHE_CacheEntryBufferCount(e, &mut count)));
    assert!(!failed(TRITONCACHE_Copy(o, e)));
    assert_eq!((count, out.copied.lock().clone()), (1, Some(vec![vec![1, 2, 3]])));
    for p in [e as *const c_void, i as _, o as _, a0 as _, a2 as _, a3 as _] {
        unregister(p);
    }
}
