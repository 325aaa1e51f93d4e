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
mod tests {
    use super::*;
    use crate::model_api::types::bytes_elements;

    fn f32_tensor(shape: Vec<i64>, v: &[f32]) -> Tensor {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        Tensor::new("OUT", DataType::Fp32, shape, bytes)
    }

    fn strings(t: &Tensor) -> Vec<String> {
        bytes_elements(t.data.as_host().unwrap())
            .unwrap()
            .iter()
            .map(|b| String::from_utf8(b.to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn top_k_with_labels_per_batch_row() {
        let t = f32_tensor(vec![2, 3], &[0.1, 0.7, 0.2, 5.0, 1.0, 5.0]);
        let labels = vec!["a".to_string(), "b".into(), "c".into()];
        let c = classify(&t, 2, true, Some(&labels)).unwrap();
        assert_eq!(c.shape, vec![2, 2]);
        assert_eq!(strings(&c), vec!["0.700000:1:b", "0.200000:2:c", "5.000000:0:a", "5.000000:2:c"]);
    }

    #[test]
    fn integers_without_labels_and_k_clamped() {
        let bytes: Vec<u8> = [3i32, 9, 1].iter().flat_map(|x| x.to_le_bytes()).collect();
        let t = Tensor::new("OUT", DataType::Int32, vec![3], bytes);
        let c = classify(&t, 10, false, None).unwrap();
        assert_eq!(c.shape, vec![3]);
        assert_eq!(strings(&c), vec!["9:1", "3:0", "1:2"]);
    }
}
