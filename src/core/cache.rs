//! The response cache (`--cache-config local,size=N` and `response_cache { enable: true }` in a model's
//! config): an LRU bounded in bytes, keyed by a hash of the model, version, inputs (name, datatype,
//! shape, contents) and the requested outputs. Instead of the built-in LRU, Redis may hold the entries
//! (`--cache-config redis,...`, [`redis`]), shared by every server pointed at it, or a TRITONCACHE
//! library (`--cache-directory`, [`external`]).

use crate::error::{Error, Result};
use crate::model_api::types::Tensor;
use parking_lot::Mutex;

pub mod external;
pub mod redis;
pub use external::ExternalCache;
pub use redis::RedisCache;

/// A cache key: a 128-bit hash, so a collision is not a practical concern.
pub type CacheKey = (u64, u64);

/// The cache `--cache-config` selects and its settings, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheSpec {
    pub name: String,
    pub settings: Vec<(String, String)>,
}

impl CacheSpec {
    /// The settings as tritonserver hands them to `TRITONCACHE_CacheInitialize`: a JSON object of
    /// strings (`{"size":"1048576"}`).
    pub fn config_json(&self) -> String {
        let map: serde_json::Map<String, serde_json::Value> =
            self.settings.iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect();
        serde_json::Value::Object(map).to_string()
    }

    /// The built-in local cache's size in bytes (`size`, its one setting); `None` for 0, which
    /// disables it.
    pub fn local_size(&self) -> Result<Option<usize>> {
        let mut size = None;
        for (k, v) in &self.settings {
            if k != "size" {
                return Err(Error::invalid(format!("--cache-config: unknown setting '{k}' for the local cache")));
            }
            size = Some(
                v.trim()
                    .parse::<usize>()
                    .map_err(|_| Error::invalid(format!("--cache-config: size '{v}' must be a number of bytes")))?,
            );
        }
        Ok(size.filter(|&s| s > 0))
    }
}

/// Parses `--cache-config` values, `<cache>,<setting>=<value>`: `local` is the built-in LRU (its
/// setting is `size`), `redis` the built-in Redis cache ([`redis::RedisSettings`]); any other name is a
/// cache library (`--cache-directory`), whose settings are its own. One cache serves the server, as in tritonserver. `None` when no cache is configured.
pub fn parse_cache_config(values: &[String]) -> Result<Option<CacheSpec>> {
    let mut spec: Option<CacheSpec> = None;
    for v in values {
        let bad = || {
            Error::invalid(format!(
                "--cache-config '{v}' must be '<cache>,<setting>=<value>', e.g. 'local,size=1048576'"
            ))
        };
        let (cache, setting) = v.split_once(',').ok_or_else(bad)?;
        let (key, value) = setting.split_once('=').ok_or_else(bad)?;
        if cache.is_empty() || cache.contains(['/', '\0']) || cache == "." || cache == ".." {
            return Err(Error::invalid(format!("--cache-config: '{cache}' is not a cache name")));
        }
        let s = spec.get_or_insert_with(|| CacheSpec { name: cache.to_string(), settings: Vec::new() });
        if s.name != cache {
            return Err(Error::invalid(format!(
                "--cache-config names two caches, '{}' and '{cache}'; a server uses one",
                s.name
            )));
        }
        s.settings.push((key.to_string(), value.to_string()));
    }
    Ok(spec)
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

/// The response cache shared by every model that enables it: the built-in LRU, Redis, or a library.
pub struct ResponseCache {
    capacity: usize,
    lru: Mutex<Lru>,
    evictions: std::sync::atomic::AtomicU64,
    external: Option<std::sync::Arc<dyn ExternalCache>>,
    redis: Option<std::sync::Arc<RedisCache>>,
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
            external: None,
            redis: None,
        }
    }

    /// A cache whose entries a library holds.
    pub fn external(cache: std::sync::Arc<dyn ExternalCache>) -> Self {
        ResponseCache { external: Some(cache), ..ResponseCache::new(0) }
    }

    /// A cache whose entries Redis holds; it starts connecting now (when on a runtime).
    pub fn redis(cache: std::sync::Arc<RedisCache>) -> Self {
        cache.start();
        ResponseCache { redis: Some(cache), ..ResponseCache::new(0) }
    }

    /// A library's entry for `key`: a failed look-up or an entry that does not unpack is a miss,
    /// said at debug level (tritonserver says as much at its verbose level).
    fn lookup_external(cache: &dyn ExternalCache, key: &CacheKey) -> Option<Vec<Tensor>> {
        let found = cache.lookup(&external::key_string(key)).and_then(|b| match b.as_deref() {
            None => Ok(None),
            Some([one]) => external::unpack(one).map(Some),
            Some(more) => Err(Error::internal(format!("the entry holds {} responses, not one", more.len()))),
        });
        found.unwrap_or_else(|e| {
            tracing::debug!("Response cache '{}': the look-up is a miss: {}", cache.name(), e.message);
            None
        })
    }

    /// The cached outputs for `key`. Redis is asked within its `socket_timeout`; a failure is a miss.
    pub async fn lookup(&self, key: &CacheKey) -> Option<Vec<Tensor>> {
        match &self.redis {
            Some(redis) => redis.lookup(key).await,
            None => self.lookup_now(key),
        }
    }

    /// [`Self::lookup`] in the built-in LRU or a library, marking the entry as recently used. Tensors
    /// share their buffers with the LRU, so a hit copies no data.
    pub fn lookup_now(&self, key: &CacheKey) -> Option<Vec<Tensor>> {
        if let Some(cache) = &self.external {
            return Self::lookup_external(cache.as_ref(), key);
        }
        self.lru.lock().entries.get(key).map(|e| e.outputs.clone())
    }

    /// Stores a result, evicting the least recently used entries to make room. A result larger than the
    /// whole cache is not stored. Redis stores it in a task of its own, so the caller does not wait.
    pub fn insert(&self, key: CacheKey, outputs: Vec<Tensor>) {
        if let Some(redis) = &self.redis {
            return redis.insert(key, outputs);
        }
        if let Some(cache) = &self.external {
            // A result that is not cached is only a later miss: the request itself succeeded.
            if let Err(e) = external::pack(&outputs).and_then(|b| cache.insert(&external::key_string(&key), vec![b])) {
                tracing::warn!("Response cache '{}' did not store a result: {}", cache.name(), e.message);
            }
            return;
        }
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
