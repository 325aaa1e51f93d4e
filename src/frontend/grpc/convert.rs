//! Protobuf ⇄ core types for the gRPC front-end: `ModelInferRequest` → [`InferRequest`] and
//! [`InferResponse`] → `ModelInferResponse`, with their parameters.
//!
//! Input data comes either as `raw_input_contents` (one entry per input, in input order; shared with
//! the decoded message without copying) or as typed `contents`. Outputs always go back as
//! `raw_output_contents`, as tritonserver does.

use crate::core::server::parse_version;
use crate::error::{Error, Result};
use crate::model_api::types::{
    serialize_bytes, DataType, InferRequest, InferResponse, ParamValue, Parameters, RequestedOutput, Tensor,
};
use crate::proto::inference::infer_parameter::ParameterChoice;
use crate::proto::inference::model_infer_request::InferInputTensor;
use crate::proto::inference::model_infer_response::InferOutputTensor;
use crate::proto::inference::{InferParameter, InferTensorContents, ModelInferRequest, ModelInferResponse};
use bytes::{BufMut, Bytes, BytesMut};
use std::collections::HashMap;

/// Converts protobuf parameters into core ones; a parameter without a value is an error.
pub fn params_from_proto(map: HashMap<String, InferParameter>) -> Result<Parameters> {
    let mut out = Parameters::new();
    for (k, v) in map {
        let value = match v.parameter_choice {
            Some(ParameterChoice::BoolParam(b)) => ParamValue::Bool(b),
            Some(ParameterChoice::Int64Param(i)) => ParamValue::Int(i),
            Some(ParameterChoice::Uint64Param(u)) => ParamValue::Uint(u),
            Some(ParameterChoice::DoubleParam(d)) => ParamValue::Double(d),
            Some(ParameterChoice::StringParam(s)) => ParamValue::String(s),
            None => return Err(Error::invalid(format!("parameter '{k}' has no value"))),
        };
        out.insert(k, value);
    }
    Ok(out)
}

/// Converts core parameters into protobuf ones.
pub fn params_to_proto(params: &Parameters) -> HashMap<String, InferParameter> {
    params
        .iter()
        .map(|(k, v)| {
            let choice = match v {
                ParamValue::Bool(b) => ParameterChoice::BoolParam(*b),
                ParamValue::Int(i) => ParameterChoice::Int64Param(*i),
                ParamValue::Uint(u) => ParameterChoice::Uint64Param(*u),
                ParamValue::Double(d) => ParameterChoice::DoubleParam(*d),
                ParamValue::String(s) => ParameterChoice::StringParam(s.clone()),
            };
            (k.clone(), InferParameter { parameter_choice: Some(choice) })
        })
        .collect()
}

/// Decodes one gRPC inference request. `raw_input_contents` holds the data of the inputs that have
/// neither typed contents nor shared memory, in input order (tritonclient sends none for an input in
/// shared memory).
pub fn request_from_proto(req: ModelInferRequest) -> Result<InferRequest> {
    let model_version = parse_version(&req.model_version)?;
    let parameters = params_from_proto(req.parameters)?;
    let raw_count = req.raw_input_contents.len();
    let mut raw = req.raw_input_contents.into_iter();
    let mut inputs = Vec::with_capacity(req.inputs.len());
    for input in req.inputs {
        inputs.push(input_from_proto(input, &req.model_name, raw_count, &mut raw)?);
    }
    if raw.len() > 0 {
        return Err(Error::invalid(format!(
            "expected {} raw_input_contents entries, one for each input without typed contents or shared \
             memory, got {raw_count}",
            raw_count - raw.len()
        )));
    }
    let mut outputs = Vec::with_capacity(req.outputs.len());
    for o in req.outputs {
        outputs.push(RequestedOutput::from_parameters(o.name, params_from_proto(o.parameters)?)?);
    }
    Ok(InferRequest {
        model_name: req.model_name,
        model_version,
        id: req.id,
        inputs,
        outputs,
        parameters,
        callers: Default::default(),
        trace: None,
    })
}

fn input_from_proto(
    input: InferInputTensor,
    model: &str,
    raw_count: usize,
    raw: &mut impl Iterator<Item = Bytes>,
) -> Result<Tensor> {
    let name = input.name;
    let datatype = DataType::parse(&input.datatype)
        .ok_or_else(|| Error::invalid(format!("input '{name}' has an unknown datatype '{}'", input.datatype)))?;
    let parameters = params_from_proto(input.parameters)?;
    let shm = crate::model_api::types::shm_ref(&parameters, &name)?;
    let data = if shm.is_some() {
        // The core reads the bytes from the region.
        if input.contents.is_some() {
            return Err(Error::invalid(format!(
                "unexpected 'content' provided when using shared memory for input tensor '{name}' for model '{model}'"
            )));
        }
        Bytes::new()
    } else if let Some(contents) = input.contents {
        if raw_count > 0 {
            return Err(Error::invalid(format!(
                "contents field must not be specified when using raw_input_contents for '{name}' for model '{model}'"
            )));
        }
        contents_to_bytes(&name, datatype, contents)?
    } else {
        raw.next().ok_or_else(|| {
            Error::invalid(format!("input '{name}' has no data: set its contents or send raw_input_contents"))
        })?
    };
    let mut t = Tensor::new(name, datatype, input.shape, data);
    t.parameters = parameters;
    t.shm = shm;
    Ok(t)
}

/// Serializes typed contents into the little-endian layout the core uses. The field must match the
/// datatype (int_contents for INT8/16/32, uint_contents for UINT8/16/32, ...); values that do not fit
/// the datatype are rejected.
fn contents_to_bytes(name: &str, dt: DataType, c: InferTensorContents) -> Result<Bytes> {
    let mut buf = BytesMut::new();
    let range = |v: i64| Error::invalid(format!("input '{name}': value {v} does not fit datatype {dt}"));
    let urange = |v: u64| Error::invalid(format!("input '{name}': value {v} does not fit datatype {dt}"));
    // Which typed field each datatype reads, to reject data sent in the wrong one.
    let used = match dt {
        DataType::Bool => {
            c.bool_contents.iter().for_each(|&b| buf.put_u8(u8::from(b)));
            "bool_contents"
        }
        DataType::Int8 => {
            for &v in &c.int_contents {
                buf.put_i8(i8::try_from(v).map_err(|_| range(v.into()))?);
            }
            "int_contents"
        }
        DataType::Int16 => {
            for &v in &c.int_contents {
                buf.put_i16_le(i16::try_from(v).map_err(|_| range(v.into()))?);
            }
            "int_contents"
        }
        DataType::Int32 => {
            c.int_contents.iter().for_each(|&v| buf.put_i32_le(v));
            "int_contents"
        }
        DataType::Int64 => {
            c.int64_contents.iter().for_each(|&v| buf.put_i64_le(v));
            "int64_contents"
        }
        DataType::Uint8 => {
            for &v in &c.uint_contents {
                buf.put_u8(u8::try_from(v).map_err(|_| urange(v.into()))?);
            }
            "uint_contents"
        }
        DataType::Uint16 => {
            for &v in &c.uint_contents {
                buf.put_u16_le(u16::try_from(v).map_err(|_| urange(v.into()))?);
            }
            "uint_contents"
        }
        DataType::Uint32 => {
            c.uint_contents.iter().for_each(|&v| buf.put_u32_le(v));
            "uint_contents"
        }
        DataType::Uint64 => {
            c.uint64_contents.iter().for_each(|&v| buf.put_u64_le(v));
            "uint64_contents"
        }
        DataType::Fp32 => {
            c.fp32_contents.iter().for_each(|&v| buf.put_f32_le(v));
            "fp32_contents"
        }
        DataType::Fp64 => {
            c.fp64_contents.iter().for_each(|&v| buf.put_f64_le(v));
            "fp64_contents"
        }
        DataType::Bytes => {
            return check_only(name, dt, &c, "bytes_contents").map(|()| serialize_bytes(&c.bytes_contents))
        }
        DataType::Fp16 | DataType::Bf16 => {
            return Err(Error::invalid(format!(
                "input '{name}': datatype {dt} has no typed contents field; send it in raw_input_contents"
            )))
        }
    };
    check_only(name, dt, &c, used)?;
    Ok(buf.freeze())
}

/// Fails when a typed contents field other than `used` holds values.
fn check_only(name: &str, dt: DataType, c: &InferTensorContents, used: &str) -> Result<()> {
    let fields = [
        ("bool_contents", c.bool_contents.len()),
        ("int_contents", c.int_contents.len()),
        ("int64_contents", c.int64_contents.len()),
        ("uint_contents", c.uint_contents.len()),
        ("uint64_contents", c.uint64_contents.len()),
        ("fp32_contents", c.fp32_contents.len()),
        ("fp64_contents", c.fp64_contents.len()),
        ("bytes_contents", c.bytes_contents.len()),
    ];
    match fields.iter().find(|(f, n)| *n > 0 && *f != used) {
        Some((f, _)) => Err(Error::invalid(format!("input '{name}' of datatype {dt} must use {used}, not {f}"))),
        None => Ok(()),
    }
}

/// Encodes one inference response; every output's data goes into `raw_output_contents`.
pub fn response_to_proto(resp: InferResponse) -> Result<ModelInferResponse> {
    let mut outputs = Vec::with_capacity(resp.outputs.len());
    let mut raw = Vec::with_capacity(resp.outputs.len());
    for t in resp.outputs {
        // An output written into the client's shared memory gets an empty entry, as in Triton, so the
        // entries stay in output order.
        raw.push(if t.data.shared_memory().is_some() { Bytes::new() } else { t.data.to_host()? });
        outputs.push(InferOutputTensor {
            name: t.name,
            datatype: t.datatype.as_str().to_string(),
            shape: t.shape,
            parameters: params_to_proto(&t.parameters),
            contents: None,
        });
    }
    Ok(ModelInferResponse {
        model_name: resp.model_name,
        model_version: resp.model_version.to_string(),
        id: resp.id,
        parameters: params_to_proto(&resp.parameters),
        outputs,
        raw_output_contents: raw,
    })
}

#[cfg(test)]
mod tests;
