//! The shared-memory parameters of a request (`shared_memory_region`, `shared_memory_offset`,
//! `shared_memory_byte_size` on inputs and outputs): parsed and checked the same way for every
//! front-end, then resolved against the registered regions when the request reaches the core.

use crate::error::{Error, Result};
use crate::memory::pool::Pool;
use crate::memory::regions::{SharedMemoryManager, ShmSlice};
use crate::memory::Buffer;
use crate::model_api::types::{shm_ref, InferRequest, Parameters, Tensor, BYTE_SIZE, OFFSET, REGION};

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
        if let Some(r) = shm_ref(&t.parameters, &t.name)? {
            let slice = manager.slice(&r.region, r.offset, r.byte_size)?;
            t.data = slice.to_buffer(staging)?;
            strip(&mut t.parameters);
        }
    }
    for o in &mut req.outputs {
        if let Some(r) = shm_ref(&o.parameters, &o.name)? {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model_api::types::{ParamValue, ShmRef};

    fn params(kv: &[(&str, ParamValue)]) -> Parameters {
        kv.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    }

    #[test]
    fn parameters_parse_with_tritons_messages() {
        let s = |v: &str| ParamValue::String(v.into());
        assert_eq!(shm_ref(&Parameters::new(), "T").unwrap(), None);
        assert_eq!(
            shm_ref(&params(&[(REGION, s("r")), (BYTE_SIZE, ParamValue::Int(64))]), "T").unwrap(),
            Some(ShmRef { region: "r".into(), offset: 0, byte_size: 64 })
        );
        assert_eq!(
            shm_ref(&params(&[(REGION, s("r")), (BYTE_SIZE, ParamValue::Uint(8)), (OFFSET, ParamValue::Int(4))]), "T")
                .unwrap(),
            Some(ShmRef { region: "r".into(), offset: 4, byte_size: 8 })
        );
        let err = |p: Parameters| shm_ref(&p, "T").unwrap_err();
        let e = err(params(&[(REGION, s("r"))]));
        assert_eq!(
            e.message,
            "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor 'T'"
        );
        let e = err(params(&[(BYTE_SIZE, ParamValue::Int(4))]));
        assert_eq!(
            e.message,
            "'shared_memory_byte_size' can not be specified without 'shared_memory_region' parameter for tensor 'T'"
        );
        for p in [
            params(&[(REGION, ParamValue::Int(5)), (BYTE_SIZE, ParamValue::Int(4))]),
            params(&[(REGION, s("r")), (BYTE_SIZE, ParamValue::Int(-4))]),
            params(&[(REGION, s("r")), (BYTE_SIZE, s("4"))]),
            params(&[(REGION, s("r")), (BYTE_SIZE, ParamValue::Int(4)), (OFFSET, ParamValue::Double(1.0))]),
        ] {
            let e = err(p);
            assert!(e.message.starts_with("invalid value type for 'shared_memory_"), "{e}");
            assert_eq!(e.grpc_code(), 3);
        }
    }
}
