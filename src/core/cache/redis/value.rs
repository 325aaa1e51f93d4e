//! What the Redis cache stores: under `tritonrs:cache:<32 hex digits>` (the local cache's 128-bit key,
//! so every tritonrs with the same model computes the same key), a version byte followed by the
//! outputs packed as for a cache library ([`super::super::external::pack`]: names, datatypes, shapes,
//! bytes, each length-prefixed). A value that does not read back whole, or whose tensors do not fit
//! their shapes, is a miss, never a panic: Redis is shared, and anything may sit at a key.

use super::super::external;
use super::super::CacheKey;
use crate::error::{Error, Result};
use crate::model_api::types::{DataType, Tensor};

/// The layout this build writes; a value of another version is a miss (and is overwritten).
pub const VERSION: u8 = 1;

/// The fixed part of every key, so the cache's entries are told apart from anything else in the db.
pub const KEY_PREFIX: &str = "tritonrs:cache:";

/// The Redis key of a request.
pub fn key(key: &CacheKey) -> String {
    format!("{KEY_PREFIX}{}", external::key_string(key))
}

/// A result as it is stored.
pub fn encode(outputs: &[Tensor]) -> Result<Vec<u8>> {
    let packed = external::pack(outputs)?;
    let mut value = Vec::with_capacity(packed.len() + 1);
    value.push(VERSION);
    value.extend_from_slice(&packed);
    Ok(value)
}

/// A stored result back, checked: every tensor's bytes fit its datatype and shape.
pub fn decode(value: &[u8]) -> Result<Vec<Tensor>> {
    let Some((&version, packed)) = value.split_first() else {
        return Err(Error::internal("the value is empty"));
    };
    if version != VERSION {
        return Err(Error::internal(format!("the value has layout version {version}, not {VERSION}")));
    }
    let outputs = external::unpack(packed)?;
    for t in &outputs {
        check(t)?;
    }
    Ok(outputs)
}

/// The tensor's bytes are as many as its shape and datatype say (BYTES: as many elements).
fn check(t: &Tensor) -> Result<()> {
    let bad = || Error::internal(format!("the stored output '{}' does not fit its shape", t.name));
    let count = crate::tensor::element_count(&t.shape).ok_or_else(bad)?;
    let data = t.data.to_host()?;
    let fits = match (t.datatype, crate::tensor::byte_len(t.datatype, &t.shape)) {
        (DataType::Bytes, _) => crate::tensor::bytes_elements(&data).is_ok_and(|e| e.len() == count),
        (_, Some(n)) => n == data.len(),
        (_, None) => false,
    };
    fits.then_some(()).ok_or_else(bad)
}
