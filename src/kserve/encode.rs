//! Encoding a KServe v2 response and its outputs, with Triton's binary tensor data extension: each
//! output is an object with `name`, `datatype`, `shape`, optional `parameters` and either `data` (a flat
//! JSON array of the datatype) or, for a binary output, `parameters.binary_data_size` and its bytes after
//! the JSON. The HTTP responses, the MQTT results and the vision pipeline's raw outputs all encode
//! through here.

use crate::error::{Error, Result};
use crate::model_api::types::InferResponse;
use crate::tensor::{bytes_elements, DataType, ParamValue, Parameters, Tensor};
use bytes::{Bytes, BytesMut};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

/// Serializes tensor bytes as a flat JSON array of the tensor's datatype: booleans, integers (exact, as
/// the native type), floats (half and bfloat16 widened to single precision, printed shortest), and BYTES
/// elements as strings (invalid UTF-8 replaced).
pub struct JsonData<'a> {
    pub dt: DataType,
    pub bytes: &'a [u8],
}

impl Serialize for JsonData<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        macro_rules! seq {
            ($ty:ty, $conv:expr) => {{
                const N: usize = std::mem::size_of::<$ty>();
                let mut seq = s.serialize_seq(Some(self.bytes.len() / N))?;
                for c in self.bytes.chunks_exact(N) {
                    let mut a = [0u8; N];
                    a.copy_from_slice(c);
                    seq.serialize_element(&$conv(<$ty>::from_le_bytes(a)))?;
                }
                seq.end()
            }};
        }
        match self.dt {
            DataType::Bool => seq!(u8, |b: u8| b != 0),
            DataType::Uint8 => seq!(u8, |v| v),
            DataType::Int8 => seq!(i8, |v| v),
            DataType::Uint16 => seq!(u16, |v| v),
            DataType::Int16 => seq!(i16, |v| v),
            DataType::Uint32 => seq!(u32, |v| v),
            DataType::Int32 => seq!(i32, |v| v),
            DataType::Uint64 => seq!(u64, |v| v),
            DataType::Int64 => seq!(i64, |v| v),
            DataType::Fp32 => seq!(f32, |v| v),
            DataType::Fp64 => seq!(f64, |v| v),
            DataType::Fp16 => seq!(half::f16, |v: half::f16| v.to_f32()),
            DataType::Bf16 => seq!(half::bf16, |v: half::bf16| v.to_f32()),
            DataType::Bytes => {
                let elems = bytes_elements(self.bytes).map_err(serde::ser::Error::custom)?;
                let mut seq = s.serialize_seq(Some(elems.len()))?;
                for e in elems {
                    seq.serialize_element(&String::from_utf8_lossy(e))?;
                }
                seq.end()
            }
        }
    }
}

/// Serializes typed parameters as a JSON object (in name order).
pub struct JsonParams<'a>(pub &'a Parameters);

impl Serialize for JsonParams<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            match v {
                ParamValue::Bool(b) => m.serialize_entry(k, b)?,
                ParamValue::Int(i) => m.serialize_entry(k, i)?,
                ParamValue::Uint(u) => m.serialize_entry(k, u)?,
                ParamValue::Double(d) => m.serialize_entry(k, d)?,
                ParamValue::String(st) => m.serialize_entry(k, st)?,
            }
        }
        m.end()
    }
}

/// The order of an output object's keys: KServe's (`name, datatype, shape, parameters, data`, as the
/// HTTP front-end answers), or by name (`data, datatype, name, parameters, shape`, as the MQTT results,
/// which are JSON objects with sorted keys, have always had them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyOrder {
    KServe,
    Sorted,
}

/// One output, ready to encode: its host bytes, and whether they go out as binary data.
struct Prepared<'a> {
    tensor: &'a Tensor,
    /// The bytes on the host; empty for an output written into the client's shared memory.
    host: Bytes,
    /// `parameters` as sent: the tensor's own, plus `binary_data_size` for a binary output.
    parameters: Parameters,
    binary: bool,
}

/// A response's outputs, read to the host once, with the JSON and binary parts derived from them.
pub struct Outputs<'a> {
    items: Vec<Prepared<'a>>,
}

impl<'a> Outputs<'a> {
    /// Prepares `outputs`; those for which `binary(name)` is true go after the JSON as binary data. An
    /// output written into the client's shared memory goes back as its name, datatype and shape only.
    pub fn new(outputs: &'a [Tensor], binary: impl Fn(&str) -> bool) -> Result<Self> {
        let mut items = Vec::with_capacity(outputs.len());
        for t in outputs {
            let placed = t.data.shared_memory().is_some();
            let host = if placed { Bytes::new() } else { t.data.to_host()? };
            let binary = !placed && binary(&t.name);
            let mut parameters = t.parameters.clone();
            if binary {
                parameters.insert("binary_data_size".into(), ParamValue::Int(host.len() as i64));
            }
            items.push(Prepared { tensor: t, host, parameters, binary });
        }
        Ok(Outputs { items })
    }

    /// The JSON array of output objects, with keys in `order`.
    pub fn json(&self, order: KeyOrder) -> OutputsJson<'_> {
        OutputsJson { outputs: self, order }
    }

    /// The bytes of the binary outputs, in output order, as they follow the JSON; `None` when no output
    /// is binary.
    pub fn binary_tail(&self) -> Option<Bytes> {
        let parts: Vec<&Bytes> = self.items.iter().filter(|p| p.binary).map(|p| &p.host).collect();
        if parts.is_empty() {
            return None;
        }
        if let [one] = parts.as_slice() {
            // One binary output: its bytes as they are, no copy.
            return Some((*one).clone());
        }
        let mut out = BytesMut::with_capacity(parts.iter().map(|b| b.len()).sum());
        parts.iter().for_each(|b| out.extend_from_slice(b));
        Some(out.freeze())
    }

    /// Appends the binary outputs' bytes to `out` (after the JSON).
    pub fn write_binary(&self, out: &mut BytesMut) {
        self.items.iter().filter(|p| p.binary).for_each(|p| out.extend_from_slice(&p.host));
    }

    /// Whether any output goes out as binary data.
    pub fn any_binary(&self) -> bool {
        self.items.iter().any(|p| p.binary)
    }

    /// The number of bytes the binary outputs take.
    pub fn binary_len(&self) -> usize {
        self.items.iter().filter(|p| p.binary).map(|p| p.host.len()).sum()
    }
}

/// Serializes [`Outputs`] as the KServe `outputs` array.
pub struct OutputsJson<'a> {
    outputs: &'a Outputs<'a>,
    order: KeyOrder,
}

impl Serialize for OutputsJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.outputs.items.len()))?;
        for p in &self.outputs.items {
            seq.serialize_element(&OutputJson { p, order: self.order })?;
        }
        seq.end()
    }
}

struct OutputJson<'a> {
    p: &'a Prepared<'a>,
    order: KeyOrder,
}

impl Serialize for OutputJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let t = self.p.tensor;
        let parameters = (!self.p.parameters.is_empty()).then_some(JsonParams(&self.p.parameters));
        let data = (!self.p.binary && t.data.shared_memory().is_none())
            .then(|| JsonData { dt: t.datatype, bytes: &self.p.host });
        let n = 3 + usize::from(parameters.is_some()) + usize::from(data.is_some());
        let mut m = s.serialize_map(Some(n))?;
        match self.order {
            KeyOrder::KServe => {
                m.serialize_entry("name", &t.name)?;
                m.serialize_entry("datatype", t.datatype.as_str())?;
                m.serialize_entry("shape", &t.shape)?;
                if let Some(p) = &parameters {
                    m.serialize_entry("parameters", p)?;
                }
                if let Some(d) = &data {
                    m.serialize_entry("data", d)?;
                }
            }
            KeyOrder::Sorted => {
                if let Some(d) = &data {
                    m.serialize_entry("data", d)?;
                }
                m.serialize_entry("datatype", t.datatype.as_str())?;
                m.serialize_entry("name", &t.name)?;
                if let Some(p) = &parameters {
                    m.serialize_entry("parameters", p)?;
                }
                m.serialize_entry("shape", &t.shape)?;
            }
        }
        m.end()
    }
}

/// An encoded response body; `header_len` is set when binary data follows the JSON.
pub struct EncodedResponse {
    pub body: Bytes,
    pub header_len: Option<usize>,
}

#[derive(Serialize)]
struct JsonResponse<'a> {
    model_name: &'a str,
    model_version: String,
    #[serde(skip_serializing_if = "str::is_empty")]
    id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<JsonParams<'a>>,
    outputs: OutputsJson<'a>,
}

/// Encodes a response: outputs for which `binary(name)` is true go after the JSON as binary data.
pub fn encode_response(resp: &InferResponse, binary: impl Fn(&str) -> bool) -> Result<EncodedResponse> {
    let outputs = Outputs::new(&resp.outputs, binary)?;
    let json = JsonResponse {
        model_name: &resp.model_name,
        model_version: resp.model_version.to_string(),
        id: &resp.id,
        parameters: (!resp.parameters.is_empty()).then_some(JsonParams(&resp.parameters)),
        outputs: outputs.json(KeyOrder::KServe),
    };
    let mut buf = serde_json::to_vec(&json).map_err(|e| Error::internal(format!("cannot encode the response: {e}")))?;
    let binary_len = outputs.binary_len();
    if !outputs.any_binary() {
        return Ok(EncodedResponse { body: Bytes::from(buf), header_len: None });
    }
    let header_len = buf.len();
    let mut out = BytesMut::with_capacity(header_len + binary_len);
    out.extend_from_slice(&buf);
    buf.clear();
    outputs.write_binary(&mut out);
    Ok(EncodedResponse { body: out.freeze(), header_len: Some(header_len) })
}

#[cfg(test)]
mod tests;
