//! The shared-memory parameters of a request (`shared_memory_region`, `shared_memory_offset`,
//! `shared_memory_byte_size` on inputs and outputs): parsed once by the front-end that decodes the
//! request (`tensor::shm`), then resolved here against the registered regions when the request reaches
//! the core.

use crate::error::{Error, Result};
use crate::memory::pool::Pool;
use crate::memory::regions::{SharedMemoryManager, ShmSlice};
use crate::memory::Buffer;
use crate::model_api::types::{InferRequest, Parameters, Tensor, BYTE_SIZE, OFFSET, REGION};

fn strip(params: &mut Parameters) {
    for k in [REGION, OFFSET, BYTE_SIZE] {
        params.remove(k);
    }
}

/// Replaces the data of every input in shared memory with the region's bytes (in place for system
/// memory; CUDA memory is copied into a block of `staging`, the pinned pool), and attaches the region slice to every output to be written into one. The slices keep their
/// regions mapped until the request is done, even if a client unregisters them meanwhile.
pub fn resolve(manager: &SharedMemoryManager, staging: Option<&Pool>, req: &mut InferRequest) -> Result<()> {
    for t in &mut req.inputs {
        if let Some(r) = t.shm.take() {
            let slice = manager.slice(&r.region, r.offset, r.byte_size)?;
            t.data = slice.to_buffer(staging)?;
            strip(&mut t.parameters);
        }
    }
    for o in &mut req.outputs {
        if let Some(r) = o.shm.take() {
            o.shared_memory = Some(manager.slice(&r.region, r.offset, r.byte_size)?);
            strip(&mut o.parameters);
        }
    }
    Ok(())
}

/// Writes an output into the shared memory the client gave for it; the tensor then carries no bytes
/// for the wire. Too small a slice is the client's error, with Triton's message.
pub fn place_output(t: &mut Tensor, slice: &ShmSlice) -> Result<()> {
    let data = t.data.to_host()?;
    if data.len() > slice.len() {
        return Err(Error::invalid(format!(
            "shared memory size specified with the request for output '{}' ({} bytes) should be at least {} bytes \
             to hold the results",
            t.name,
            slice.len(),
            data.len()
        )));
    }
    slice.write(&data)?;
    t.data = Buffer::in_shared_memory(slice.prefix(data.len()));
    Ok(())
}
