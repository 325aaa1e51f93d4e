//! A response cache outside tritonrs: a TRITONCACHE library (`--cache-directory`, loaded by
//! `backend::capi`). Such a library sees what tritonserver shows it: a string key and opaque host
//! buffers. Each entry is one buffer holding one response packed as tritonserver 2.51 packs it
//! (`[u32 outputs][u64 size, output]...`, each output `[u32 len, name][u32 len, datatype]
//! [u32 len, i64 dims][u64 len, data]`, little-endian), so a cache that inspects entries, or one shared
//! with a tritonserver, sees the same bytes.

use crate::error::{Error, Result};
use crate::model_api::types::{DataType, Tensor};

/// A cache implementation behind a string key and opaque buffers.
pub trait ExternalCache: Send + Sync + std::fmt::Debug {
    /// The cache's name (`--cache-config <name>,...`), for messages.
    fn name(&self) -> &str;
    /// The entry's buffers, or `None` on a miss.
    fn lookup(&self, key: &str) -> Result<Option<Vec<Vec<u8>>>>;
    /// Stores an entry; a key already present is not an error.
    fn insert(&self, key: &str, buffers: Vec<Vec<u8>>) -> Result<()>;
}

/// The key a library sees: the 128-bit hash in hex, stable across runs and builds.
pub fn key_string(key: &super::CacheKey) -> String {
    format!("{:016x}{:016x}", key.0, key.1)
}

fn put_len<const N: usize>(out: &mut Vec<u8>, n: usize, what: &str) -> Result<()> {
    let bytes = (n as u64).to_le_bytes();
    if N < 8 && n >> (8 * N) != 0 {
        return Err(Error::invalid(format!("the {what} of a cached output is too large to pack")));
    }
    out.extend_from_slice(&bytes[..N]);
    Ok(())
}

/// Packs one response's outputs into one buffer.
pub fn pack(outputs: &[Tensor]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    put_len::<4>(&mut out, outputs.len(), "output count")?;
    for t in outputs {
        let data = t.data.to_host()?;
        let mut o = Vec::with_capacity(data.len() + t.name.len() + 8 * t.shape.len() + 32);
        put_len::<4>(&mut o, t.name.len(), "name")?;
        o.extend_from_slice(t.name.as_bytes());
        let dtype = t.datatype.as_str();
        put_len::<4>(&mut o, dtype.len(), "datatype")?;
        o.extend_from_slice(dtype.as_bytes());
        put_len::<4>(&mut o, 8 * t.shape.len(), "shape")?;
        t.shape.iter().for_each(|d| o.extend_from_slice(&d.to_le_bytes()));
        put_len::<8>(&mut o, data.len(), "data")?;
        o.extend_from_slice(&data);
        put_len::<8>(&mut out, o.len(), "output")?;
        out.extend_from_slice(&o);
    }
    Ok(out)
}

/// Reads packed bytes front to back; running out is a malformed entry.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.0.len() {
            return Err(Error::internal("a cache entry is shorter than its contents say"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn len<const N: usize>(&mut self) -> Result<usize> {
        let mut b = [0u8; 8];
        b[..N].copy_from_slice(self.take(N)?);
        usize::try_from(u64::from_le_bytes(b)).map_err(|_| Error::internal("a cache entry names an impossible size"))
    }

    fn text(&mut self) -> Result<&'a str> {
        let n = self.len::<4>()?;
        std::str::from_utf8(self.take(n)?).map_err(|_| Error::internal("a cache entry holds a name that is not UTF-8"))
    }
}

/// Unpacks a buffer `pack` made (or tritonserver made) back into outputs.
pub fn unpack(buffer: &[u8]) -> Result<Vec<Tensor>> {
    let mut r = Reader(buffer);
    let count = r.len::<4>()?;
    let mut outputs = Vec::new();
    for _ in 0..count {
        let size = r.len::<8>()?;
        let mut o = Reader(r.take(size)?);
        let name = o.text()?.to_string();
        let dtype = o.text()?;
        let datatype = DataType::parse(dtype)
            .ok_or_else(|| Error::internal(format!("a cache entry holds unknown datatype '{dtype}'")))?;
        let shape_bytes = o.len::<4>()?;
        let shape = o
            .take(shape_bytes)?
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        let n = o.len::<8>()?;
        let data = o.take(n)?.to_vec();
        if !o.0.is_empty() || shape_bytes % 8 != 0 {
            return Err(Error::internal(format!("the cached output '{name}' is malformed")));
        }
        outputs.push(Tensor::new(name, datatype, shape, data));
    }
    if !r.0.is_empty() {
        return Err(Error::internal("a cache entry is longer than its contents say"));
    }
    Ok(outputs)
}
