//! A typed view of tensor bytes: elements as numbers (f64, exact for every integer up to 2^53 and every
//! half, single and double float), the k largest of them, and BYTES elements. Every per-datatype read
//! of little-endian elements is here.

use super::{DataType, Tensor};
use crate::error::{Error, Result};
use bytes::{BufMut, Bytes, BytesMut};

/// Calls `f` with each element of `bytes` as f64, read as `dt`; false for BYTES, which holds no numbers.
/// A trailing partial element is ignored (callers that care check the length first).
pub fn for_each_f64(dt: DataType, bytes: &[u8], mut f: impl FnMut(f64)) -> bool {
    macro_rules! read {
        ($ty:ty, $conv:expr) => {
            for c in bytes.chunks_exact(std::mem::size_of::<$ty>()) {
                let mut a = [0u8; std::mem::size_of::<$ty>()];
                a.copy_from_slice(c);
                f($conv(<$ty>::from_le_bytes(a)));
            }
        };
    }
    match dt {
        DataType::Bool => bytes.iter().for_each(|&b| f(if b != 0 { 1.0 } else { 0.0 })),
        DataType::Uint8 => bytes.iter().for_each(|&b| f(f64::from(b))),
        DataType::Int8 => bytes.iter().for_each(|&b| f(f64::from(b as i8))),
        DataType::Uint16 => read!(u16, f64::from),
        DataType::Int16 => read!(i16, f64::from),
        DataType::Uint32 => read!(u32, f64::from),
        DataType::Int32 => read!(i32, f64::from),
        DataType::Uint64 => read!(u64, |v| v as f64),
        DataType::Int64 => read!(i64, |v| v as f64),
        DataType::Fp16 => read!(half::f16, |v: half::f16| v.to_f64()),
        DataType::Bf16 => read!(half::bf16, |v: half::bf16| v.to_f64()),
        DataType::Fp32 => read!(f32, f64::from),
        DataType::Fp64 => read!(f64, |v| v),
        DataType::Bytes => return false,
    }
    true
}

/// A number tensor's elements as f64, row-major. BYTES is a client error; data that does not fit the
/// shape is the producer's bug (an internal error).
pub fn numbers(t: &Tensor) -> Result<Vec<f64>> {
    let data = t.data.to_host()?;
    let Some(size) = t.datatype.byte_size() else {
        return Err(Error::invalid(format!("output '{}' is {}, not a number type", t.name, t.datatype.as_str())));
    };
    if data.len() % size != 0 || data.len() / size != t.element_count() {
        return Err(Error::internal(format!(
            "output '{}' holds {} bytes, which its shape does not fit",
            t.name,
            data.len()
        )));
    }
    let mut out = Vec::with_capacity(data.len() / size);
    for_each_f64(t.datatype, &data, |v| out.push(v));
    Ok(out)
}

/// Appends `v` as one element of a floating point `dt` (rounded to its precision); false, writing
/// nothing, when `dt` is not a float type.
pub fn push_float(dt: DataType, v: f64, out: &mut Vec<u8>) -> bool {
    match dt {
        DataType::Fp16 => out.extend_from_slice(&half::f16::from_f64(v).to_le_bytes()),
        DataType::Bf16 => out.extend_from_slice(&half::bf16::from_f64(v).to_le_bytes()),
        DataType::Fp32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
        DataType::Fp64 => out.extend_from_slice(&v.to_le_bytes()),
        _ => return false,
    }
    true
}

/// The indices of the `k` largest `values` among those `keep` accepts: largest first, equal values by
/// lower index, NaN below every number. Only the `k` taken are sorted.
pub fn top_k<T: Copy + Into<f64>>(values: &[T], k: usize, keep: impl Fn(f64) -> bool) -> Vec<usize> {
    let v = |i: usize| -> f64 { values[i].into() };
    let mut idx: Vec<usize> = (0..values.len()).filter(|&i| keep(v(i))).collect();
    let order = |&a: &usize, &b: &usize| {
        let (x, y) = (v(a), v(b));
        // Descending by value with NaN last, then ascending by index: a total order.
        x.is_nan().cmp(&y.is_nan()).then(y.total_cmp(&x)).then(a.cmp(&b))
    };
    if k < idx.len() {
        if k == 0 {
            return Vec::new();
        }
        idx.select_nth_unstable_by(k - 1, order);
        idx.truncate(k);
    }
    idx.sort_unstable_by(order);
    idx
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

#[cfg(test)]
mod tests;
