//! Flags of the memory pools and GPU selection (tritonserver's names).

use clap::Args;

#[derive(Debug, Clone, Args)]
pub struct MemoryArgs {
    /// Bytes of page-locked host memory for staging tensors to and from GPUs (mapped and shared with
    /// the GPU on Xavier and Orin). Past it, plain host memory is used and counted in the metrics.
    #[arg(long, env = "TRITONRS_PINNED_MEMORY_POOL_BYTE_SIZE", default_value_t = crate::memory::pool::DEFAULT_PINNED_POOL_BYTES)]
    pub pinned_memory_pool_byte_size: u64,
    /// Device memory pool of one GPU, as <gpu>:<bytes> (repeatable); other GPUs get 64 MiB.
    #[arg(long, env = "TRITONRS_CUDA_MEMORY_POOL_BYTE_SIZE", value_name = "GPU:BYTES", value_delimiter = ',',
          value_parser = crate::memory::pool::parse_cuda_pool)]
    pub cuda_memory_pool_byte_size: Vec<(i32, u64)>,
    /// GPUs below this compute capability are not used (tritonserver's default 6.0). A Jetson Nano is
    /// 5.3: set 5.3 there.
    #[arg(long, env = "TRITONRS_MIN_SUPPORTED_COMPUTE_CAPABILITY", default_value_t = 6.0)]
    pub min_supported_compute_capability: f64,
}

impl MemoryArgs {
    pub fn pool_options(&self) -> crate::memory::pool::PoolOptions {
        crate::memory::pool::PoolOptions {
            pinned_bytes: self.pinned_memory_pool_byte_size,
            cuda_bytes: self.cuda_memory_pool_byte_size.clone(),
        }
    }
}
