//! Transport-neutral request, response and tensor types that every front-end and backend shares.

use crate::error::{Error, Result};
use crate::memory::Buffer;
use bytes::{BufMut, Bytes, BytesMut};
use std::collections::BTreeMap;
use std::fmt;

/// Triton's tensor datatypes, with their KServe v2 names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataType {
    Bool,
    Uint8,
    Uint16,
    Uint32,
    Uint64,
    Int8,
    Int16,
    Int32,
    Int64,
    Fp16,
    Bf16,
    Fp32,
    Fp64,
    /// Variable-length byte strings, serialized as a 4-byte little-endian length then the bytes.
    Bytes,
}

impl DataType {
    pub const ALL: [DataType; 14] = [
        DataType::Bool,
        DataType::Uint8,
        DataType::Uint16,
        DataType::Uint32,
        DataType::Uint64,
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::Fp16,
        DataType::Bf16,
        DataType::Fp32,
        DataType::Fp64,
        DataType::Bytes,
    ];

    /// The KServe v2 protocol name ("INT32", "BYTES", ...).
    pub fn as_str(self) -> &'static str {
        match self {
            DataType::Bool => "BOOL",
            DataType::Uint8 => "UINT8",
            DataType::Uint16 => "UINT16",
            DataType::Uint32 => "UINT32",
            DataType::Uint64 => "UINT64",
            DataType::Int8 => "INT8",
            DataType::Int16 => "INT16",
            DataType::Int32 => "INT32",
            DataType::Int64 => "INT64",
            DataType::Fp16 => "FP16",
            DataType::Bf16 => "BF16",
            DataType::Fp32 => "FP32",
            DataType::Fp64 => "FP64",
            DataType::Bytes => "BYTES",
        }
    }

    /// Parses a KServe v2 name.
    pub fn parse(s: &str) -> Option<DataType> {
        DataType::ALL.into_iter().find(|d| d.as_str() == s)
    }

    /// Bytes per element, or `None` for variable-size BYTES.
    pub fn byte_size(self) -> Option<usize> {
        Some(match self {
            DataType::Bool | DataType::Uint8 | DataType::Int8 => 1,
            DataType::Uint16 | DataType::Int16 | DataType::Fp16 | DataType::Bf16 => 2,
            DataType::Uint32 | DataType::Int32 | DataType::Fp32 => 4,
            DataType::Uint64 | DataType::Int64 | DataType::Fp64 => 8,
            DataType::Bytes => return None,
        })
    }

    /// Converts from the model configuration enum (`inference.DataType`, e.g. TYPE_INT32 = 8).
    pub fn from_config(v: i32) -> Option<DataType> {
        Some(match v {
            1 => DataType::Bool,
            2 => DataType::Uint8,
            3 => DataType::Uint16,
            4 => DataType::Uint32,
            5 => DataType::Uint64,
            6 => DataType::Int8,
            7 => DataType::Int16,
            8 => DataType::Int32,
            9 => DataType::Int64,
            10 => DataType::Fp16,
            11 => DataType::Fp32,
            12 => DataType::Fp64,
            13 => DataType::Bytes,
            14 => DataType::Bf16,
            _ => return None,
        })
    }

    /// The model configuration enum value for this datatype.
    pub fn to_config(self) -> i32 {
        match self {
            DataType::Bool => 1,
            DataType::Uint8 => 2,
            DataType::Uint16 => 3,
            DataType::Uint32 => 4,
            DataType::Uint64 => 5,
            DataType::Int8 => 6,
            DataType::Int16 => 7,
            DataType::Int32 => 8,
            DataType::Int64 => 9,
            DataType::Fp16 => 10,
            DataType::Fp32 => 11,
            DataType::Fp64 => 12,
            DataType::Bytes => 13,
            DataType::Bf16 => 14,
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

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
}

impl Tensor {
    pub fn new(name: impl Into<String>, datatype: DataType, shape: Vec<i64>, data: impl Into<Buffer>) -> Self {
        Tensor { name: name.into(), datatype, shape, data: data.into(), parameters: Parameters::new() }
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

/// One output the client asked for.
#[derive(Debug, Clone, Default)]
pub struct RequestedOutput {
    pub name: String,
    /// Classification extension: return the top `class_count` classes as "score:index:label" strings.
    pub class_count: u32,
    /// Front-end specific hints (e.g. `binary_data`), passed through untouched.
    pub parameters: Parameters,
    /// Where to write the output instead of returning it: set by the core from the request's
    /// `shared_memory_*` parameters (see `core::shm`).
    pub shared_memory: Option<crate::memory::regions::ShmSlice>,
}

impl RequestedOutput {
    /// Builds a requested output from its protocol parameters: `classification` sets `class_count`;
    /// the `shared_memory_*` parameters are checked here and resolved by the core.
    pub fn from_parameters(name: String, parameters: Parameters) -> Result<RequestedOutput> {
        let in_shm = shm_ref(&parameters, &name)?.is_some();
        if in_shm && parameters.contains_key("classification") {
            return Err(Error::invalid("Output can't set both 'shared_memory_region' and 'classification'"));
        }
        let class_count = match parameters.get("classification") {
            None => 0,
            Some(v) => v.as_i64().and_then(|c| u32::try_from(c).ok()).ok_or_else(|| {
                Error::invalid(format!("output '{name}': classification must be a non-negative integer"))
            })?,
        };
        Ok(RequestedOutput { name, class_count, parameters, shared_memory: None })
    }
}

/// An inference request, decoded once from whichever transport it arrived on.
#[derive(Debug, Clone, Default)]
pub struct InferRequest {
    pub model_name: String,
    /// `None` lets the server pick (the highest ready version).
    pub model_version: Option<i64>,
    pub id: String,
    pub inputs: Vec<Tensor>,
    /// Empty means "all outputs".
    pub outputs: Vec<RequestedOutput>,
    pub parameters: Parameters,
    /// The model versions whose `execute` waits for this request, directly or through other models:
    /// set on BLS requests (and passed on to ensemble steps), empty for a client's request.
    pub callers: CallChain,
}

/// Model versions (name, version) waiting on a request; see [`InferRequest::callers`].
pub type CallChain = std::sync::Arc<[(String, i64)]>;

/// The answer to an [`InferRequest`].
#[derive(Debug, Clone)]
pub struct InferResponse {
    pub model_name: String,
    pub model_version: i64,
    pub id: String,
    pub outputs: Vec<Tensor>,
    pub parameters: Parameters,
}

/// One response of a streamed inference (gRPC `ModelStreamInfer`, a decoupled BLS request): a decoupled
/// model sends 0..n of them per request, the last one final.
#[derive(Debug, Clone)]
pub struct StreamResponse {
    /// The response; without outputs when `empty`.
    pub response: InferResponse,
    /// The last response of its request (Triton's `triton_final_response`).
    pub is_final: bool,
    /// Only the final flag, with no response from the model (sent to clients that ask for it with
    /// `triton_enable_empty_final_response`).
    pub empty: bool,
    /// An error response from the model (the request goes on until its final response); an `Err` in
    /// the stream instead ends the request.
    pub error: Option<crate::error::Error>,
}

/// Splits a serialized BYTES buffer into its elements, checking every length prefix.
pub fn bytes_elements(data: &[u8]) -> Result<Vec<&[u8]>> {
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        if rest.len() < 4 {
            return Err(Error::invalid(
                "BYTES tensor data is truncated: an element's 4-byte length prefix is incomplete",
            ));
        }
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        rest = &rest[4..];
        if rest.len() < len {
            return Err(Error::invalid(format!(
                "BYTES tensor data is truncated: an element claims {len} bytes but only {} remain",
                rest.len()
            )));
        }
        out.push(&rest[..len]);
        rest = &rest[len..];
    }
    Ok(out)
}

/// Serializes byte strings into Triton's BYTES layout.
pub fn serialize_bytes<I, T>(items: I) -> Bytes
where
    I: IntoIterator<Item = T>,
    T: AsRef<[u8]>,
{
    let mut buf = BytesMut::new();
    for item in items {
        let item = item.as_ref();
        buf.put_u32_le(item.len() as u32);
        buf.put_slice(item);
    }
    buf.freeze()
}

/// The shared-memory parameters of a tensor (inputs and requested outputs).
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
mod tests {
    use super::*;

    #[test]
    fn datatype_names_round_trip() {
        for d in DataType::ALL {
            assert_eq!(DataType::parse(d.as_str()), Some(d));
            assert_eq!(DataType::from_config(d.to_config()), Some(d));
        }
        assert_eq!(DataType::parse("FLOAT"), None);
        assert_eq!(DataType::from_config(0), None);
    }

    #[test]
    fn bytes_serialization_round_trips_and_rejects_truncation() {
        let buf = serialize_bytes(["ab", "", "xyz"]);
        assert_eq!(&buf[..], b"\x02\0\0\0ab\0\0\0\0\x03\0\0\0xyz");
        let parts = bytes_elements(&buf).unwrap();
        assert_eq!(parts, vec![&b"ab"[..], b"", b"xyz"]);
        assert!(bytes_elements(&buf[..buf.len() - 1]).is_err());
        assert!(bytes_elements(b"\x01\0").is_err());
    }

    #[test]
    fn element_count_handles_overflow_and_negatives() {
        assert_eq!(element_count(&[2, 3]), Some(6));
        assert_eq!(element_count(&[]), Some(1));
        assert_eq!(element_count(&[-1, 3]), None);
        assert_eq!(element_count(&[i64::MAX, i64::MAX]), None);
    }
}
