//! The response cache (`--cache-config local,size=N` and `response_cache { enable: true }` in a model's
//! config): an LRU bounded in bytes, keyed by a hash of the model, version, inputs (name, datatype,
//! shape, contents) and the requested outputs.

use crate::error::{Error, Result};
use crate::model_api::types::Tensor;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};

/// A cache key: 128 bits from two independently seeded hashes, so a collision is not a practical concern.
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

/// Computes the key of a request to one model version.
pub fn key(model: &str, version: i64, inputs: &[Tensor], outputs: &[String]) -> Result<CacheKey> {
    let mut a = std::collections::hash_map::DefaultHasher::new();
    let mut b = std::collections::hash_map::DefaultHasher::new();
    0xa5a5_u16.hash(&mut b);
    // Inputs in name order: the same request with inputs listed differently is the same request.
    let mut sorted: Vec<&Tensor> = inputs.iter().collect();
    sorted.sort_by(|x, y| x.name.cmp(&y.name));
    for h in [&mut a, &mut b] {
        model.hash(h);
        version.hash(h);
        for t in &sorted {
            t.name.hash(h);
            t.datatype.as_str().hash(h);
            t.shape.hash(h);
            // Device buffers are copied out once to hash them; a cache is for small host results.
            t.data.to_host()?.as_ref().hash(h);
        }
        outputs.hash(h);
    }
    Ok((a.finish(), b.finish()))
}

/// A cached result and its place in the LRU order.
struct Entry {
    outputs: Vec<Tensor>,
    bytes: usize,
    /// Position in `order`; larger is more recent.
    tick: u64,
}

struct Lru {
    entries: HashMap<CacheKey, Entry>,
    /// tick -> key, oldest first.
    order: BTreeMap<u64, CacheKey>,
    next_tick: u64,
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
            lru: Mutex::new(Lru { entries: HashMap::new(), order: BTreeMap::new(), next_tick: 0, used: 0 }),
            evictions: Default::default(),
        }
    }

    /// The cached outputs for `key`, marking the entry as recently used. Tensors share their buffers
    /// with the cache, so a hit copies no data.
    pub fn lookup(&self, key: &CacheKey) -> Option<Vec<Tensor>> {
        let mut lru = self.lru.lock();
        let tick = lru.next_tick;
        let entry = lru.entries.get_mut(key)?;
        let old = std::mem::replace(&mut entry.tick, tick);
        let outputs = entry.outputs.clone();
        lru.order.remove(&old);
        lru.order.insert(tick, *key);
        lru.next_tick += 1;
        Some(outputs)
    }

    /// Stores a result, evicting the least recently used entries to make room. A result larger than the
    /// whole cache is not stored.
    pub fn insert(&self, key: CacheKey, outputs: Vec<Tensor>) {
        let bytes = entry_bytes(&outputs);
        if bytes > self.capacity {
            return;
        }
        let mut lru = self.lru.lock();
        if let Some(old) = lru.entries.remove(&key) {
            lru.order.remove(&old.tick);
            lru.used -= old.bytes;
        }
        while lru.used + bytes > self.capacity {
            let Some((_, victim)) = lru.order.pop_first() else { break };
            if let Some(e) = lru.entries.remove(&victim) {
                lru.used -= e.bytes;
                self.evictions.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let tick = lru.next_tick;
        lru.next_tick += 1;
        lru.order.insert(tick, key);
        lru.used += bytes;
        lru.entries.insert(key, Entry { outputs, bytes, tick });
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
