//! Decoding a KServe v2 inference request: the JSON form, Triton's binary tensor data extension (a JSON
//! header, then the tensors' bytes) and the raw binary form (the whole body one input's data).
//! Pure functions over bytes, so they are unit-tested and fuzzed without a server.

use crate::error::{Error, Result};
use crate::model_api::types::{
    bytes_elements, element_count, DataType, InferRequest, ParamValue, Parameters, RequestedOutput, Tensor,
};
use crate::tensor::view::push_float;
use bytes::{BufMut, Bytes};
use serde::de::{DeserializeSeed, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::fmt;

/// A decoded inference request plus how the client wants its outputs encoded.
#[derive(Debug)]
pub struct DecodedRequest {
    pub request: InferRequest,
    /// `binary_data_output` request parameter: outputs not named default to binary.
    pub binary_default: bool,
}

/// Which outputs go out as binary data; taken before the request moves into the core.
pub struct BinaryOutputs {
    named: Vec<(String, bool)>,
    default: bool,
}

impl BinaryOutputs {
    /// Whether output `name` goes out as binary data.
    pub fn is_binary(&self, name: &str) -> bool {
        self.named.iter().find(|(o, _)| o == name).map_or(self.default, |(_, b)| *b)
    }
}

impl DecodedRequest {
    /// The binary choice of every output, for encoding the response.
    pub fn binary_outputs(&self) -> BinaryOutputs {
        let named = self.request.outputs.iter().map(|o| (o.name.clone(), self.output_is_binary(&o.name))).collect();
        BinaryOutputs { named, default: self.binary_default }
    }

    /// Whether output `name` goes out as binary data.
    pub fn output_is_binary(&self, name: &str) -> bool {
        self.request
            .outputs
            .iter()
            .find(|o| o.name == name)
            .and_then(|o| o.parameters.get("binary_data").and_then(ParamValue::as_bool))
            .unwrap_or(self.binary_default)
    }
}

#[derive(Deserialize)]
struct JsonRequest<'a> {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    parameters: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(borrow)]
    inputs: Vec<JsonInput<'a>>,
    #[serde(default)]
    outputs: Option<Vec<JsonOutput>>,
}

#[derive(Deserialize)]
struct JsonInput<'a> {
    name: String,
    shape: Vec<i64>,
    datatype: String,
    #[serde(default)]
    parameters: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct JsonOutput {
    name: String,
    #[serde(default)]
    parameters: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Converts JSON parameters into typed ones; nested objects and arrays are rejected.
pub fn json_params(map: Option<serde_json::Map<String, serde_json::Value>>) -> Result<Parameters> {
    let mut out = Parameters::new();
    for (k, v) in map.unwrap_or_default() {
        let p = match v {
            serde_json::Value::Bool(b) => ParamValue::Bool(b),
            serde_json::Value::String(s) => ParamValue::String(s),
            serde_json::Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    ParamValue::Int(i)
                } else if let Some(u) = n.as_u64() {
                    ParamValue::Uint(u)
                } else {
                    ParamValue::Double(n.as_f64().unwrap_or(0.0))
                }
            }
            _ => return Err(Error::invalid(format!("parameter '{k}' must be a bool, number or string"))),
        };
        out.insert(k, p);
    }
    Ok(out)
}

/// Decodes a request body. `header_len` is the `Inference-Header-Content-Length` header: the JSON part's
/// length, with binary tensor data after it. `Some(0)` (a raw binary body) is handled by the caller,
/// which knows the model's single input.
pub fn decode_request(
    body: Bytes,
    header_len: Option<usize>,
    model: &str,
    version: Option<i64>,
) -> Result<DecodedRequest> {
    let json_len = match header_len {
        Some(n) if n > body.len() => {
            return Err(Error::invalid(format!(
                "Inference-Header-Content-Length {n} is larger than the request body ({} bytes)",
                body.len()
            )))
        }
        Some(n) => n,
        None => body.len(),
    };
    let json = &body[..json_len];
    let parsed: JsonRequest<'_> =
        serde_json::from_slice(json).map_err(|e| Error::invalid(format!("failed to parse the request JSON: {e}")))?;
    let mut binary_offset = json_len;
    let mut inputs = Vec::with_capacity(parsed.inputs.len());
    for inp in parsed.inputs {
        inputs.push(decode_input(inp, &body, &mut binary_offset)?);
    }
    if binary_offset != body.len() {
        return Err(Error::invalid(format!(
            "the request body has {} bytes of binary data that no input claims",
            body.len() - binary_offset
        )));
    }
    let outputs = parsed.outputs.unwrap_or_default().into_iter().map(decode_output).collect::<Result<Vec<_>>>()?;
    let parameters = json_params(parsed.parameters)?;
    let binary_default = match parameters.get("binary_data_output") {
        None => false,
        Some(v) => v.as_bool().ok_or_else(|| Error::invalid("binary_data_output must be a bool"))?,
    };
    Ok(DecodedRequest {
        request: InferRequest {
            model_name: model.to_string(),
            model_version: version,
            id: parsed.id.unwrap_or_default(),
            inputs,
            outputs,
            parameters,
            callers: Default::default(),
            trace: None,
        },
        binary_default,
    })
}

/// Decodes one input: its data from JSON, from the binary part of `body` at `binary_offset` (which it
/// advances), or none for an input in the client's shared memory.
fn decode_input(inp: JsonInput<'_>, body: &Bytes, binary_offset: &mut usize) -> Result<Tensor> {
    let datatype = DataType::parse(&inp.datatype)
        .ok_or_else(|| Error::invalid(format!("input '{}' has unknown datatype '{}'", inp.name, inp.datatype)))?;
    let params = json_params(inp.parameters)?;
    let count = element_count(&inp.shape)
        .ok_or_else(|| Error::invalid(format!("input '{}' has an invalid shape {:?}", inp.name, inp.shape)))?;
    let shm = crate::model_api::types::shm_ref(&params, &inp.name)?;
    if shm.is_some() {
        // The core reads the bytes from the region; nothing else may carry them.
        let mut set = Vec::new();
        if inp.data.is_some() {
            set.push("'data'");
        }
        if params.contains_key("binary_data_size") {
            set.push("'binary_data_size'");
        }
        if !set.is_empty() {
            return Err(Error::invalid(format!(
                "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', \
                 'shared_memory_region' in 'parameters'. But set {} 'shared_memory_region'",
                set.join(" ")
            )));
        }
        let mut t = Tensor::new(inp.name, datatype, inp.shape, Bytes::new());
        t.parameters = params;
        t.shm = shm;
        return Ok(t);
    }
    let data: Bytes = match (params.get("binary_data_size"), inp.data) {
        (Some(size), None) => {
            let size = size.as_i64().and_then(|s| usize::try_from(s).ok()).ok_or_else(|| {
                Error::invalid(format!("input '{}': binary_data_size must be a non-negative integer", inp.name))
            })?;
            let end = binary_offset.checked_add(size).filter(|&e| e <= body.len()).ok_or_else(|| {
                Error::invalid(format!(
                    "input '{}' declares binary_data_size {size} but the body holds only {} more bytes",
                    inp.name,
                    body.len() - *binary_offset
                ))
            })?;
            let slice = body.slice(*binary_offset..end);
            *binary_offset = end;
            slice
        }
        (Some(_), Some(_)) => {
            return Err(Error::invalid(format!("input '{}' has both binary_data_size and JSON data", inp.name)))
        }
        (None, Some(raw)) => parse_json_data(raw, datatype, count, &inp.name)?,
        (None, None) => return Err(Error::invalid(format!("input '{}' has no data", inp.name))),
    };
    let mut t = Tensor::new(inp.name, datatype, inp.shape, data);
    t.parameters = params.into_iter().filter(|(k, _)| k != "binary_data_size").collect();
    Ok(t)
}

/// Decodes one requested output and checks its `binary_data` parameter.
fn decode_output(o: JsonOutput) -> Result<RequestedOutput> {
    let parameters = json_params(o.parameters)?;
    if parameters.get("binary_data").is_some_and(|v| v.as_bool().is_none()) {
        return Err(Error::invalid(format!("output '{}': binary_data must be a bool", o.name)));
    }
    // tritonclient sends `binary_data: false` with a shared-memory output; only `true` conflicts.
    let binary = parameters.get("binary_data").and_then(ParamValue::as_bool) == Some(true);
    if binary && parameters.contains_key(crate::model_api::types::REGION) {
        return Err(Error::invalid("Output can't set both 'shared_memory_region' and 'binary_data'"));
    }
    RequestedOutput::from_parameters(o.name, parameters)
}

/// Parses JSON tensor data (flat or nested arrays) straight into the binary layout of `dt`.
pub fn parse_json_data(raw: &RawValue, dt: DataType, count: usize, name: &str) -> Result<Bytes> {
    let mut out = Vec::with_capacity(count.saturating_mul(dt.byte_size().unwrap_or(8)).min(1 << 26));
    let mut n = 0usize;
    let mut de = serde_json::Deserializer::from_str(raw.get());
    Flatten { dt, out: &mut out, count: &mut n }
        .deserialize(&mut de)
        .map_err(|e| Error::invalid(format!("input '{name}': invalid data for datatype {dt}: {e}")))?;
    if n != count {
        return Err(Error::invalid(format!("input '{name}': the data holds {n} elements but the shape needs {count}")));
    }
    Ok(Bytes::from(out))
}

/// Flattens nested JSON arrays of scalars into little-endian bytes of one datatype.
struct Flatten<'a> {
    dt: DataType,
    out: &'a mut Vec<u8>,
    count: &'a mut usize,
}

impl<'de> DeserializeSeed<'de> for Flatten<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

macro_rules! push_int {
    ($self:ident, $v:expr, $E:ty, $($dt:ident => $ty:ty),*) => {
        match $self.dt {
            $(DataType::$dt => {
                let x = <$ty>::try_from($v).map_err(|_| <$E>::custom(format!("{} is out of range for {}", $v, $self.dt)))?;
                $self.out.extend_from_slice(&x.to_le_bytes());
            })*
            DataType::Fp16 | DataType::Bf16 | DataType::Fp32 | DataType::Fp64 => {
                push_float($self.dt, $v as f64, $self.out);
            }
            DataType::Bool | DataType::Bytes => return Err(<$E>::custom(format!("expected a {} value, got a number", $self.dt))),
        }
    };
}

impl<'de> Visitor<'de> for Flatten<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an array of {} values", self.dt)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Flatten { dt: self.dt, out: &mut *self.out, count: &mut *self.count })?.is_some() {}
        Ok(())
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<(), E> {
        if self.dt != DataType::Bool {
            return Err(E::custom(format!("expected a {} value, got a bool", self.dt)));
        }
        self.out.push(v as u8);
        *self.count += 1;
        Ok(())
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<(), E> {
        push_int!(self, v, E, Uint8 => u8, Uint16 => u16, Uint32 => u32, Uint64 => u64, Int8 => i8, Int16 => i16, Int32 => i32, Int64 => i64);
        *self.count += 1;
        Ok(())
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<(), E> {
        push_int!(self, v, E, Uint8 => u8, Uint16 => u16, Uint32 => u32, Uint64 => u64, Int8 => i8, Int16 => i16, Int32 => i32, Int64 => i64);
        *self.count += 1;
        Ok(())
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<(), E> {
        match self.dt {
            dt if dt.is_float() => {
                push_float(dt, v, self.out);
            }
            _ if v.fract() == 0.0 && v.abs() < 9.0e15 => return self.visit_i64(v as i64),
            _ => return Err(E::custom(format!("expected a {} value, got {v}", self.dt))),
        }
        *self.count += 1;
        Ok(())
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        if self.dt != DataType::Bytes {
            return Err(E::custom(format!("expected a {} value, got a string", self.dt)));
        }
        self.out.put_u32_le(v.len() as u32);
        self.out.extend_from_slice(v.as_bytes());
        *self.count += 1;
        Ok(())
    }
}

/// Builds the single input of a raw binary request (`Inference-Header-Content-Length: 0`): the whole
/// body is the one input's data, its shape deduced from the configuration and the data size.
pub fn raw_input(body: Bytes, name: &str, dt: DataType, dims: &[i64], batching: bool) -> Result<Tensor> {
    let elems = match dt.byte_size() {
        Some(size) => {
            if !body.len().is_multiple_of(size) {
                return Err(Error::invalid(format!(
                    "raw binary request: {} bytes is not a whole number of {dt} elements",
                    body.len()
                )));
            }
            body.len() / size
        }
        None => bytes_elements(&body)?.len(),
    };
    let mut shape: Vec<i64> = if batching { vec![1] } else { Vec::new() };
    let wildcards = dims.iter().filter(|&&d| d == -1).count();
    let known: i64 = dims.iter().filter(|&&d| d >= 0).product();
    match wildcards {
        0 => shape.extend_from_slice(dims),
        1 if known > 0 && elems as i64 % known == 0 => {
            shape.extend(dims.iter().map(|&d| if d == -1 { elems as i64 / known } else { d }))
        }
        _ => {
            return Err(Error::invalid(format!(
                "raw binary request: the shape of input '{name}' cannot be deduced from its configuration {dims:?}"
            )))
        }
    }
    Ok(Tensor::new(name, dt, shape, body))
}

#[cfg(test)]
mod tests;
