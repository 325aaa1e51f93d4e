//! Flags of how models load and where their instances run: load retries, the GPU memory limit on
//! loads, and host policies that pin instance threads (tritonserver's names and value syntax).

use clap::Args;

#[derive(Debug, Clone, Default, Args)]
pub struct LoadingArgs {
    /// How many times a model version whose load fails is loaded again before it is UNAVAILABLE
    /// (tritonserver's default 0: no retry).
    #[arg(long, env = "TRITONRS_MODEL_LOAD_RETRY_COUNT", default_value_t = 0, help_heading = "Repository")]
    pub model_load_retry_count: u32,
    /// Refuses a load on a GPU whose used memory is above this fraction of its total, as
    /// <device>:<fraction> (repeatable; e.g. 0:0.8). Device memory is read from NVML, or on a Jetson
    /// from the shared system memory. On a machine with no GPU there is nothing to limit.
    #[arg(
        long,
        env = "TRITONRS_MODEL_LOAD_GPU_LIMIT",
        value_name = "DEVICE:FRACTION",
        help_heading = "Memory and devices"
    )]
    pub model_load_gpu_limit: Vec<String>,
    /// A host policy, as <name>,<setting>=<value> (repeatable): `cpu-cores=0-3,5` pins the threads of
    /// instances whose instance_group names the policy in `host_policy` to those cores; `numa-node=N`
    /// to the cores of that NUMA node. On a Jetson, name the fast cores.
    #[arg(long, env = "TRITONRS_HOST_POLICY", value_name = "NAME,SETTING=VALUE", help_heading = "Memory and devices")]
    pub host_policy: Vec<String>,
}
