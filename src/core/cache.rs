//! The response cache (`--cache-config local,size=N` and `response_cache { enable: true }` in a model's
//! config): an LRU bounded in bytes, keyed by a hash of the model, version, inputs (name, datatype,
//! shape, contents) and the requested outputs.

use crate::error::{Error, Result};
use crate::model_api::types::Tensor;
use parking_lot::Mutex;

/// A cache key: a 128-bit hash, so a collision is not a practical concern.
pub type CacheKey = (u64, u64);

/// Parses `--cache-config` values: `local,size=<bytes>` is the one cache implementation. Returns the
/// cache size in bytes, or `None` when no cache is configured.
pub fn parse_cache_config(values: &[String]) -> Result<Option<usize>> {
    let mut size = None;
    for v in values {
        let (cache, setting) = v.split_once(',').ok_or_else(|| {
            Error::invalid(format!(
                "--cache-config '{v}' must be '<cache>,<setting>=<value>', e.g. 'local,size=1048576'"
            ))
        })?;
        if cache != "local" {
            return Err(Error::invalid(format!("--cache-config: cache '{cache}' is not available; only 'local' is")));
        }
        match setting.split_once('=') {
            Some(("size", n)) => {
                size = Some(
                    n.trim()
                        .parse::<usize>()
                        .map_err(|_| Error::invalid(format!("--cache-config: size '{n}' must be a number of bytes")))?,
                )
            }
            _ => {
                return Err(Error::invalid(format!("--cache-config: unknown setting '{setting}' for the local cache")))
            }
        }
    }
    Ok(size.filter(|&s| s > 0))
}

/// Computes the key of a request to one model version: one pass of a 128-bit hash (XXH3) over the
/// model, version, inputs (in name order: the same request with inputs listed differently is the same
/// request) and requested outputs, each field length-prefixed so no two requests feed the same bytes.
pub fn key(model: &str, version: i64, inputs: &[Tensor], outputs: &[String]) -> Result<CacheKey> {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let mut field = |bytes: &[u8]| {
        h.update(&(bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(model.as_bytes());
    field(&version.to_le_bytes());
    let mut sorted: Vec<&Tensor> = inputs.iter().collect();
    sorted.sort_by(|x, y| x.name.cmp(&y.name));
    for t in &sorted {
        field(t.name.as_bytes());
        field(t.datatype.as_str().as_bytes());
        let shape: Vec<u8> = t.shape.iter().flat_map(|d| d.to_le_bytes()).collect();
        field(&shape);
        // Device buffers are copied out once to hash them; a cache is for small host results.
        field(t.data.to_host()?.as_ref());
    }
    for o in outputs {
        field(o.as_bytes());
    }
    let k = h.digest128();
    Ok(((k >> 64) as u64, k as u64))
}

/// A cached result and the bytes it is charged.
struct Entry {
    outputs: Vec<Tensor>,
    bytes: usize,
}

/// The entries in recency order (the `lru` crate), and the bytes they hold: the byte bound is ours,
/// the crate's count bound is not used.
struct Lru {
    entries: lru::LruCache<CacheKey, Entry>,
    used: usize,
}

/// Counters for the cache as a whole.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheSummary {
    pub entries: usize,
    pub used_bytes: usize,
    pub capacity_bytes: usize,
    pub evictions: u64,
}

/// The response cache shared by every model that enables it.
pub struct ResponseCache {
    capacity: usize,
    lru: Mutex<Lru>,
    evictions: std::sync::atomic::AtomicU64,
}

/// Bytes an entry is charged: its tensor data plus a small fixed cost per tensor.
fn entry_bytes(outputs: &[Tensor]) -> usize {
    outputs.iter().map(|t| t.data.len() + t.name.len() + 8 * t.shape.len() + 64).sum()
}

impl ResponseCache {
    pub fn new(capacity: usize) -> Self {
        ResponseCache {
            capacity,
            lru: Mutex::new(Lru { entries: lru::LruCache::unbounded(), used: 0 }),
            evictions: Default::default(),
        }
    }

    /// The cached outputs for `key`, marking the entry as recently used. Tensors share their buffers
    /// with the cache, so a hit copies no data.
    pub fn lookup(&self, key: &CacheKey) -> Option<Vec<Tensor>> {
        self.lru.lock().entries.get(key).map(|e| e.outputs.clone())
    }

    /// Stores a result, evicting the least recently used entries to make room. A result larger than the
    /// whole cache is not stored.
    pub fn insert(&self, key: CacheKey, outputs: Vec<Tensor>) {
        let bytes = entry_bytes(&outputs);
        if bytes > self.capacity {
            return;
        }
        let mut lru = self.lru.lock();
        if let Some(old) = lru.entries.pop(&key) {
            lru.used -= old.bytes;
        }
        while lru.used + bytes > self.capacity {
            let Some((_, victim)) = lru.entries.pop_lru() else { break };
            lru.used -= victim.bytes;
            self.evictions.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        lru.used += bytes;
        lru.entries.put(key, Entry { outputs, bytes });
    }

    pub fn summary(&self) -> CacheSummary {
        let lru = self.lru.lock();
        CacheSummary {
            entries: lru.entries.len(),
            used_bytes: lru.used,
            capacity_bytes: self.capacity,
            evictions: self.evictions.load(std::sync::atomic::Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests;
