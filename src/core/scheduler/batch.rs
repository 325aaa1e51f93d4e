//! Merging queued requests into one execution along the batch dimension, and splitting the outputs
//! back per request.

use crate::error::{Error, Result};
use crate::model_api::types::{bytes_elements, DataType, Tensor};
use crate::model_api::{ExecRequest, ExecResult};
use bytes::{Bytes, BytesMut};
use std::collections::HashSet;

/// Whether `b` can run in one batch with `a`: the same inputs with the same datatypes and, except for
/// inputs that allow ragged batches, the same shape after the batch dimension.
pub fn compatible(a: &ExecRequest, b: &ExecRequest, ragged: &HashSet<String>) -> bool {
    a.inputs.len() == b.inputs.len()
        && a.inputs.iter().all(|x| {
            b.inputs.iter().any(|y| {
                y.name == x.name
                    && y.datatype == x.datatype
                    && (ragged.contains(&x.name) || x.shape.get(1..) == y.shape.get(1..))
            })
        })
}

/// Concatenates compatible requests along the batch dimension. Ragged inputs become one 1-D tensor of
/// all their elements, as Triton's ONNX Runtime backend hands them over. The batch computes the union of
/// the outputs the requests ask for.
pub fn merge(requests: &[&ExecRequest], ragged: &HashSet<String>) -> Result<ExecRequest> {
    let first = match requests {
        [] => return Err(Error::internal("an empty batch was formed; this is a bug")),
        [only] => return Ok((*only).clone()),
        [first, ..] => *first,
    };
    let mut inputs = Vec::with_capacity(first.inputs.len());
    for t in &first.inputs {
        let parts: Vec<&Tensor> = requests
            .iter()
            .map(|r| {
                r.inputs.iter().find(|i| i.name == t.name).ok_or_else(|| {
                    Error::internal(format!("input '{}' is missing from a batched request; this is a bug", t.name))
                })
            })
            .collect::<Result<_>>()?;
        let mut data = BytesMut::with_capacity(parts.iter().map(|p| p.data.len()).sum());
        for p in &parts {
            data.extend_from_slice(&p.data.to_host()?);
        }
        let shape = if ragged.contains(&t.name) {
            vec![parts.iter().map(|p| p.element_count() as i64).sum()]
        } else {
            let mut s = t.shape.clone();
            if let Some(b) = s.first_mut() {
                *b = parts.iter().map(|p| p.shape.first().copied().unwrap_or(1)).sum();
            }
            s
        };
        inputs.push(Tensor::new(t.name.clone(), t.datatype, shape, data.freeze()));
    }
    let mut outputs: Vec<String> = Vec::new();
    for r in requests {
        for o in &r.outputs {
            if !outputs.contains(o) {
                outputs.push(o.clone());
            }
        }
    }
    Ok(ExecRequest { inputs, outputs, meta: first.meta.clone(), responder: None })
}

/// Splits a batch's outputs along the first dimension: request `i` gets `sizes[i]` rows of every output
/// it asked for, in the order it asked. Every request gets the batch's timings.
pub fn split(result: ExecResult, requests: &[&ExecRequest], sizes: &[u32]) -> Result<Vec<ExecResult>> {
    if requests.len() == 1 {
        return Ok(vec![result]);
    }
    let total: u64 = sizes.iter().map(|&s| u64::from(s)).sum();
    // Per output: the row slices for each request.
    let mut pieces: Vec<(String, Vec<Tensor>)> = Vec::with_capacity(result.outputs.len());
    for t in &result.outputs {
        let rows = t.shape.first().copied().unwrap_or(0);
        if rows < 0 || rows as u64 != total {
            return Err(Error::internal(format!(
                "output '{}' has {rows} rows but the batch holds {total} inferences; the model does not batch its \
                 outputs along the first dimension",
                t.name
            )));
        }
        pieces.push((t.name.clone(), split_rows(t, sizes)?));
    }
    let mut out = Vec::with_capacity(requests.len());
    for (i, r) in requests.iter().enumerate() {
        let outputs = r
            .outputs
            .iter()
            .filter_map(|name| pieces.iter().find(|(n, _)| n == name).and_then(|(_, parts)| parts.get(i)).cloned())
            .collect();
        out.push(ExecResult { outputs, timings: result.timings, parameters: result.parameters.clone() });
    }
    Ok(out)
}

/// Cuts a tensor into consecutive groups of rows.
fn split_rows(t: &Tensor, sizes: &[u32]) -> Result<Vec<Tensor>> {
    let data = t.data.to_host()?;
    let per_row = t.shape.iter().skip(1).map(|&d| d.max(0) as usize).product::<usize>();
    let mut out = Vec::with_capacity(sizes.len());
    let shape_for = |rows: u32| {
        let mut s = t.shape.clone();
        s[0] = i64::from(rows);
        s
    };
    if t.datatype == DataType::Bytes {
        // Length-prefixed elements: find each group's byte range by walking the prefixes.
        let elems = bytes_elements(&data)?;
        let mut offset = 0usize;
        let mut elem = 0usize;
        for &rows in sizes {
            let n = rows as usize * per_row;
            let end_elem = elem + n;
            let len: usize =
                elems.get(elem..end_elem).map(|e| e.iter().map(|x| x.len() + 4).sum()).ok_or_else(|| {
                    Error::internal(format!("output '{}' holds fewer BYTES elements than its shape says", t.name))
                })?;
            out.push(Tensor::new(t.name.clone(), t.datatype, shape_for(rows), data.slice(offset..offset + len)));
            offset += len;
            elem = end_elem;
        }
    } else {
        let size = t.datatype.byte_size().unwrap_or(1);
        let row_bytes = per_row * size;
        let mut offset = 0usize;
        for &rows in sizes {
            let len = rows as usize * row_bytes;
            let piece: Bytes = data
                .get(offset..offset + len)
                .map(|_| data.slice(offset..offset + len))
                .ok_or_else(|| Error::internal(format!("output '{}' holds fewer bytes than its shape says", t.name)))?;
            out.push(Tensor::new(t.name.clone(), t.datatype, shape_for(rows), piece));
            offset += len;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
