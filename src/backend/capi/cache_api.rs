//! The TRITONCACHE_* functions response-cache libraries call back (exported, `exports.list`), and the
//! `TRITONCACHE_CacheEntry` and `TRITONCACHE_Allocator` objects they are handed. Loading the libraries
//! and calling them is `cache.rs`'s.
//!
//! The protocol, as tritonserver 2.51 runs it: on insert the entry holds one placeholder buffer (null,
//! size) per response; the cache reads the sizes, puts buffers of its own in their place
//! (`TRITONCACHE_CacheEntrySetBuffer`) and calls `TRITONCACHE_Copy`, which writes the packed responses
//! into them. On look-up the cache adds its buffers to the empty entry (`..AddBuffer`) and calls
//! `TRITONCACHE_Copy`, which copies them out while the cache still holds them.
//!
//! Contract for every `unsafe` block: as in `guard.rs` (object pointers only after `is_live`;
//! out-pointers valid for the call); buffer addresses in an entry are the cache's, valid for their
//! size while the call into the cache that handed the entry over runs (the API's rule).
#![allow(unsafe_code)]
#![allow(non_snake_case)]

use super::abi::*;
use super::guard::{guarded, invalid, obj, obj_mut, put, Err};
use parking_lot::Mutex;

/// TRITONCACHE_API_VERSION_MAJOR / _MINOR of Triton 2.51.
pub const CACHE_API_MAJOR: u32 = 0;
pub const CACHE_API_MINOR: u32 = 1;

/// `TRITONCACHE_CacheEntry`: buffers as (address, byte size); addresses are kept as integers, as this
/// side only copies through them inside `TRITONCACHE_Copy`.
#[derive(Default)]
pub struct CacheEntryObj {
    pub buffers: Mutex<Vec<(usize, usize)>>,
}

/// What `TRITONCACHE_Copy` does with an entry.
pub enum CopyDirection {
    /// Insert: write these packed responses into the entry's buffers (one each).
    Into(Vec<Vec<u8>>),
    /// Look-up: copy the entry's buffers out into `copied`.
    OutOf,
}

/// `TRITONCACHE_Allocator`.
pub struct CacheAllocatorObj {
    pub direction: CopyDirection,
    /// The buffers copied out (look-up), once `TRITONCACHE_Copy` ran.
    pub copied: Mutex<Option<Vec<Vec<u8>>>>,
}

/// Checks that a buffer the cache describes is in host memory, as tritonserver requires.
fn host_memory(attributes: &BufferAttributesObj) -> Result<(), Err> {
    if attributes.memory_type == MEMORY_CPU || attributes.memory_type == MEMORY_CPU_PINNED {
        Ok(())
    } else {
        Err(invalid("only buffers in CPU memory may be cached"))
    }
}

#[no_mangle]
pub extern "C" fn TRITONCACHE_ApiVersion(major: *mut u32, minor: *mut u32) -> Err {
    guarded("TRITONCACHE_ApiVersion", || {
        put(major, CACHE_API_MAJOR);
        put(minor, CACHE_API_MINOR);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONCACHE_CacheEntryBufferCount(entry: *mut CacheEntryObj, count: *mut usize) -> Err {
    guarded("TRITONCACHE_CacheEntryBufferCount", || {
        put(count, obj(entry, Kind::CacheEntry, "entry")?.buffers.lock().len());
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONCACHE_CacheEntryAddBuffer(
    entry: *mut CacheEntryObj,
    base: *mut std::ffi::c_void,
    attributes: *mut BufferAttributesObj,
) -> Err {
    guarded("TRITONCACHE_CacheEntryAddBuffer", || {
        let e = obj(entry, Kind::CacheEntry, "entry")?;
        let a = obj(attributes, Kind::BufferAttributes, "buffer_attributes")?;
        if base.is_null() {
            return Err(invalid("base is null"));
        }
        if a.byte_size == 0 {
            return Err(invalid("the buffer's byte size is zero"));
        }
        host_memory(a)?;
        e.buffers.lock().push((base as usize, a.byte_size));
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONCACHE_CacheEntryGetBuffer(
    entry: *mut CacheEntryObj,
    index: usize,
    base: *mut *mut std::ffi::c_void,
    attributes: *mut BufferAttributesObj,
) -> Err {
    guarded("TRITONCACHE_CacheEntryGetBuffer", || {
        let e = obj(entry, Kind::CacheEntry, "entry")?;
        if base.is_null() {
            return Err(invalid("base is null"));
        }
        let a = obj_mut(attributes, Kind::BufferAttributes, "buffer_attributes")?;
        let &(address, size) =
            e.buffers.lock().get(index).ok_or_else(|| invalid(&format!("the entry has no buffer {index}")))?;
        put(base, address as *mut std::ffi::c_void);
        *a = BufferAttributesObj::host(size);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONCACHE_CacheEntrySetBuffer(
    entry: *mut CacheEntryObj,
    index: usize,
    new_base: *mut std::ffi::c_void,
    attributes: *mut BufferAttributesObj,
) -> Err {
    guarded("TRITONCACHE_CacheEntrySetBuffer", || {
        let e = obj(entry, Kind::CacheEntry, "entry")?;
        let mut buffers = e.buffers.lock();
        let slot = buffers.get_mut(index).ok_or_else(|| invalid(&format!("the entry has no buffer {index}")))?;
        slot.0 = new_base as usize;
        // Attributes are optional: without them the buffer keeps its size.
        if !attributes.is_null() {
            let a = obj(attributes, Kind::BufferAttributes, "buffer_attributes")?;
            host_memory(a)?;
            slot.1 = a.byte_size;
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONCACHE_Copy(allocator: *mut CacheAllocatorObj, entry: *mut CacheEntryObj) -> Err {
    guarded("TRITONCACHE_Copy", || {
        let alloc = obj(allocator, Kind::CacheAllocator, "allocator")?;
        let buffers = obj(entry, Kind::CacheEntry, "entry")?.buffers.lock().clone();
        match &alloc.direction {
            CopyDirection::Into(sources) => copy_into(sources, &buffers),
            CopyDirection::OutOf => {
                let copied = buffers
                    .iter()
                    .map(|&(address, size)| {
                        if address == 0 {
                            return Err(invalid("a buffer of the entry is null"));
                        }
                        // SAFETY: the cache added this buffer of `size` bytes and keeps it for the
                        // look-up call this copy runs in (see the module's contract).
                        Ok(unsafe { std::slice::from_raw_parts(address as *const u8, size) }.to_vec())
                    })
                    .collect::<Result<Vec<_>, Err>>()?;
                *alloc.copied.lock() = Some(copied);
                Ok(())
            }
        }
    })
}

/// Writes each packed response into the buffer the cache provided for it, which must be its size.
fn copy_into(sources: &[Vec<u8>], buffers: &[(usize, usize)]) -> Result<(), Err> {
    if sources.len() != buffers.len() {
        return Err(invalid(&format!("the entry holds {} buffers, not {}", buffers.len(), sources.len())));
    }
    for (source, &(address, size)) in sources.iter().zip(buffers) {
        if address == 0 {
            return Err(invalid("the cache did not set a buffer to copy into (TRITONCACHE_CacheEntrySetBuffer)"));
        }
        if size != source.len() {
            return Err(invalid(&format!("a buffer of {size} bytes was set for {} bytes", source.len())));
        }
        // SAFETY: the cache set this buffer, of `size` bytes and its own, to be written during the
        // insert call this copy runs in; `source` is ours and does not overlap it.
        unsafe { std::ptr::copy_nonoverlapping(source.as_ptr(), address as *mut u8, size) };
    }
    Ok(())
}
