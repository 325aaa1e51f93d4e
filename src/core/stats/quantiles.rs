//! Streaming quantiles over a sliding time window, for the latency summaries of
//! `--metrics-config summary_latencies=true`. The estimator is CKMS (Cormode, Korn, Muthukrishnan,
//! Srivastava, "Effective computation of biased quantiles over data streams", ICDE 2005) with targeted
//! quantiles, the one prometheus-cpp's `Summary` uses in tritonserver; the window is a ring of
//! estimators that each see every observation and are reset in turn, so a quantile covers the last
//! `max_age` (tritonserver's defaults: 60 s in 5 steps). Written here because no small crate does both
//! without a registry around it.

use std::time::{Duration, Instant};

/// A quantile to estimate and the rank error allowed for it (`0.9:0.01`: the 90th percentile within
/// one percent of rank).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Target {
    pub quantile: f64,
    pub error: f64,
}

/// One retained sample: its value, `g` (ranks it covers beyond the previous sample) and `delta` (its
/// rank uncertainty).
#[derive(Debug, Clone, Copy)]
struct Item {
    value: f64,
    g: u64,
    delta: u64,
}

/// Observations are buffered and merged in sorted batches of this many, as prometheus-cpp does.
const BUFFER: usize = 500;

/// The CKMS estimator of a stream's targeted quantiles.
#[derive(Debug, Clone)]
pub struct Ckms {
    targets: Vec<Target>,
    samples: Vec<Item>,
    buffer: Vec<f64>,
    count: u64,
}

impl Ckms {
    pub fn new(targets: &[Target]) -> Self {
        Ckms { targets: targets.to_vec(), samples: Vec::new(), buffer: Vec::with_capacity(BUFFER), count: 0 }
    }

    pub fn insert(&mut self, value: f64) {
        self.buffer.push(value);
        if self.buffer.len() >= BUFFER {
            self.flush();
        }
    }

    /// The estimate of quantile `q`; NaN when nothing was observed.
    pub fn get(&mut self, q: f64) -> f64 {
        self.flush();
        let Some(last) = self.samples.last() else { return f64::NAN };
        let rank = (q * self.count as f64).ceil();
        let bound = rank + (self.allowed(rank) / 2.0).ceil();
        let mut r = 0.0;
        for pair in self.samples.windows(2) {
            let (prev, cur) = (pair[0], pair[1]);
            r += prev.g as f64;
            if r + cur.g as f64 + cur.delta as f64 > bound {
                return prev.value;
            }
        }
        last.value
    }

    pub fn reset(&mut self) {
        self.samples.clear();
        self.buffer.clear();
        self.count = 0;
    }

    /// The rank error the targets allow at rank `r`: the least over the targets, each linear in the
    /// distance from its quantile's rank.
    fn allowed(&self, r: f64) -> f64 {
        let n = self.count as f64;
        let mut least = n + 1.0;
        for t in &self.targets {
            let e = if r <= t.quantile * n {
                2.0 * t.error / (1.0 - t.quantile) * (n - r)
            } else {
                2.0 * t.error / t.quantile * r
            };
            least = least.min(e);
        }
        least
    }

    /// Merges the buffer into the samples, then compresses them.
    fn flush(&mut self) {
        if self.buffer.is_empty() {
            return;
        }
        let mut batch = std::mem::take(&mut self.buffer);
        batch.sort_by(f64::total_cmp);
        let mut merged = Vec::with_capacity(self.samples.len() + batch.len());
        let (mut i, mut r) = (0, 0.0);
        for v in batch.drain(..) {
            while i < self.samples.len() && self.samples[i].value < v {
                r += self.samples[i].g as f64;
                merged.push(self.samples[i]);
                i += 1;
            }
            // The extremes are known exactly; a sample between others may be off by what is allowed.
            let inner = !merged.is_empty() && i < self.samples.len();
            let delta = if inner { (self.allowed(r).floor() as i64 - 1).max(0) as u64 } else { 0 };
            merged.push(Item { value: v, g: 1, delta });
            self.count += 1;
            // The next value of the batch ranks above this one.
            r += 1.0;
        }
        merged.extend_from_slice(&self.samples[i..]);
        self.samples = merged;
        self.buffer = batch;
        self.compress();
    }

    /// Folds each sample into its successor where the error allowed covers both, at either end of the
    /// ranks the merged sample spans (the paper checks the lower end only; with targeted quantiles that
    /// lets the estimates drift past their bound on some streams).
    fn compress(&mut self) {
        let samples = std::mem::take(&mut self.samples);
        let mut out: Vec<Item> = Vec::with_capacity(samples.len());
        let mut rest = samples.into_iter();
        let Some(mut cur) = rest.next() else { return };
        let mut r = 0.0;
        for mut next in rest {
            let span = (cur.g + next.g) as f64;
            if (cur.g + next.g + next.delta) as f64 <= self.allowed(r).min(self.allowed(r + span)) {
                next.g += cur.g;
            } else {
                r += cur.g as f64;
                out.push(cur);
            }
            cur = next;
        }
        out.push(cur);
        self.samples = out;
    }
}

/// Quantiles of the observations of the last `max_age`: `buckets` estimators, each reset after
/// `max_age` in turn; the oldest one answers.
#[derive(Debug, Clone)]
pub struct TimeWindow {
    ring: Vec<Ckms>,
    current: usize,
    step: Duration,
    rotated: Instant,
}

impl TimeWindow {
    pub fn new(targets: &[Target], max_age: Duration, buckets: usize) -> Self {
        let buckets = buckets.max(1);
        TimeWindow {
            ring: (0..buckets).map(|_| Ckms::new(targets)).collect(),
            current: 0,
            step: max_age / buckets as u32,
            rotated: Instant::now(),
        }
    }

    pub fn insert(&mut self, value: f64, now: Instant) {
        self.rotate(now);
        for c in &mut self.ring {
            c.insert(value);
        }
    }

    pub fn get(&mut self, q: f64, now: Instant) -> f64 {
        self.rotate(now);
        self.ring[self.current].get(q)
    }

    fn rotate(&mut self, now: Instant) {
        if self.step.is_zero() {
            return;
        }
        let mut steps = 0;
        while now.saturating_duration_since(self.rotated) > self.step {
            self.ring[self.current].reset();
            self.current = (self.current + 1) % self.ring.len();
            self.rotated += self.step;
            steps += 1;
            if steps > self.ring.len() {
                // Idle for longer than the whole window: everything is reset, start the clock afresh.
                self.rotated = now;
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests;
