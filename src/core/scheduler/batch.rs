//! Merging queued requests into one execution along the batch dimension, and splitting the outputs
//! back per request. Ragged batching as Triton's backends do it: inputs with `allow_ragged_batch` are
//! concatenated into one flat tensor, the configuration's `batch_input`s are computed for each
//! execution and given to the model like ordinary inputs, and `batch_output`s are scattered back
//! following the shape of a request's input.

use crate::error::{Error, Result};
use crate::model_api::types::{bytes_elements, DataType, Tensor};
use crate::model_api::{ExecRequest, ExecResult};
use crate::proto::inference::{batch_input, BatchInput, BatchOutput, ModelConfig};
use bytes::{Bytes, BytesMut};
use std::collections::HashSet;

/// What a model's configuration says about forming its executions: which inputs may be ragged, the batch
/// inputs the server computes, and the outputs scattered by an input's shape.
#[derive(Debug, Clone, Default)]
pub struct BatchSpec {
    /// Inputs that may differ in shape within a batch (`allow_ragged_batch`).
    pub ragged: HashSet<String>,
    /// `batch_input`, checked at load.
    pub inputs: Vec<BatchInput>,
    /// `batch_output`, checked at load.
    pub outputs: Vec<BatchOutput>,
}

impl BatchSpec {
    pub fn from_config(cfg: &ModelConfig) -> Self {
        BatchSpec {
            ragged: cfg.input.iter().filter(|i| i.allow_ragged_batch).map(|i| i.name.clone()).collect(),
            inputs: cfg.batch_input.clone(),
            outputs: cfg.batch_output.clone(),
        }
    }

    /// A spec with only these ragged inputs.
    pub fn ragged<I: IntoIterator<Item = S>, S: Into<String>>(names: I) -> Self {
        BatchSpec { ragged: names.into_iter().map(Into::into).collect(), ..Default::default() }
    }

    /// Whether a single request runs exactly as it came (nothing flattened, computed or scattered).
    pub fn is_plain(&self) -> bool {
        self.ragged.is_empty() && self.inputs.is_empty() && self.outputs.is_empty()
    }
}

/// Whether `b` can run in one batch with `a`: the same inputs with the same datatypes and, except for
/// inputs that allow ragged batches, the same shape after the batch dimension.
pub fn compatible(a: &ExecRequest, b: &ExecRequest, spec: &BatchSpec) -> bool {
    let ragged = &spec.ragged;
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
/// all their elements, as Triton's ONNX Runtime backend hands them over (even for one request), and the
/// batch inputs are appended. The batch computes the union of the outputs the requests ask for.
pub fn merge(requests: &[&ExecRequest], spec: &BatchSpec) -> Result<ExecRequest> {
    let ragged = &spec.ragged;
    let first = match requests {
        [] => return Err(Error::internal("an empty batch was formed; this is a bug")),
        [only] if spec.is_plain() => return Ok((*only).clone()),
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
    for b in &spec.inputs {
        let t = batch_input_tensor(b, requests)?;
        for target in &b.target_name {
            inputs.push(Tensor::new(target.clone(), t.datatype, t.shape.clone(), t.data.clone()));
        }
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

/// The value of one batch input for a batch of `requests`, computed as Triton's backends do: element
/// counts count every element of the source input, batch dimension included; item shapes are the dims
/// after the batch dimension, once per batch item.
fn batch_input_tensor(b: &BatchInput, requests: &[&ExecRequest]) -> Result<Tensor> {
    let source = b.source_input.first().map(String::as_str).unwrap_or_default();
    let shapes: Vec<&[i64]> = requests
        .iter()
        .map(|r| {
            r.inputs.iter().find(|i| i.name == source).map(|i| i.shape.as_slice()).ok_or_else(|| {
                Error::invalid(format!("batch input '{}' needs input '{source}', which the request lacks", name(b)))
            })
        })
        .collect::<Result<_>>()?;
    let count = |s: &[i64]| s.iter().map(|&d| d.max(0)).product::<i64>();
    let items = |s: &[i64]| s.first().copied().unwrap_or(1).max(0);
    let (shape, values): (Vec<i64>, Vec<i64>) = match batch_input::Kind::try_from(b.kind) {
        Ok(batch_input::Kind::BatchElementCount) => {
            (vec![shapes.len() as i64], shapes.iter().map(|s| count(s)).collect())
        }
        Ok(
            kind @ (batch_input::Kind::BatchAccumulatedElementCount
            | batch_input::Kind::BatchAccumulatedElementCountWithZero),
        ) => {
            let zero = kind == batch_input::Kind::BatchAccumulatedElementCountWithZero;
            let mut acc = if zero { vec![0] } else { Vec::new() };
            let mut sum = 0;
            for s in &shapes {
                sum += count(s);
                acc.push(sum);
            }
            (vec![acc.len() as i64], acc)
        }
        Ok(batch_input::Kind::BatchMaxElementCountAsShape) => {
            // Only the shape carries information; Triton leaves the content unset, here it is zeros.
            let max = shapes.iter().map(|s| count(s)).max().unwrap_or(0);
            (vec![max], vec![0; max as usize])
        }
        Ok(kind @ (batch_input::Kind::BatchItemShape | batch_input::Kind::BatchItemShapeFlatten)) => {
            let rank = shapes.iter().map(|s| s.len().saturating_sub(1)).max().unwrap_or(0) as i64;
            let mut values = Vec::new();
            for s in &shapes {
                for _ in 0..items(s) {
                    values.extend(s.iter().skip(1));
                }
            }
            let rows: i64 = shapes.iter().map(|s| items(s)).sum();
            let shape =
                if kind == batch_input::Kind::BatchItemShape { vec![rows, rank] } else { vec![values.len() as i64] };
            (shape, values)
        }
        Err(_) => return Err(Error::invalid(format!("batch input '{}' has an unknown kind {}", name(b), b.kind))),
    };
    let data: Vec<u8> = if b.data_type == crate::proto::inference::DataType::TypeFp32 as i32 {
        values.iter().flat_map(|&v| (v as f32).to_le_bytes()).collect()
    } else {
        values.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect()
    };
    let dt = if b.data_type == crate::proto::inference::DataType::TypeFp32 as i32 {
        DataType::Fp32
    } else {
        DataType::Int32
    };
    Ok(Tensor::new(name(b).to_string(), dt, shape, data))
}

/// A batch input's first target name, for messages.
fn name(b: &BatchInput) -> &str {
    b.target_name.first().map(String::as_str).unwrap_or("(no target_name)")
}

/// Splits a batch's outputs along the first dimension: request `i` gets `sizes[i]` rows of every output
/// it asked for, in the order it asked. A `batch_output` of kind BATCH_SCATTER_WITH_INPUT_SHAPE is cut
/// instead into pieces of the request's source input shape. Every request gets the batch's timings.
pub fn split(
    result: ExecResult,
    requests: &[&ExecRequest],
    sizes: &[u32],
    spec: &BatchSpec,
) -> Result<Vec<ExecResult>> {
    if requests.len() == 1 && spec.outputs.is_empty() {
        return Ok(vec![result]);
    }
    let total: u64 = sizes.iter().map(|&s| u64::from(s)).sum();
    // Per output: the row slices for each request.
    let mut pieces: Vec<(String, Vec<Tensor>)> = Vec::with_capacity(result.outputs.len());
    for t in &result.outputs {
        if let Some(source) = scatter_source(spec, &t.name) {
            pieces.push((t.name.clone(), scatter(t, requests, source)?));
            continue;
        }
        if requests.len() == 1 {
            pieces.push((t.name.clone(), vec![t.clone()]));
            continue;
        }
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

/// The source input of the `batch_output` that scatters output `name`, if one does.
fn scatter_source<'a>(spec: &'a BatchSpec, name: &str) -> Option<&'a str> {
    spec.outputs
        .iter()
        .find(|b| b.target_name.iter().any(|t| t == name))
        .and_then(|b| b.source_input.first())
        .map(String::as_str)
}

/// Cuts an output into one piece per request, each with the shape of that request's `source` input.
fn scatter(t: &Tensor, requests: &[&ExecRequest], source: &str) -> Result<Vec<Tensor>> {
    let size = t.datatype.byte_size().ok_or_else(|| {
        Error::invalid(format!(
            "output '{}' is {}, which cannot be scattered with an input's shape",
            t.name,
            t.datatype.as_str()
        ))
    })?;
    let data = t.data.to_host()?;
    let mut offset = 0usize;
    let mut out = Vec::with_capacity(requests.len());
    for r in requests {
        let shape = r.inputs.iter().find(|i| i.name == source).map(|i| i.shape.clone()).ok_or_else(|| {
            Error::invalid(format!("output '{}' is scattered by input '{source}', which the request lacks", t.name))
        })?;
        let len = shape.iter().map(|&d| d.max(0) as usize).product::<usize>() * size;
        let piece = data.get(offset..offset + len).map(|_| data.slice(offset..offset + len)).ok_or_else(|| {
            Error::internal(format!(
                "output '{}' holds fewer elements than the shapes of input '{source}' in the batch add up to",
                t.name
            ))
        })?;
        out.push(Tensor::new(t.name.clone(), t.datatype, shape, piece));
        offset += len;
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
