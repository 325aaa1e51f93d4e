//! Triton's generate extension (`/generate`, `/generate_stream`), transport-neutral: a flat JSON object
//! becomes an inference request and a response becomes a flat JSON object, as tritonserver 2.51 maps
//! them. A field named after a model input becomes that input (a scalar or a flat list, of the input's
//! declared datatype, shaped by its declared shape); `parameters` and every other field become request
//! parameters; `id` is the request's id (and, as in tritonserver, a parameter too). Each output of a
//! response becomes a field (a one-element output a scalar), beside `model_name`, `model_version` and
//! `id`. Errors carry tritonserver's words.

use crate::error::{Error, Result};
use crate::model_api::types::{DataType, InferRequest, InferResponse, ParamValue, Tensor};
use crate::tensor::view::push_float;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

/// A model input as the generate extension maps it: its name, datatype and shape as the model's
/// metadata reports them (a batching model's shape starts with its -1 batch dimension).
#[derive(Debug, Clone)]
pub struct GenerateInput {
    pub name: String,
    pub datatype: DataType,
    pub shape: Vec<i64>,
}

/// Decodes a generate request `body` for version `version` of model `model`, whose inputs are `inputs`.
pub fn decode_generate(
    body: &[u8],
    model: &str,
    version: Option<i64>,
    inputs: &[GenerateInput],
) -> Result<InferRequest> {
    let members = parse_object(body)?;
    let mut req = InferRequest { model_name: model.to_string(), model_version: version, ..Default::default() };
    if let Some((_, raw)) = members.0.iter().find(|(k, _)| k == "id") {
        req.id = serde_json::from_str::<String>(raw.get())
            .map_err(|_| Error::invalid("Unable to parse 'id': attempt to access JSON non-string as string"))?;
    }
    let mut builder = Builder { req, inputs };
    for (key, raw) in members.0 {
        if key == "parameters" {
            builder.parameters(raw)?;
        } else {
            builder.field(&key, raw)?;
        }
    }
    Ok(builder.req)
}

/// Encodes one response as the generate extension's JSON object (keys sorted, as tritonserver writes
/// them).
pub fn encode_generate(resp: &InferResponse) -> Result<Vec<u8>> {
    let mut fields: BTreeMap<&str, Value> = BTreeMap::new();
    for t in &resp.outputs {
        let host = t.data.to_host()?;
        let data = serde_json::to_value(super::JsonData { dt: t.datatype, bytes: &host })
            .map_err(|e| Error::internal(format!("cannot encode output '{}': {e}", t.name)))?;
        let value = match data {
            Value::Array(mut one) if one.len() == 1 => one.pop().unwrap_or(Value::Null),
            other => other,
        };
        fields.insert(&t.name, value);
    }
    if !resp.id.is_empty() {
        fields.insert("id", Value::from(resp.id.as_str()));
    }
    fields.insert("model_name", Value::from(resp.model_name.as_str()));
    fields.insert("model_version", Value::from(resp.model_version.to_string()));
    serde_json::to_vec(&fields).map_err(|e| Error::internal(format!("cannot encode the response: {e}")))
}

/// The `{"error": message}` object of a failed request or response.
pub fn encode_generate_error(message: &str) -> Vec<u8> {
    serde_json::to_vec(&super::error_body(message)).unwrap_or_default()
}

/// tritonserver's error for `/generate` on a model that answered with other than one response.
pub const NOT_ONE_RESPONSE: &str = "generate expects model to produce exactly 1 response, use generate stream for \
                                    model that generates various number of responses";

/// An object's members in the order written, duplicates kept, values still raw JSON.
struct Members<'a>(Vec<(String, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Members<'de>, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(4));
                while let Some(entry) = map.next_entry::<String, &'de RawValue>()? {
                    out.push(entry);
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// Parses the body: JSON (tritonserver's words for an empty document), and an object.
fn parse_object(body: &[u8]) -> Result<Members<'_>> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(Error::invalid(format!(
            "failed to parse the request JSON buffer: The document is empty. at {}",
            body.len()
        )));
    }
    let raw: &RawValue = serde_json::from_slice(body)
        .map_err(|e| Error::invalid(format!("failed to parse the request JSON buffer: {e}")))?;
    object_members(raw).ok_or_else(|| Error::invalid("attempt to get members for non-object"))
}

/// Reads a member's value. The body was checked as JSON text already, but a number too large for a
/// double only fails here.
fn read_value(raw: &RawValue) -> Result<Value> {
    serde_json::from_str(raw.get()).map_err(|e| Error::invalid(format!("failed to parse the request JSON buffer: {e}")))
}

/// The members of `raw` when it is an object.
fn object_members(raw: &RawValue) -> Option<Members<'_>> {
    if !raw.get().starts_with('{') {
        return None;
    }
    serde_json::from_str(raw.get()).ok()
}

/// The request being built, and the model's inputs.
struct Builder<'a> {
    req: InferRequest,
    inputs: &'a [GenerateInput],
}

impl Builder<'_> {
    /// A field: the input of that name, else a request parameter.
    fn field(&mut self, key: &str, raw: &RawValue) -> Result<()> {
        match self.inputs.iter().find(|i| i.name == key) {
            Some(spec) => self.input(spec, raw),
            None => self.parameter(key, raw),
        }
    }

    /// `parameters`: an object whose members map as top-level fields do (an input's name included, as
    /// in tritonserver).
    fn parameters(&mut self, raw: &RawValue) -> Result<()> {
        let members = object_members(raw).ok_or_else(|| {
            Error::invalid(
                "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object",
            )
        })?;
        for (key, value) in members.0 {
            self.field(&key, value).map_err(|e| e.context("Converting keyword: 'parameters'"))?;
        }
        Ok(())
    }

    fn parameter(&mut self, key: &str, raw: &RawValue) -> Result<()> {
        let value = match read_value(raw)? {
            Value::String(s) => ParamValue::String(s),
            Value::Bool(b) => ParamValue::Bool(b),
            // An integer beyond i64 is a double, as in tritonserver.
            Value::Number(n) => {
                n.as_i64().map_or_else(|| ParamValue::Double(n.as_f64().unwrap_or(0.0)), ParamValue::Int)
            }
            _ => {
                return Err(Error::invalid(format!(
                    "parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'."
                )))
            }
        };
        self.req.parameters.insert(key.to_string(), value);
        Ok(())
    }

    fn input(&mut self, spec: &GenerateInput, raw: &RawValue) -> Result<()> {
        if self.req.inputs.iter().any(|t| t.name == spec.name) {
            return Err(Error::invalid(format!(
                "{} input '{}' already exists in request",
                request_tag(&self.req.id),
                spec.name
            )));
        }
        let value = read_value(raw)?;
        let count = match &value {
            Value::Array(items) => items.len(),
            _ => 1,
        };
        let shape = resolve_shape(&spec.shape, count).ok_or_else(|| {
            Error::invalid(format!("The schema can not convert input '{}' to tensor with proper shape", spec.name))
        })?;
        if matches!(spec.datatype, DataType::Fp16 | DataType::Bf16) {
            return Err(Error::invalid(format!(
                "receiving {} data via JSON is not supported. Please use the binary data format for input {}",
                spec.datatype, spec.name
            )));
        }
        let mut data = Vec::with_capacity(count.saturating_mul(spec.datatype.byte_size().unwrap_or(16)).min(1 << 20));
        let mut n = 0usize;
        let leaf = Leaf { dt: spec.datatype, name: &spec.name };
        flatten(&value, &leaf, &mut data, &mut n)?;
        if n != count {
            return Err(Error::invalid(if spec.datatype == DataType::Bytes {
                format!(
                    "{} unexpected number of string elements {n} for inference input '{}' for model '{}', expecting \
                     {count}",
                    request_tag(&self.req.id),
                    spec.name,
                    self.req.model_name
                )
            } else {
                "Unable to parse 'data': Shape does not match true shape of 'data' field".to_string()
            }));
        }
        self.req.inputs.push(Tensor::new(spec.name.clone(), spec.datatype, shape, data));
        Ok(())
    }
}

/// tritonserver's prefix naming a request in its errors.
fn request_tag(id: &str) -> String {
    format!("[request id: {}]", if id.is_empty() { "<id_unknown>" } else { id })
}

/// The shape of an input given `count` elements, as tritonserver resolves it from the declared shape:
/// without wildcards it must hold `count` elements; otherwise the last -1 takes what the fixed
/// dimensions leave and any other -1 is 1. `None` when `count` does not fit.
pub fn resolve_shape(dims: &[i64], count: usize) -> Option<Vec<i64>> {
    let count = i64::try_from(count).ok()?;
    let fixed = dims.iter().filter(|&&d| d >= 0).try_fold(1i64, |acc, &d| acc.checked_mul(d))?;
    match dims.iter().rposition(|&d| d < 0) {
        None => (fixed == count).then(|| dims.to_vec()),
        Some(last) if fixed > 0 && count % fixed == 0 => Some(
            dims.iter()
                .enumerate()
                .map(|(i, &d)| {
                    if i == last {
                        count / fixed
                    } else if d < 0 {
                        1
                    } else {
                        d
                    }
                })
                .collect(),
        ),
        Some(_) => None,
    }
}

/// What one element is read as.
struct Leaf<'a> {
    dt: DataType,
    name: &'a str,
}

impl Leaf<'_> {
    /// tritonserver's error for an element of the wrong JSON type.
    fn wrong_type(&self) -> Error {
        Error::invalid(match self.dt {
            DataType::Bytes => "Unable to parse JSON bytes array: attempt to access JSON non-string as string",
            DataType::Bool => "Unable to parse 'data': attempt to access JSON non-boolean as boolean",
            DataType::Uint8 | DataType::Uint16 | DataType::Uint32 | DataType::Uint64 => {
                "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer"
            }
            DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
                "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"
            }
            _ => "Unable to parse 'data': attempt to access JSON non-number as double",
        })
    }

    /// An integer that does not fit the datatype (tritonserver wraps it silently).
    fn out_of_range(&self, v: impl fmt::Display) -> Error {
        Error::invalid(format!(
            "Unable to parse 'data': {v} is out of range for input '{}' of datatype {}",
            self.name, self.dt
        ))
    }

    /// Appends one element's bytes.
    fn push(&self, v: &Value, out: &mut Vec<u8>) -> Result<()> {
        macro_rules! int {
            ($get:ident, $($dt:ident => $ty:ty),*) => {{
                let x = v.$get().ok_or_else(|| self.wrong_type())?;
                match self.dt {
                    $(DataType::$dt => out.extend_from_slice(&<$ty>::try_from(x).map_err(|_| self.out_of_range(x))?.to_le_bytes()),)*
                    _ => return Err(self.wrong_type()),
                }
            }};
        }
        match self.dt {
            DataType::Bytes => {
                let s = v.as_str().ok_or_else(|| self.wrong_type())?;
                let len = u32::try_from(s.len()).map_err(|_| self.out_of_range(s.len()))?;
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
            DataType::Bool => out.push(u8::from(v.as_bool().ok_or_else(|| self.wrong_type())?)),
            DataType::Uint8 | DataType::Uint16 | DataType::Uint32 | DataType::Uint64 => {
                int!(as_u64, Uint8 => u8, Uint16 => u16, Uint32 => u32, Uint64 => u64)
            }
            DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
                int!(as_i64, Int8 => i8, Int16 => i16, Int32 => i32, Int64 => i64)
            }
            dt => {
                let x = v.as_f64().ok_or_else(|| self.wrong_type())?;
                push_float(dt, x, out);
            }
        }
        Ok(())
    }
}

/// Appends the elements of `v` (a scalar, or arrays nested to any depth) and counts them in `n`.
fn flatten(v: &Value, leaf: &Leaf<'_>, out: &mut Vec<u8>, n: &mut usize) -> Result<()> {
    match v {
        Value::Array(items) => items.iter().try_for_each(|i| flatten(i, leaf, out, n)),
        scalar => {
            leaf.push(scalar, out)?;
            *n += 1;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests;
