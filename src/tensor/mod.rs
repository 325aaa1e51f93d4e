//! The tensor layer: datatypes and their sizes, tensors and their parameters, and a typed view of the
//! elements (numbers as f64, top-k, BYTES elements). Classification, vision post-processing, the KServe
//! codec (`kserve`), the HTTP, gRPC and MQTT front-ends and the Python backend's IPC all read and write
//! tensors through it. It imports nothing but `error` and `memory` (where a tensor's bytes live).

mod datatype;
pub mod shm;
pub mod view;

pub use datatype::DataType;
pub use shm::ShmRef;
pub use view::{bytes_elements, serialize_bytes};

use crate::memory::Buffer;
use std::collections::BTreeMap;

/// A request or response parameter value (KServe v2 parameters; Triton's typed `InferParameter`).
#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    Bool(bool),
    Int(i64),
    Uint(u64),
    Double(f64),
    String(String),
}

impl ParamValue {
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            ParamValue::Int(v) => Some(v),
            ParamValue::Uint(v) => i64::try_from(v).ok(),
            _ => None,
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            ParamValue::Bool(v) => Some(v),
            _ => None,
        }
    }
}

/// Named parameters, sorted by name so encoders are deterministic.
pub type Parameters = BTreeMap<String, ParamValue>;

/// A named tensor: datatype, shape and the bytes (row-major; BYTES elements length-prefixed).
#[derive(Debug, Clone)]
pub struct Tensor {
    pub name: String,
    pub datatype: DataType,
    pub shape: Vec<i64>,
    pub data: Buffer,
    /// Per-tensor parameters (e.g. `binary_data_size` on the wire; front-ends strip theirs).
    pub parameters: Parameters,
    /// Where the client's shared memory holds the bytes (an input), as the front-end parsed the
    /// `shared_memory_*` parameters; the core maps it and takes it.
    pub shm: Option<ShmRef>,
}

impl Tensor {
    pub fn new(name: impl Into<String>, datatype: DataType, shape: Vec<i64>, data: impl Into<Buffer>) -> Self {
        Tensor { name: name.into(), datatype, shape, data: data.into(), parameters: Parameters::new(), shm: None }
    }

    /// Number of elements implied by the shape (0 if any dimension is negative).
    pub fn element_count(&self) -> usize {
        element_count(&self.shape).unwrap_or(0)
    }
}

/// Multiplies the dimensions, or `None` on a negative dimension or overflow.
pub fn element_count(shape: &[i64]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| usize::try_from(d).ok().and_then(|d| acc.checked_mul(d)))
}

/// The bytes `count` elements of `dt` take, or `None` for BYTES (variable size) or on overflow.
pub fn byte_len(dt: DataType, shape: &[i64]) -> Option<usize> {
    element_count(shape)?.checked_mul(dt.byte_size()?)
}

#[cfg(test)]
mod tests;
