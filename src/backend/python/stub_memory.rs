//! The shared-memory file between the server and one Python stub: tensors cross here, not through the
//! control socket.
//!
//! Layout: a 64-byte header (the consumed positions of the stub's two rings, little-endian u64s at
//! offsets 0 and 8), then the server's area, where request tensors are written in blocks the stub
//! releases once no Python array uses them, then the stub's area: two rings the stub writes tensors
//! into, one for the frames of each socket (see [`super::stub`]), whose consumed positions the server
//! publishes in the header after copying tensors out. Each socket has one reader on the server side,
//! so each ring is consumed in the order it was filled.
//!
//! Every access to the mapping goes through this module; the only unsafe code of the Python backend is
//! here.
#![allow(unsafe_code)]

use crate::error::{Error, Result};
use memmap2::MmapRaw;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes before the first area; the header fits in the first 8.
pub const HEADER: usize = 64;
/// Every block starts at a multiple of this, so numpy can read any element type in place.
pub const ALIGN: usize = 64;

/// First-fit allocator over the server's area, by offset. Pure bookkeeping, so it is unit-tested
/// without a mapping.
#[derive(Debug)]
pub struct Allocator {
    /// Free ranges: offset -> length, never adjacent (merged on free).
    free: BTreeMap<usize, usize>,
    /// Allocated blocks: offset -> length.
    used: HashMap<usize, usize>,
}

impl Allocator {
    /// An allocator for `len` bytes starting at `start` (both multiples of [`ALIGN`]).
    pub fn new(start: usize, len: usize) -> Self {
        let mut free = BTreeMap::new();
        if len > 0 {
            free.insert(start, len);
        }
        Allocator { free, used: HashMap::new() }
    }

    /// A block of at least `n` bytes, or `None` when no free range is large enough.
    pub fn alloc(&mut self, n: usize) -> Option<usize> {
        let n = n.max(1).checked_add(ALIGN - 1)? / ALIGN * ALIGN;
        let (&off, &len) = self.free.iter().find(|(_, &len)| len >= n)?;
        self.free.remove(&off);
        if len > n {
            self.free.insert(off + n, len - n);
        }
        self.used.insert(off, n);
        Some(off)
    }

    /// Returns a block; offsets that are not allocated blocks are ignored (the stub reports them, and a
    /// confused stub must not corrupt the bookkeeping).
    pub fn free(&mut self, off: usize) {
        let Some(len) = self.used.remove(&off) else { return };
        let (mut start, mut end) = (off, off + len);
        if let Some((&prev, &plen)) = self.free.range(..off).next_back() {
            if prev + plen == off {
                self.free.remove(&prev);
                start = prev;
            }
        }
        if let Some(next_len) = self.free.remove(&end) {
            end += next_len;
        }
        self.free.insert(start, end - start);
    }

    /// Blocks in use.
    pub fn in_use(&self) -> usize {
        self.used.len()
    }
}

/// One stub's shared-memory file, mapped in the server.
pub struct SharedRegion {
    /// The mapping of the whole file.
    map: MmapRaw,
    /// The file's path until [`SharedRegion::unlink`] removes it (the mappings stay valid).
    path: parking_lot::Mutex<Option<PathBuf>>,
    /// The server's area.
    alloc: parking_lot::Mutex<Allocator>,
    /// Where the stub's rings start and how long each is: [main socket's, side socket's].
    rings: [(usize, usize); 2],
}

/// Which of the stub's rings (the one of the frames on the main socket, or on the side socket).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ring {
    Main = 0,
    Side = 1,
}

impl SharedRegion {
    /// Creates a file of `size` bytes in /dev/shm (or the temporary folder where there is none), split
    /// evenly between the two areas.
    pub fn create(size: usize, prefix: &str) -> Result<SharedRegion> {
        let size = size.max(HEADER + 2 * 4096) / ALIGN * ALIGN;
        let dir = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        let file = tempfile::Builder::new()
            .prefix(prefix)
            .tempfile_in(&dir)
            .map_err(|e| Error::internal(format!("cannot create a shared-memory file in '{}': {e}", dir.display())))?;
        file.as_file()
            .set_len(size as u64)
            .map_err(|e| Error::internal(format!("cannot size the shared-memory file to {size} bytes: {e}")))?;
        let map = MmapRaw::map_raw(file.as_file())
            .map_err(|e| Error::internal(format!("cannot map the shared-memory file: {e}")))?;
        // The file is removed by `unlink` once the stub has mapped it, or here if that never happens.
        let (_, path) = file.keep().map_err(|e| Error::internal(format!("cannot keep the shared-memory file: {e}")))?;
        let server_len = (size - HEADER) / 2 / ALIGN * ALIGN;
        let main_start = HEADER + server_len;
        let main_len = (size - main_start) / 2 / ALIGN * ALIGN;
        let side_start = main_start + main_len;
        Ok(SharedRegion {
            map,
            path: parking_lot::Mutex::new(Some(path)),
            alloc: parking_lot::Mutex::new(Allocator::new(HEADER, server_len)),
            rings: [(main_start, main_len), (side_start, size - side_start)],
        })
    }

    /// The file's path (for the stub to map), while it still exists.
    pub fn path(&self) -> Option<PathBuf> {
        self.path.lock().clone()
    }

    /// Removes the file; both mappings stay valid, and nothing is left behind if either process dies.
    pub fn unlink(&self) {
        if let Some(p) = self.path.lock().take() {
            let _ = std::fs::remove_file(p);
        }
    }

    pub fn size(&self) -> usize {
        self.map.len()
    }

    /// Where a ring starts and its length.
    pub fn ring(&self, ring: Ring) -> (usize, usize) {
        self.rings[ring as usize]
    }

    /// Copies `data` into a new block of the server's area; `None` when it does not fit now.
    pub fn put(&self, data: &[u8]) -> Option<usize> {
        let off = self.alloc.lock().alloc(data.len())?;
        // SAFETY: `off..off + data.len()` lies inside the server's area, within the mapping (the
        // allocator only hands out ranges of that area), and the block was just allocated, so neither
        // this process nor the stub (which only reads blocks it has been told about, and only until it
        // releases them) accesses it concurrently. `data` is a separate allocation, so the ranges do not
        // overlap.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.map.as_mut_ptr().add(off), data.len()) };
        Some(off)
    }

    /// Releases blocks the stub no longer uses.
    pub fn release(&self, offsets: impl IntoIterator<Item = u64>) {
        let mut a = self.alloc.lock();
        for off in offsets {
            if let Ok(off) = usize::try_from(off) {
                a.free(off);
            }
        }
    }

    /// Blocks of the server's area in use (for tests and diagnostics).
    pub fn blocks_in_use(&self) -> usize {
        self.alloc.lock().in_use()
    }

    /// Copies `len` bytes the stub wrote at `off` in one of its rings. The range is checked: a stub
    /// cannot make the server read outside its area.
    pub fn read_ring(&self, off: u64, len: u64) -> Result<Vec<u8>> {
        let bad = || Error::internal(format!("the Python stub described a tensor at {off}+{len} outside its area"));
        let off = usize::try_from(off).map_err(|_| bad())?;
        let len = usize::try_from(len).map_err(|_| bad())?;
        let end = off.checked_add(len).ok_or_else(bad)?;
        let (start, _) = self.rings[0];
        if off < start || end > self.map.len() {
            return Err(bad());
        }
        let mut out = vec![0u8; len];
        // SAFETY: `off..end` is inside the stub's area, inside the mapping (checked above). The stub wrote
        // these bytes before sending the frame that describes them and does not reuse the range until the
        // server publishes a consumed position past it (`consumed`, called after this copy). `out` is a
        // fresh allocation, so the ranges do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(self.map.as_ptr().add(off), out.as_mut_ptr(), len) };
        Ok(out)
    }

    /// Publishes a ring's consumed position (a count of bytes, as the stub keeps it): the stub may reuse
    /// everything before it.
    pub fn consumed(&self, ring: Ring, position: u64) {
        // SAFETY: the header's first 16 bytes are inside the mapping, which is page-aligned, so offsets 0
        // and 8 are aligned for a u64; they are only ever accessed as these atomics (here) and read by the
        // stub as plain u64s.
        let tail = unsafe { &*(self.map.as_mut_ptr().add(8 * ring as usize) as *const AtomicU64) };
        // Release: the copies out of the ring happen before the stub can see the space as free.
        tail.store(position.to_le(), Ordering::Release);
    }
}

impl Drop for SharedRegion {
    fn drop(&mut self) {
        self.unlink();
    }
}

#[cfg(test)]
mod tests;
