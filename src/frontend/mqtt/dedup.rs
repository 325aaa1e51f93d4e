//! Recognises requests delivered twice (the same correlation data, the same request id, or a DUP
//! re-delivery of the same message) and keeps their results, so a duplicate gets the stored result
//! instead of a second run. Bounded in entries and bytes; optionally journaled to a file so that a
//! restarted server still knows what it answered before it died.

use super::ledger::Outgoing;
use base64::Engine;
use bytes::Bytes;
use lru::LruCache;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Identifies a job while it runs.
pub type JobId = u64;

/// What is known about a request key.
#[derive(Debug, Clone)]
pub enum Seen {
    /// Answered: publish this again.
    Answered(Arc<Outgoing>),
    /// Still running as this job.
    Running(JobId),
    /// Started before this process restarted and never answered: it may have run, so it is not
    /// run again.
    Interrupted,
}

/// One journal line.
#[derive(Default, Serialize, Deserialize)]
struct Line {
    k: String,
    /// A start line: the request began running (nothing else is set).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    s: bool,
    #[serde(default)]
    t: String,
    #[serde(default)]
    q: u8,
    #[serde(default)]
    p: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    c: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ct: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    u: Vec<(String, String)>,
    /// A forget line: the key is no longer known (nothing else is set).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    f: bool,
}

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

impl Line {
    fn new(key: &str, m: &Outgoing) -> Line {
        Line {
            k: key.into(),
            t: m.topic.clone(),
            q: m.qos,
            p: B64.encode(&m.payload),
            c: m.correlation.as_ref().map(|c| B64.encode(c)),
            ct: m.content_type.clone(),
            u: m.user.clone(),
            ..Line::default()
        }
    }

    fn into_entry(self) -> Option<(String, Outgoing)> {
        let payload = B64.decode(&self.p).ok()?;
        let correlation = match self.c {
            Some(c) => Some(Bytes::from(B64.decode(c).ok()?)),
            None => None,
        };
        let m = Outgoing {
            topic: self.t,
            payload: payload.into(),
            qos: self.q,
            retain: false,
            correlation,
            content_type: self.ct,
            user: self.u,
        };
        Some((self.k, m))
    }
}

/// See the module documentation.
pub struct Dedup {
    lru: LruCache<String, Seen>,
    /// Payload bytes of the answered entries.
    bytes: usize,
    max_bytes: usize,
    journal: Option<Journal>,
}

struct Journal {
    path: PathBuf,
    file: File,
    /// Lines in the file; it is rewritten from the cache when this grows past twice the cache.
    lines: usize,
}

/// Results bigger than this are not kept (a duplicate of such a request runs again).
const MAX_KEPT_RESULT: usize = 256 * 1024;

impl Dedup {
    /// A cache of `entries` keys and `max_bytes` of results. With a journal path, the journal's
    /// entries are read back and new answers appended; a journal that cannot be used is reported
    /// in the returned warning and the cache works in memory only.
    pub fn new(entries: usize, max_bytes: usize, journal: Option<&Path>) -> (Dedup, Option<String>) {
        let cap = NonZeroUsize::new(entries.max(1)).unwrap_or(NonZeroUsize::MIN);
        let mut d = Dedup { lru: LruCache::new(cap), bytes: 0, max_bytes, journal: None };
        let Some(path) = journal else { return (d, None) };
        match d.open_journal(path) {
            Ok(()) => (d, None),
            Err(e) => (d, Some(format!("the MQTT journal '{}' cannot be used: {e}", path.display()))),
        }
    }

    fn open_journal(&mut self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut lines = 0;
        if let Ok(f) = File::open(path) {
            // Only the newest entries fit anyway; a journal much larger than the cache is cut short.
            for line in BufReader::new(f).lines().map_while(|l| l.ok()).take(self.lru.cap().get() * 4) {
                lines += 1;
                match serde_json::from_str::<Line>(&line) {
                    Ok(l) if l.f => {
                        self.lru.pop(&l.k);
                    }
                    Ok(l) if l.s => {
                        self.lru.push(l.k, Seen::Interrupted);
                    }
                    Ok(l) => {
                        if let Some((k, m)) = l.into_entry() {
                            self.put(k, Arc::new(m));
                        }
                    }
                    Err(_) => {}
                }
            }
        }
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        self.journal = Some(Journal { path: path.to_path_buf(), file, lines });
        Ok(())
    }

    pub fn lookup(&mut self, key: &str) -> Option<Seen> {
        self.lru.get(key).cloned()
    }

    /// `key` is being answered by `job`; journaled first, so that a crash while it runs is known
    /// after the restart.
    pub fn running(&mut self, key: String, job: JobId) {
        self.journal(&Line { k: key.clone(), s: true, ..Line::default() });
        if let Some((_, Seen::Answered(old))) = self.lru.push(key, Seen::Running(job)) {
            self.bytes = self.bytes.saturating_sub(old.payload.len());
        }
    }

    /// `key` has its result, kept for duplicates (and journaled).
    pub fn answered(&mut self, key: String, msg: Arc<Outgoing>) {
        if msg.payload.len() > MAX_KEPT_RESULT {
            self.forget(&key);
            return;
        }
        self.journal(&Line::new(&key, &msg));
        self.put(key, msg);
        self.compact();
    }

    /// Drops `key` (its job ended without a result worth keeping, e.g. `expired`): a later
    /// delivery runs again. Journaled, so a restart does not take it for interrupted.
    pub fn forget(&mut self, key: &str) {
        self.journal(&Line { k: key.to_string(), f: true, ..Line::default() });
        if let Some(Seen::Answered(old)) = self.lru.pop(key) {
            self.bytes = self.bytes.saturating_sub(old.payload.len());
        }
    }

    /// Appends a line to the journal, if there is one. The page cache keeps it across a crash of
    /// this process; a failed write only loses the protection against a re-run.
    fn journal(&mut self, line: &Line) {
        let Some(j) = self.journal.as_mut() else { return };
        if let Ok(mut text) = serde_json::to_string(line) {
            text.push('\n');
            if j.file.write_all(text.as_bytes()).is_ok() {
                j.lines += 1;
            }
        }
    }

    fn put(&mut self, key: String, msg: Arc<Outgoing>) {
        self.bytes += msg.payload.len();
        if let Some((_, Seen::Answered(old))) = self.lru.push(key, Seen::Answered(msg)) {
            self.bytes = self.bytes.saturating_sub(old.payload.len());
        }
        while self.bytes > self.max_bytes {
            match self.lru.pop_lru() {
                Some((_, Seen::Answered(old))) => self.bytes = self.bytes.saturating_sub(old.payload.len()),
                Some(_) => {}
                None => break,
            }
        }
    }

    /// Rewrites the journal from the cache once it holds twice as many lines.
    fn compact(&mut self) {
        let cap = self.lru.cap().get();
        let Some(j) = self.journal.as_mut() else { return };
        if j.lines <= cap * 2 {
            return;
        }
        let tmp = j.path.with_extension("tmp");
        let mut out = String::new();
        let mut lines = 0;
        for (k, v) in self.lru.iter().rev() {
            let line = match v {
                Seen::Answered(m) => Line::new(k, m),
                // Still running, or interrupted by a crash: kept as started.
                Seen::Running(_) | Seen::Interrupted => Line { k: k.clone(), s: true, ..Line::default() },
            };
            if let Ok(l) = serde_json::to_string(&line) {
                out.push_str(&l);
                out.push('\n');
                lines += 1;
            }
        }
        let rewritten = std::fs::write(&tmp, out)
            .and_then(|()| std::fs::rename(&tmp, &j.path))
            .and_then(|()| std::fs::OpenOptions::new().append(true).open(&j.path));
        if let Ok(file) = rewritten {
            j.file = file;
            j.lines = lines;
        }
    }
}

#[cfg(test)]
mod tests;
