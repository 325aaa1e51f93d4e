//! The rate limiter (`--rate-limit execution_count`): an instance whose group declares
//! `rate_limiter { resources [...] priority }` executes only while it holds its resources. Pools are as
//! large as the largest single need among loaded instances, or as `--rate-limit-resource` sets them.
//! When several instances wait, the one with the lowest `priority` value (then the longest waiting)
//! whose needs fit goes first.

use crate::error::{Error, Result};
use crate::model_api::{ExecRequest, ExecResult, ModelInstance};
use parking_lot::{Condvar, Mutex};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// A resource pool: global, or per device (`None` is a CPU instance's "device").
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceKey {
    pub name: String,
    /// `None` for global resources, shared by every device.
    pub device: Option<Option<i32>>,
}

/// What one instance needs to execute.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Needs {
    pub resources: Vec<(ResourceKey, u32)>,
    /// Lower runs first (0 is treated as 1).
    pub priority: u32,
}

/// Parses `--rate-limit` (`off` or `execution_count`).
pub fn parse_mode(v: &str) -> Result<bool> {
    match v {
        "off" => Ok(false),
        "execution_count" => Ok(true),
        _ => Err(Error::invalid(format!("--rate-limit '{v}' must be 'off' or 'execution_count'"))),
    }
}

/// Parses `--rate-limit-resource <name>:<count>[:<device>]`; without a device the count applies to
/// every device and to global pools.
pub fn parse_resource(v: &str) -> Result<(String, u32, Option<i32>)> {
    let bad =
        || Error::invalid(format!("--rate-limit-resource '{v}' must be '<name>:<count>' or '<name>:<count>:<device>'"));
    let mut parts = v.split(':');
    let name = parts.next().filter(|n| !n.is_empty()).ok_or_else(bad)?;
    let count = parts.next().and_then(|c| c.parse::<u32>().ok()).ok_or_else(bad)?;
    let device = match parts.next() {
        None => None,
        Some(d) => Some(d.parse::<i32>().map_err(|_| bad())?),
    };
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok((name.to_string(), count, device))
}

/// The pools and the waiting instances; pure, so the ordering rules are unit-tested without threads.
#[derive(Debug, Default)]
pub struct Pools {
    /// Sizes set on the command line: (name, device) -> count; device `None` applies to all.
    fixed: HashMap<(String, Option<i32>), u32>,
    /// Pool sizes.
    size: HashMap<ResourceKey, u32>,
    /// Units in use.
    used: HashMap<ResourceKey, u32>,
    /// Waiting instances by (priority, arrival).
    waiting: BTreeMap<(u32, u64), Needs>,
    next: u64,
}

impl Pools {
    pub fn new(fixed: &[(String, u32, Option<i32>)]) -> Self {
        Pools { fixed: fixed.iter().map(|(n, c, d)| ((n.clone(), *d), *c)).collect(), ..Default::default() }
    }

    fn fixed_size(&self, key: &ResourceKey) -> Option<u32> {
        let device = key.device.flatten();
        self.fixed.get(&(key.name.clone(), device)).or_else(|| self.fixed.get(&(key.name.clone(), None))).copied()
    }

    /// Makes room for an instance's needs: pools grow to the largest single need unless fixed on the
    /// command line, in which case a need beyond the fixed size can never run and is an error.
    pub fn register(&mut self, needs: &Needs) -> Result<()> {
        for (key, count) in &needs.resources {
            match self.fixed_size(key) {
                Some(fixed) if *count > fixed => {
                    return Err(Error::invalid(format!(
                        "rate limiter: an instance needs {count} of resource '{}' but --rate-limit-resource \
                         makes only {fixed} available",
                        key.name
                    )))
                }
                Some(fixed) => {
                    self.size.insert(key.clone(), fixed);
                }
                None => {
                    let s = self.size.entry(key.clone()).or_insert(0);
                    *s = (*s).max(*count);
                }
            }
        }
        Ok(())
    }

    fn fits(&self, needs: &Needs) -> bool {
        needs
            .resources
            .iter()
            .all(|(k, c)| self.used.get(k).copied().unwrap_or(0) + c <= self.size.get(k).copied().unwrap_or(0))
    }

    /// Queues a waiter; returns its ticket.
    pub fn enqueue(&mut self, needs: Needs) -> (u32, u64) {
        let ticket = (needs.priority.max(1), self.next);
        self.next += 1;
        self.waiting.insert(ticket, needs);
        ticket
    }

    /// Takes the resources for `ticket` if it is the first waiter, in priority order, whose needs fit.
    pub fn try_acquire(&mut self, ticket: (u32, u64)) -> bool {
        let first = self.waiting.iter().find(|(_, n)| self.fits(n)).map(|(t, _)| *t);
        if first != Some(ticket) {
            return false;
        }
        if let Some(needs) = self.waiting.remove(&ticket) {
            for (k, c) in needs.resources {
                *self.used.entry(k).or_insert(0) += c;
            }
        }
        true
    }

    pub fn release(&mut self, needs: &Needs) {
        for (k, c) in &needs.resources {
            if let Some(u) = self.used.get_mut(k) {
                *u = u.saturating_sub(*c);
            }
        }
    }
}

/// The server-wide rate limiter.
#[derive(Default)]
pub struct RateLimiter {
    pools: Mutex<Pools>,
    changed: Condvar,
}

impl RateLimiter {
    pub fn new(fixed: &[(String, u32, Option<i32>)]) -> Self {
        RateLimiter { pools: Mutex::new(Pools::new(fixed)), changed: Condvar::new() }
    }

    pub fn register(&self, needs: &Needs) -> Result<()> {
        self.pools.lock().register(needs)?;
        self.changed.notify_all();
        Ok(())
    }

    /// Blocks the calling instance thread until its resources are free, then holds them.
    fn acquire(&self, needs: &Needs) {
        let mut pools = self.pools.lock();
        let ticket = pools.enqueue(needs.clone());
        while !pools.try_acquire(ticket) {
            self.changed.wait(&mut pools);
        }
        // Another waiter may fit in what is left.
        self.changed.notify_all();
    }

    fn release(&self, needs: &Needs) {
        self.pools.lock().release(needs);
        self.changed.notify_all();
    }
}

/// An instance that holds its resources while it executes.
pub struct Limited {
    pub inner: Box<dyn ModelInstance>,
    pub limiter: Arc<RateLimiter>,
    pub needs: Needs,
}

impl ModelInstance for Limited {
    fn execute(&mut self, req: &ExecRequest) -> Result<ExecResult> {
        self.limiter.acquire(&self.needs);
        let result = crate::core::scheduler::execute(&mut *self.inner, req);
        self.limiter.release(&self.needs);
        result
    }

    fn takes_request_lists(&self) -> bool {
        self.inner.takes_request_lists()
    }

    fn readiness(&self) -> Option<Arc<dyn crate::model_api::Readiness>> {
        self.inner.readiness()
    }

    fn execute_list(&mut self, reqs: &[&ExecRequest]) -> Vec<Result<ExecResult>> {
        self.limiter.acquire(&self.needs);
        let results = crate::core::scheduler::execute_list(&mut *self.inner, reqs);
        self.limiter.release(&self.needs);
        results
    }
}

#[cfg(test)]
mod tests;
