//! Host policies (`--host-policy=<name>,<setting>=<value>`): the CPU cores a policy names, and pinning
//! the calling thread to them with `sched_setaffinity`; and the scheduling policy of the threads a
//! request passes through ([`batch_current_thread`]). This module talks to the C library.
#![allow(unsafe_code)]

use crate::error::{Error, Result};
use std::collections::BTreeMap;

/// The cores of each host policy, by policy name.
pub type HostPolicies = BTreeMap<String, Vec<usize>>;

/// Reads `--host-policy` values (`<name>,cpu-cores=0-3,5` or `<name>,numa-node=<N>`; a policy may be
/// given more than once, its cores adding up). Other settings are refused: tritonrs applies no other.
pub fn parse_host_policies(values: &[String]) -> Result<HostPolicies> {
    let mut out = HostPolicies::new();
    for v in values {
        let bad = |why: String| Error::invalid(format!("--host-policy '{v}': {why}"));
        let (name, setting) = v.split_once(',').ok_or_else(|| bad("expected <name>,<setting>=<value>".into()))?;
        let (key, value) = setting.split_once('=').ok_or_else(|| bad("expected <setting>=<value>".into()))?;
        if name.is_empty() {
            return Err(bad("the policy has no name".into()));
        }
        let cores = match key {
            "cpu-cores" => parse_cpu_list(value).map_err(bad)?,
            "numa-node" => numa_cores(value).map_err(bad)?,
            other => {
                return Err(bad(format!("unknown setting '{other}'; tritonrs applies cpu-cores and numa-node")));
            }
        };
        let entry = out.entry(name.to_string()).or_default();
        entry.extend(cores);
        entry.sort_unstable();
        entry.dedup();
    }
    Ok(out)
}

/// The largest core number accepted: the size of the kernel's `cpu_set_t`.
const MAX_CORES: usize = libc::CPU_SETSIZE as usize;

/// Parses a Linux CPU list (`0-3,5`), as in `/sys/devices/system/node/node0/cpulist`.
pub fn parse_cpu_list(list: &str) -> std::result::Result<Vec<usize>, String> {
    let mut cores = Vec::new();
    for part in list.split(',').map(str::trim) {
        let num = |s: &str| {
            s.parse::<usize>()
                .ok()
                .filter(|&n| n < MAX_CORES)
                .ok_or_else(|| format!("'{s}' is not a core number below {MAX_CORES}"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("the core range '{part}' runs backwards"));
                }
                cores.extend(a..=b);
            }
            None => cores.push(num(part)?),
        }
    }
    Ok(cores)
}

/// The cores of NUMA node `node`, from sysfs.
fn numa_cores(node: &str) -> std::result::Result<Vec<usize>, String> {
    let n: u32 = node.parse().map_err(|_| format!("'{node}' is not a NUMA node number"))?;
    let path = format!("/sys/devices/system/node/node{n}/cpulist");
    let list = std::fs::read_to_string(&path).map_err(|e| format!("cannot read '{path}': {e}"))?;
    parse_cpu_list(list.trim())
}

/// Pins the calling thread to `cores`.
pub fn pin_current_thread(cores: &[usize]) -> Result<()> {
    // SAFETY: cpu_set_t is a plain bit array for which all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cores.iter().filter(|&&c| c < MAX_CORES) {
        // SAFETY: `c` is below CPU_SETSIZE, the set's size, and `set` is a valid cpu_set_t.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: pid 0 is the calling thread; `set` is a valid cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(Error::internal(format!(
            "cannot pin the thread to cores {cores:?}: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

/// Gives the calling thread the SCHED_BATCH policy: woken, it does not preempt the thread running on
/// its core, but waits for that thread to block or use up its slice; its share of the CPU, its nice
/// value and where the kernel wakes it (an idle core first) stay as under SCHED_OTHER. For the I/O
/// workers and the instance threads, which wake each other once or twice a request: when they share a
/// core (a busy or small machine) each wake-up otherwise switched to the woken thread at once, so an
/// I/O worker and an instance thread alternated request by request (two context switches each);
/// without the preemption each runs through what it has queued first. Threads it starts inherit the
/// policy.
pub fn batch_current_thread() -> Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param for the duration of the call,
    // with the priority 0 that SCHED_BATCH requires.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    if rc != 0 {
        return Err(Error::internal(format!(
            "cannot give the thread the SCHED_BATCH policy: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

/// The calling thread's cores and scheduling policy, taken before any are changed, to give back to a
/// thread that inherited changed ones: a thread starts with the cores and policy of the thread that
/// created it, so a tokio blocking thread spawned by a pinned SCHED_BATCH I/O worker (a model load)
/// would carry that worker's setting into the model's threads.
#[derive(Clone, Copy)]
pub struct ThreadDefaults {
    cores: libc::cpu_set_t,
    policy: libc::c_int,
    param: libc::sched_param,
}

impl ThreadDefaults {
    /// The calling thread's cores and policy now.
    pub fn of_current_thread() -> Result<Self> {
        // SAFETY: cpu_set_t is a plain bit array for which all zeroes is the empty set.
        let mut cores: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: pid 0 is the calling thread; `cores` is a valid, writable cpu_set_t of the size passed.
        let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut cores) };
        if rc != 0 {
            return Err(Error::internal(format!(
                "cannot read the thread's cores: {}",
                std::io::Error::last_os_error()
            )));
        }
        let mut param = libc::sched_param { sched_priority: 0 };
        // SAFETY: pid 0 is the calling thread; `param` is a valid, writable sched_param.
        let rc = unsafe { libc::sched_getparam(0, &mut param) };
        // SAFETY: pid 0 is the calling thread; the call takes no pointer.
        let policy = unsafe { libc::sched_getscheduler(0) };
        if rc != 0 || policy < 0 {
            return Err(Error::internal(format!(
                "cannot read the thread's scheduling policy: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(ThreadDefaults { cores, policy, param })
    }

    /// Gives the calling thread these cores and this policy back.
    pub fn restore_on_current_thread(&self) -> Result<()> {
        // SAFETY: pid 0 is the calling thread; `self.cores` is a valid cpu_set_t of the size passed.
        let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.cores) };
        if rc != 0 {
            return Err(Error::internal(format!(
                "cannot give the thread its cores back: {}",
                std::io::Error::last_os_error()
            )));
        }
        // SAFETY: pid 0 is the calling thread; `self.param` is a valid sched_param read with this policy.
        let rc = unsafe { libc::sched_setscheduler(0, self.policy, &self.param) };
        if rc != 0 {
            return Err(Error::internal(format!(
                "cannot give the thread its scheduling policy back: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(())
    }

    /// How many cores these are.
    #[cfg(test)]
    fn core_count(&self) -> u32 {
        // SAFETY: `self.cores` is a valid cpu_set_t.
        unsafe { libc::CPU_COUNT(&self.cores) as u32 }
    }
}

#[cfg(test)]
mod tests;
