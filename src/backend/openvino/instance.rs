//! One instance of an OpenVINO model: an infer request on the model's shared compiled model, run
//! synchronously on the instance's thread. Inputs are given to OpenVINO in place when their bytes
//! are aligned for the element type (else copied once); outputs stay in the tensors OpenVINO wrote,
//! held by the response until it is written, while the request gets new tensors for its next run.

use super::ffi::{self, Input, RunError};
use super::{config_dims, from_element_type, to_element_type, Compiled};
use crate::backend::overlaps;
use crate::error::{Error, Result};
use crate::model_api::types::Tensor;
use crate::model_api::{ExecRequest, ExecResult, ExecTimings, ModelInstance};
use bytes::Bytes;
use std::sync::Arc;
use std::time::Instant;

pub(super) struct OpenVinoInstance {
    // Field order is drop order: the request before the compiled model it came from.
    pub(super) request: ffi::InferRequest,
    pub(super) model: Arc<Compiled>,
}

/// An output in OpenVINO's memory, owned by the response; it holds the compiled model too, whose
/// memory an output may come from.
struct OvOutput {
    output: ffi::Output,
    _model: Arc<Compiled>,
}

impl AsRef<[u8]> for OvOutput {
    fn as_ref(&self) -> &[u8] {
        self.output.as_ref()
    }
}

/// Checks request input `t` against the model (a mismatch is the client's error): OpenVINO's name for
/// it, its element type, and with batch padding, for a smaller batch, the rows the model's fixed batch
/// needs.
fn check_input<'m>(model: &'m Compiled, t: &Tensor) -> Result<(&'m str, ffi::Elem, Option<i64>)> {
    let port = model.inputs.get(&t.name).ok_or_else(|| {
        let mut names: Vec<&str> = model.inputs.keys().map(String::as_str).collect();
        names.sort_unstable();
        Error::invalid(format!("the model has no input '{}' (it has: {})", t.name, names.join(", ")))
    })?;
    let elem = to_element_type(t.datatype).filter(|&e| e == port.elem).ok_or_else(|| {
        Error::invalid(format!(
            "input '{}' is {} but the model expects {}",
            t.name,
            t.datatype,
            from_element_type(port.elem).map_or_else(|| format!("element type {}", port.elem), |d| d.to_string())
        ))
    })?;
    let Some(dims) = &port.dims else { return Ok((&port.name, elem, None)) };
    let pad_to = model.padded_batch.filter(|&b| t.shape.first().is_some_and(|&r| r < b));
    let fits = dims.len() == t.shape.len()
        && dims
            .iter()
            .zip(&t.shape)
            .enumerate()
            .all(|(i, (d, &r))| (i == 0 && pad_to.is_some()) || (r >= d.min && (d.max < 0 || r <= d.max)));
    if !fits {
        let fixed_batch = dims.first().filter(|d| d.is_fixed() && t.shape.first().is_some_and(|&r| r < d.min));
        let hint = match fixed_batch {
            Some(d) => format!(
                "; the model's batch is fixed at {}: set parameter ENABLE_BATCH_PADDING to YES to pad smaller \
                     batches",
                d.min
            ),
            None => String::new(),
        };
        return Err(Error::invalid(format!(
            "input '{}' has shape {:?} but the model expects {:?} (-1: any size){hint}",
            t.name,
            t.shape,
            config_dims(dims)
        )));
    }
    Ok((&port.name, elem, pad_to))
}

impl OpenVinoInstance {
    /// The response tensor for output `name`, in place unless the request still writes its memory
    /// or it lies in an input's (OpenVINO may hand an input back as an output); `rows` keeps only
    /// the first rows of a padded batch.
    fn output(&mut self, name: &str, inputs: &[&[u8]], rows: Option<(i64, i64)>) -> Result<Tensor> {
        let port = self.model.outputs.get(name).map_or(name, String::as_str);
        let out = self.request.take_output(port).map_err(Error::internal)?;
        let dt = from_element_type(out.elem).ok_or_else(|| {
            Error::internal(format!(
                "output '{name}' has OpenVINO element type {}, which Triton cannot represent",
                out.elem
            ))
        })?;
        let mut dims = out.dims.clone();
        let data = if out.detached && !overlaps(out.as_ref(), inputs) {
            Bytes::from_owner(OvOutput { output: out, _model: self.model.clone() })
        } else {
            Bytes::copy_from_slice(out.as_ref())
        };
        let data = match rows {
            Some((kept, padded)) if dims.first() == Some(&padded) && padded > 0 => {
                let row = data.len() / usize::try_from(padded).unwrap_or(1);
                dims[0] = kept;
                data.slice(..row * usize::try_from(kept).unwrap_or(0))
            }
            _ => data,
        };
        Ok(Tensor::new(name, dt, dims, data))
    }
}

/// `bytes` followed by zeros up to `rows` rows of `shape`'s row size, and that shape.
fn padded(bytes: &[u8], shape: &[i64], rows: i64) -> (Vec<u8>, Vec<i64>) {
    let have = shape.first().copied().unwrap_or(1).max(1);
    let row = bytes.len() / usize::try_from(have).unwrap_or(1);
    let mut data = vec![0u8; row * usize::try_from(rows).unwrap_or(0)];
    let n = bytes.len().min(data.len());
    data[..n].copy_from_slice(&bytes[..n]);
    let mut dims = shape.to_vec();
    dims[0] = rows;
    (data, dims)
}

impl ModelInstance for OpenVinoInstance {
    fn execute(&mut self, req: &ExecRequest) -> Result<ExecResult> {
        let t0 = Instant::now();
        // An infer request keeps the tensors of its last run: an input left out (an `optional` one in
        // the configuration) would be read from the previous request, another client's data.
        if let Some(missing) = self.model.inputs.keys().find(|name| !req.inputs.iter().any(|t| &t.name == *name)) {
            return Err(Error::invalid(format!(
                "input '{missing}' is missing: the openvino backend needs every input of the model in each request"
            )));
        }
        // The inputs' names are OpenVINO's, borrowed from the model while the instance's request runs.
        let model = Arc::clone(&self.model);
        let mut checked = Vec::with_capacity(req.inputs.len());
        let mut rows = None;
        for t in &req.inputs {
            let (port, elem, pad_to) = check_input(&model, t)?;
            let bytes = t.data.as_host().ok_or_else(|| {
                Error::unsupported(format!("input '{}' is in device memory, which this backend cannot read", t.name))
            })?;
            let pad = pad_to.map(|to| padded(bytes, &t.shape, to));
            if let Some(to) = pad_to {
                rows = Some((t.shape.first().copied().unwrap_or(0), to));
            }
            checked.push((t, port, elem, bytes, pad));
        }
        let align = |t: &Tensor| t.datatype.byte_size().unwrap_or(1);
        let inputs: Vec<Input<'_>> = checked
            .iter()
            .map(|(t, port, elem, bytes, pad)| match pad {
                Some((data, dims)) => Input { name: port, elem: *elem, dims, bytes: data, align: align(t) },
                None => Input { name: port, elem: *elem, dims: &t.shape, bytes, align: align(t) },
            })
            .collect();
        let t1 = Instant::now();
        self.request.run(&inputs).map_err(|e| match e {
            RunError::Input(m) => Error::invalid(m),
            RunError::Infer(m) => Error::internal(m),
        })?;
        let t2 = Instant::now();
        let input_memory: Vec<&[u8]> = inputs.iter().map(|i| i.bytes).collect();
        let mut outputs: Vec<Tensor> = Vec::with_capacity(req.outputs.len());
        for name in &req.outputs {
            let tensor = match outputs.iter().find(|t| t.name == *name) {
                Some(same) => same.clone(),
                None => self.output(name, &input_memory, rows)?,
            };
            outputs.push(tensor);
        }
        let t3 = Instant::now();
        Ok(ExecResult { outputs, timings: ExecTimings::between(t0, t1, t2, t3), parameters: Default::default() })
    }

    fn served_by(&self) -> Option<String> {
        Some(self.model.served_by.clone())
    }
}
