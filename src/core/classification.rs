//! Triton's classification extension: replaces an output with its top-k classes as
//! "score:index[:label]" strings.

use crate::error::{Error, Result};
use crate::model_api::types::{serialize_bytes, DataType, Tensor};
use crate::tensor::view;

/// Formats a score as Triton does (C++ `std::to_string`): six decimals for floating point types.
fn format_score(dt: DataType, v: f64) -> String {
    if dt.is_float() {
        format!("{v:.6}")
    } else {
        format!("{}", v as i64)
    }
}

/// Top-`k` classes of `t`, per batch item when `batched`. The result is a BYTES tensor of shape
/// `[batch, k]` (or `[k]`), ordered by descending score, ties by ascending index.
pub fn classify(t: &Tensor, k: u32, batched: bool, labels: Option<&[String]>) -> Result<Tensor> {
    if t.datatype == DataType::Bytes {
        return Err(Error::invalid(format!("cannot classify BYTES output '{}'", t.name)));
    }
    let vals = view::numbers(t)?;
    let rows = if batched { t.shape.first().copied().unwrap_or(1).max(1) as usize } else { 1 };
    let per_row = vals.len().checked_div(rows).unwrap_or(0);
    let k = (k as usize).min(per_row);
    let mut out = Vec::with_capacity(rows * k);
    for r in 0..rows {
        let row = &vals[r * per_row..(r + 1) * per_row];
        for i in view::top_k(row, k, |_| true) {
            let score = format_score(t.datatype, row[i]);
            out.push(match labels.and_then(|l| l.get(i)) {
                Some(label) => format!("{score}:{i}:{label}"),
                None => format!("{score}:{i}"),
            });
        }
    }
    let shape = if batched { vec![rows as i64, k as i64] } else { vec![k as i64] };
    Ok(Tensor::new(t.name.clone(), DataType::Bytes, shape, serialize_bytes(out.iter())))
}

#[cfg(test)]
mod tests;
