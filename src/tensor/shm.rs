//! The shared-memory parameters of a tensor (`shared_memory_region`, `shared_memory_offset`,
//! `shared_memory_byte_size` on inputs and requested outputs), parsed once, with Triton's messages, by
//! the front-end that decodes the request; the core maps the [`ShmRef`] it found to the region.

use super::{ParamValue, Parameters};
use crate::error::{Error, Result};

/// The parameter names.
pub const REGION: &str = "shared_memory_region";
pub const OFFSET: &str = "shared_memory_offset";
pub const BYTE_SIZE: &str = "shared_memory_byte_size";

/// Where a tensor's bytes are, as its parameters say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShmRef {
    pub region: String,
    pub offset: u64,
    pub byte_size: u64,
}

/// Reads a tensor's shared-memory parameters: `None` when it names no region. Wrong types and a size
/// or offset without a region are client errors, with Triton's messages.
pub fn shm_ref(params: &Parameters, tensor: &str) -> Result<Option<ShmRef>> {
    let number = |key: &str| -> Result<Option<u64>> {
        match params.get(key) {
            None => Ok(None),
            Some(ParamValue::Int(v)) if *v >= 0 => Ok(Some(*v as u64)),
            Some(ParamValue::Uint(v)) => Ok(Some(*v)),
            Some(_) => Err(Error::invalid(format!(
                "invalid value type for '{key}' parameter for tensor '{tensor}': expected a non-negative integer"
            ))),
        }
    };
    let offset = number(OFFSET)?;
    let byte_size = number(BYTE_SIZE)?;
    let region = match params.get(REGION) {
        None => {
            for (key, v) in [(BYTE_SIZE, byte_size), (OFFSET, offset)] {
                if v.is_some() {
                    return Err(Error::invalid(format!(
                        "'{key}' can not be specified without 'shared_memory_region' parameter for tensor '{tensor}'"
                    )));
                }
            }
            return Ok(None);
        }
        Some(ParamValue::String(s)) => s.clone(),
        Some(_) => {
            return Err(Error::invalid(format!(
                "invalid value type for 'shared_memory_region' parameter for tensor '{tensor}': expected a string"
            )))
        }
    };
    let byte_size = byte_size.ok_or_else(|| {
        Error::invalid(format!(
            "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor \
             '{tensor}'"
        ))
    })?;
    Ok(Some(ShmRef { region, offset: offset.unwrap_or(0), byte_size }))
}

#[cfg(test)]
mod tests;
