//! Triton's tensor datatypes: their KServe v2 names, element sizes and enum numbers. Adding a datatype
//! starts here; the typed view (`view.rs`) and the JSON encoding (`kserve.rs`) match on it exhaustively,
//! so the compiler lists what else must learn it.

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

    /// Writes one plausible element made from the random number `r` into `out` (its `byte_size`
    /// bytes, little-endian): floats are normal numbers in [0, 1) (never subnormals, which run slowly
    /// on CPUs and no real input is made of), integers are small (0..32), bools 0 or 1. Warm-up
    /// samples (`random_data`) and `tritonrs tune`'s random inputs are made of these. Nothing is
    /// written for BYTES or when `out` is shorter than an element.
    pub fn write_sample(self, r: u32, out: &mut [u8]) {
        let unit = f64::from(r >> 8) / f64::from(1u32 << 24);
        let small = r % 32;
        let mut put = |bytes: &[u8]| {
            if let Some(dst) = out.get_mut(..bytes.len()) {
                dst.copy_from_slice(bytes);
            }
        };
        match self {
            DataType::Bool => put(&[(r & 1) as u8]),
            DataType::Uint8 | DataType::Int8 => put(&[small as u8]),
            DataType::Uint16 | DataType::Int16 => put(&(small as u16).to_le_bytes()),
            DataType::Uint32 | DataType::Int32 => put(&small.to_le_bytes()),
            DataType::Uint64 | DataType::Int64 => put(&u64::from(small).to_le_bytes()),
            DataType::Fp16 => put(&half::f16::from_f64(unit).to_le_bytes()),
            DataType::Bf16 => put(&half::bf16::from_f64(unit).to_le_bytes()),
            DataType::Fp32 => put(&(unit as f32).to_le_bytes()),
            DataType::Fp64 => put(&unit.to_le_bytes()),
            DataType::Bytes => {}
        }
    }

    /// Whether the elements are floating point numbers (JSON and classification print them as such).
    pub fn is_float(self) -> bool {
        matches!(self, DataType::Fp16 | DataType::Bf16 | DataType::Fp32 | DataType::Fp64)
    }

    /// Converts from the model configuration enum (`inference.DataType`, e.g. TYPE_INT32 = 8). The C API's
    /// `TRITONSERVER_DataType` uses the same numbers.
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

#[cfg(test)]
mod tests;
