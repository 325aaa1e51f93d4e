//! The response cache in Redis (`--cache-config redis,host=...,port=...`), so the servers of a fleet
//! share their results: the same keys as the local cache (a 128-bit hash of model, version, inputs and
//! requested outputs), values in a versioned binary layout ([`value`]). Redis being down or slow never
//! fails or holds up a request: each call waits at most `socket_timeout` (50 ms by default) and a
//! failure is a miss; inserts run as tasks of their own after the response has gone. One connection,
//! pipelined, reopened in the background when it breaks (with a growing pause while Redis stays away);
//! the log says when Redis goes away and when it is back, not once per request.

mod link;
mod settings;
pub mod value;

pub use link::{probe, ConnectError};
pub use settings::{RedisSettings, RedisTls};

use super::CacheKey;
use crate::model_api::types::Tensor;
use parking_lot::Mutex;
use redis::aio::MultiplexedConnection;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Inserts under way at once; past this a result is not stored (Redis is not keeping up).
const MAX_INSERTS_IN_FLIGHT: usize = 256;
/// Calls that ran out of time in a row before the connection is taken for dead.
const TIMEOUTS_TO_DOWN: u32 = 3;
/// The pause after a failed connection attempt, doubling up to [`MAX_BACKOFF`] while Redis stays away.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// At most one warning per this long about Redis being away or refusing a call.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// The Redis cache: its settings, the connection, and what is known of Redis's health.
pub struct RedisCache {
    settings: RedisSettings,
    /// The open connection and its number: a call that fails drops only the connection it used.
    conn: Mutex<Option<(u64, MultiplexedConnection)>>,
    /// Numbers the connections.
    opened: AtomicU64,
    /// Whether a connection attempt is under way (one at a time).
    connecting: AtomicBool,
    /// Bumped each time an attempt ends; calls waiting for a connection watch it.
    attempts: tokio::sync::watch::Sender<u64>,
    health: Mutex<Health>,
    /// Inserts spawned and not finished.
    inserts: AtomicUsize,
}

/// What the calls have seen of Redis lately.
struct Health {
    /// Whether Redis answered the last call; the log says the changes.
    up: bool,
    /// Whether "unreachable" was logged since Redis was last up, so "back" follows only that.
    said_down: bool,
    /// When a warning was last logged.
    last_warning: Option<Instant>,
    /// Calls that ran out of time in a row.
    timeouts: u32,
    /// No connection attempt before then: while Redis is away, calls are misses at once.
    retry_at: Option<Instant>,
    /// The pause after the next failed attempt.
    backoff: Duration,
}

/// Why a call got no answer.
enum Failure {
    /// No connection (the attempt failed, or Redis is known to be away): already accounted for.
    Down,
    /// The connection numbered so broke.
    Lost(u64, String),
    /// No answer within `socket_timeout`.
    Timeout,
    /// Redis answered with an error (out of memory, a permission missing).
    Answer(String),
}

impl std::fmt::Debug for RedisCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCache").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl RedisCache {
    /// A cache on `settings`; `reachable` is what the start-up probe found (when it found Redis away
    /// it said so, and the log's next word is that Redis is back).
    pub fn new(settings: RedisSettings, reachable: bool) -> Arc<RedisCache> {
        Arc::new(RedisCache {
            settings,
            conn: Mutex::new(None),
            opened: AtomicU64::new(0),
            connecting: AtomicBool::new(false),
            attempts: tokio::sync::watch::Sender::new(0),
            health: Mutex::new(Health {
                up: reachable,
                said_down: !reachable,
                last_warning: (!reachable).then(Instant::now),
                timeouts: 0,
                retry_at: None,
                backoff: FIRST_BACKOFF,
            }),
            inserts: AtomicUsize::new(0),
        })
    }

    pub fn settings(&self) -> &RedisSettings {
        &self.settings
    }

    /// Connects in the background now, when on a runtime, so the first request finds the connection.
    pub fn start(self: &Arc<Self>) {
        self.ensure_connecting();
    }

    /// The stored result for `key`; Redis away, slow, or holding something unreadable is a miss.
    pub async fn lookup(self: &Arc<Self>, key: &CacheKey) -> Option<Vec<Tensor>> {
        let stored: Option<Vec<u8>> = self.call(redis::cmd("GET").arg(value::key(key)).clone()).await?;
        match value::decode(&stored?) {
            Ok(outputs) => Some(outputs),
            Err(e) => {
                tracing::debug!("Redis cache: the entry {} is a miss: {}", value::key(key), e.message);
                None
            }
        }
    }

    /// Stores a result in a task of its own: the response does not wait for Redis. A result packed
    /// larger than `max_entry_bytes` is not stored, nor any while Redis is away or behind.
    pub fn insert(self: &Arc<Self>, key: CacheKey, outputs: Vec<Tensor>) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        if self.backing_off() {
            return;
        }
        if self.inserts.fetch_add(1, Ordering::AcqRel) >= MAX_INSERTS_IN_FLIGHT {
            self.inserts.fetch_sub(1, Ordering::AcqRel);
            tracing::debug!("Redis cache: {MAX_INSERTS_IN_FLIGHT} inserts are under way; a result is not stored.");
            return;
        }
        let me = self.clone();
        rt.spawn(async move {
            me.store(&key, &outputs).await;
            me.inserts.fetch_sub(1, Ordering::AcqRel);
        });
    }

    async fn store(self: &Arc<Self>, key: &CacheKey, outputs: &[Tensor]) {
        let stored = match value::encode(outputs) {
            Ok(v) => v,
            Err(e) => return tracing::debug!("Redis cache: a result is not stored: {}", e.message),
        };
        if stored.len() > self.settings.max_entry_bytes {
            return tracing::debug!(
                "Redis cache: a result of {} bytes is not stored (max_entry_bytes={}).",
                stored.len(),
                self.settings.max_entry_bytes
            );
        }
        let mut cmd = redis::cmd("SET");
        cmd.arg(value::key(key)).arg(stored);
        if let Some(ttl) = self.settings.ttl {
            cmd.arg("EX").arg(ttl.as_secs());
        }
        let _: Option<()> = self.call(cmd).await;
    }

    /// Runs one command within `socket_timeout`, noting how Redis did; `None` when it did not answer.
    async fn call<T: redis::FromRedisValue>(self: &Arc<Self>, cmd: redis::Cmd) -> Option<T> {
        let attempt = async {
            let (number, mut conn) = self.connection().await?;
            cmd.query_async::<T>(&mut conn).await.map_err(|e| match e.is_io_error() || e.is_unrecoverable_error() {
                true => Failure::Lost(number, e.to_string()),
                false => Failure::Answer(e.to_string()),
            })
        };
        match link::within(self.settings.socket_timeout, attempt).await.unwrap_or(Err(Failure::Timeout)) {
            Ok(v) => {
                self.note_answer();
                Some(v)
            }
            Err(f) => {
                self.note_failure(f);
                None
            }
        }
    }

    /// The open connection, or the outcome of the attempt this call starts or joins.
    async fn connection(self: &Arc<Self>) -> Result<(u64, MultiplexedConnection), Failure> {
        if let Some(c) = self.conn.lock().clone() {
            return Ok(c);
        }
        if self.backing_off() {
            return Err(Failure::Down);
        }
        let mut ended = self.attempts.subscribe();
        self.ensure_connecting();
        ended.changed().await.map_err(|_| Failure::Down)?;
        self.conn.lock().clone().ok_or(Failure::Down)
    }

    /// Starts a connection attempt unless one is under way (or there is no runtime to run it on).
    fn ensure_connecting(self: &Arc<Self>) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        if self.connecting.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        rt.spawn(async move {
            if me.conn.lock().is_none() {
                match link::open(&me.settings).await {
                    Ok(conn) => {
                        let number = me.opened.fetch_add(1, Ordering::Relaxed);
                        *me.conn.lock() = Some((number, conn));
                        me.note_answer();
                    }
                    Err(e) => me.note_down(&e.to_string()),
                }
            }
            me.connecting.store(false, Ordering::Release);
            me.attempts.send_modify(|n| *n = n.wrapping_add(1));
        });
    }

    /// Whether Redis was found away so recently that no attempt is due.
    fn backing_off(&self) -> bool {
        self.health.lock().retry_at.is_some_and(|t| Instant::now() < t)
    }

    /// Redis answered: it is up, and a connection attempt that fails next pauses briefly.
    fn note_answer(&self) {
        let mut h = self.health.lock();
        h.timeouts = 0;
        h.retry_at = None;
        h.backoff = FIRST_BACKOFF;
        if !h.up {
            h.up = true;
            if std::mem::take(&mut h.said_down) {
                tracing::info!(
                    "The Redis cache at {} answers again; cached results are served from it.",
                    self.settings.address()
                );
            }
        }
    }

    fn note_failure(&self, f: Failure) {
        match f {
            Failure::Down => {}
            Failure::Lost(number, reason) => {
                self.drop_connection(Some(number));
                self.note_down(&reason);
            }
            Failure::Timeout => {
                let timeouts = {
                    let mut h = self.health.lock();
                    h.timeouts += 1;
                    h.timeouts
                };
                if timeouts >= TIMEOUTS_TO_DOWN {
                    self.drop_connection(None);
                    let limit = self.settings.socket_timeout.unwrap_or_default();
                    self.note_down(&format!("{timeouts} calls in a row got no answer within {limit:?}"));
                }
            }
            Failure::Answer(reason) => {
                let mut h = self.health.lock();
                if Self::may_warn(&mut h) {
                    tracing::warn!("The Redis cache at {} refused a call: {reason}.", self.settings.address());
                }
            }
        }
    }

    /// Forgets the connection (the one numbered so, or whichever is open), so the next call reconnects.
    fn drop_connection(&self, number: Option<u64>) {
        let mut conn = self.conn.lock();
        if number.is_none() || conn.as_ref().map(|(n, _)| *n) == number {
            *conn = None;
        }
    }

    /// Redis is away: pause connection attempts, and say so once (at most once a minute).
    fn note_down(&self, reason: &str) {
        let mut h = self.health.lock();
        h.timeouts = 0;
        h.retry_at = Some(Instant::now() + h.backoff);
        h.backoff = (h.backoff * 2).min(MAX_BACKOFF);
        let was_up = std::mem::replace(&mut h.up, false);
        if was_up && Self::may_warn(&mut h) {
            h.said_down = true;
            tracing::warn!(
                "The Redis cache at {} is unreachable ({reason}); requests run without it, as misses, until it \
                 answers again.",
                self.settings.address()
            );
        } else {
            tracing::debug!("Redis cache at {}: {reason}.", self.settings.address());
        }
    }

    fn may_warn(h: &mut Health) -> bool {
        let now = Instant::now();
        let due = h.last_warning.is_none_or(|t| now.duration_since(t) >= WARN_EVERY);
        if due {
            h.last_warning = Some(now);
        }
        due
    }
}

#[cfg(test)]
mod tests;
