//! Flags of the memory pools and GPU selection (tritonserver's names).

use super::parse_bool;
use clap::{ArgAction, Args};

#[derive(Debug, Clone, Args)]
pub struct MemoryArgs {
    /// Bytes of page-locked host memory for staging tensors to and from GPUs (mapped and shared with
    /// the GPU on Xavier and Orin). Past it, plain host memory is used and counted in the metrics.
    #[arg(help_heading = "Memory and devices", long, env = "TRITONRS_PINNED_MEMORY_POOL_BYTE_SIZE", default_value_t = crate::memory::pool::DEFAULT_PINNED_POOL_BYTES)]
    pub pinned_memory_pool_byte_size: u64,
    /// Device memory pool of one GPU, as <gpu>:<bytes> (repeatable); other GPUs get 64 MiB.
    #[arg(help_heading = "Memory and devices", long, env = "TRITONRS_CUDA_MEMORY_POOL_BYTE_SIZE", value_name = "GPU:BYTES", value_delimiter = ',',
          value_parser = crate::memory::pool::parse_cuda_pool)]
    pub cuda_memory_pool_byte_size: Vec<(i32, u64)>,
    /// GPUs below this compute capability are not used (tritonserver's default 6.0). A Jetson Nano is
    /// 5.3: set 5.3 there.
    #[arg(
        help_heading = "Memory and devices",
        long,
        env = "TRITONRS_MIN_SUPPORTED_COMPUTE_CAPABILITY",
        default_value_t = 6.0
    )]
    pub min_supported_compute_capability: f64,
    /// Checked as <gpu>:<bytes> (repeatable), with no effect: tritonserver reserves this much CUDA
    /// virtual address space per growable implicit state; tritonrs keeps states in buffers it
    /// reallocates as they grow, so it reserves none.
    #[arg(help_heading = "Memory and devices", long, env = "TRITONRS_CUDA_VIRTUAL_ADDRESS_SIZE", value_name = "GPU:BYTES",
          value_delimiter = ',', value_parser = crate::memory::pool::parse_cuda_pool)]
    pub cuda_virtual_address_size: Vec<(i32, u64)>,
    /// Accepted, with no effect: tritonrs never copies tensors from one GPU to another, so it has no
    /// peer access to enable.
    #[arg(help_heading = "Memory and devices", long, env = "TRITONRS_ENABLE_PEER_ACCESS", value_parser = parse_bool,
          num_args = 0..=1, default_missing_value = "true", default_value = "true", action = ArgAction::Set)]
    pub enable_peer_access: bool,
    /// Accepted, with no effect: tritonrs copies tensors on the thread that handles the request,
    /// as tritonserver does with its default 0; it has no copy thread pool to size.
    #[arg(
        help_heading = "Memory and devices",
        long,
        env = "TRITONRS_BUFFER_MANAGER_THREAD_COUNT",
        default_value_t = 0
    )]
    pub buffer_manager_thread_count: u32,
}

impl MemoryArgs {
    pub fn pool_options(&self) -> crate::memory::pool::PoolOptions {
        crate::memory::pool::PoolOptions {
            pinned_bytes: self.pinned_memory_pool_byte_size,
            cuda_bytes: self.cuda_memory_pool_byte_size.clone(),
        }
    }
}
