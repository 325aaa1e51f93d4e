//! Large request buffers, reused from request to request.
//!
//! The gRPC and HTTP front-ends read a large inference message (a camera frame: 588 KiB) into one
//! buffer placed so that its tensor is aligned. Allocated and freed per request, such a buffer made
//! glibc trim its heap's top every few dozen requests (an `madvise` by the thread that freed it: the
//! instance thread for gRPC, the I/O thread for HTTP), and the next requests faulted the pages back in: 15 page faults a camera frame over gRPC, 24
//! over HTTP, on the I/O thread. Reused, none. At most [`KEEP`] buffers and [`KEEP_BYTES`] in all are
//! kept, so an idle server holds no more than that.

use bytes::Bytes;
use std::sync::Mutex;

/// Buffers given back, for the next requests.
static KEPT: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// How many buffers are kept at most.
pub const KEEP: usize = 4;

/// The capacity of all kept buffers together, at most.
pub const KEEP_BYTES: usize = 16 << 20;

/// An empty buffer for at least `capacity` bytes: one kept in `pool` when there is one (grown if too
/// small).
fn buffer_from(pool: &Mutex<Vec<Vec<u8>>>, capacity: usize) -> Vec<u8> {
    let kept = pool.lock().ok().and_then(|mut k| k.pop());
    let mut buf = kept.unwrap_or_default();
    buf.clear();
    buf.reserve(capacity);
    buf
}

/// A buffer for `len` bytes that start after a pad of zeros placed so that their byte `at` lies on a
/// multiple of `align` (a power of two); returns it, holding just the pad, with the pad's length.
pub fn placed(len: usize, at: usize, align: usize) -> (Vec<u8>, usize) {
    let mut buf = buffer_from(&KEPT, len + align);
    let pad = (align - (buf.as_ptr() as usize + at) % align) % align;
    buf.resize(pad, 0);
    (buf, pad)
}

/// `buf` as `Bytes` that give it back to be kept once the last slice of them is dropped.
pub fn into_bytes(buf: Vec<u8>) -> Bytes {
    Bytes::from_owner(Recycled { buf, pool: &KEPT })
}

/// A buffer that goes back to its pool ([`KEPT`]) when dropped, if there is room.
struct Recycled {
    buf: Vec<u8>,
    pool: &'static Mutex<Vec<Vec<u8>>>,
}

impl AsRef<[u8]> for Recycled {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Recycled {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        if let Ok(mut kept) = self.pool.lock() {
            keep(&mut kept, buf);
        }
    }
}

/// Adds `buf` to `kept` if that stays within [`KEEP`] and [`KEEP_BYTES`]; otherwise frees it.
fn keep(kept: &mut Vec<Vec<u8>>, buf: Vec<u8>) {
    let held: usize = kept.iter().map(Vec::capacity).sum();
    if kept.len() < KEEP && held + buf.capacity() <= KEEP_BYTES {
        kept.push(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_kept_within_their_bounds() {
        let mut kept = Vec::new();
        for _ in 0..KEEP + 2 {
            keep(&mut kept, Vec::with_capacity(1 << 20));
        }
        assert_eq!(kept.len(), KEEP, "at most KEEP buffers");
        let mut kept = vec![Vec::with_capacity(KEEP_BYTES - 100)];
        keep(&mut kept, Vec::with_capacity(1 << 10));
        assert_eq!(kept.len(), 1, "at most KEEP_BYTES in all");
        keep(&mut kept, Vec::with_capacity(50));
        assert_eq!(kept.len(), 2);
    }

    #[test]
    fn a_placed_buffer_puts_the_asked_byte_on_the_boundary() {
        for at in [0, 1, 63, 64, 1000] {
            let (mut buf, pad) = placed(4096, at, 64);
            assert_eq!(buf.len(), pad);
            assert!(pad < 64 && buf.capacity() >= pad + 4096);
            buf.extend(std::iter::repeat_n(7u8, 4096));
            assert_eq!(buf[pad + at..].as_ptr() as usize % 64, 0, "at {at}");
        }
    }

    #[test]
    fn bytes_give_their_buffer_back_once_the_last_slice_is_dropped() {
        // A pool of its own: other tests use the server's meanwhile.
        static POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
        let mut buf = buffer_from(&POOL, 3 << 20);
        buf.extend_from_slice(b"old contents");
        let at = buf.as_ptr() as usize;
        let bytes = Bytes::from_owner(Recycled { buf, pool: &POOL });
        let slice = bytes.slice(4..);
        drop(bytes);
        assert!(POOL.lock().unwrap().is_empty(), "a slice still holds it");
        drop(slice);
        assert_eq!(POOL.lock().unwrap().len(), 1, "given back");
        let again = buffer_from(&POOL, 10);
        assert_eq!(again.as_ptr() as usize, at, "the same buffer again");
        assert!(again.is_empty() && again.capacity() >= 3 << 20, "it comes back empty");
    }
}
