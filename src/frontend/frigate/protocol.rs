//! Frigate's ZMQ detector protocol, as its `zmq` detector plugin speaks it over REQ/REP: what a
//! request's frames mean and how replies are laid out. Pure: no socket, no server.
//!
//! - Detection: `[header, tensor]`, the header JSON `{"shape": [...], "dtype": "uint8", "model_type":
//!   "..."}`, the tensor the raw C-order bytes. Reply: `[{"shape": [20, 6], "dtype": "float32"}, bytes]`
//!   or one frame of exactly 480 bytes; 20 rows of `[class, score, y_min, x_min, y_max, x_max]`,
//!   normalised, best first, zero-padded. An all-zero reply is "nothing found" (and what an error gets).
//! - Model check: one frame `{"model_request": true, "model_name": "..."}`, answered
//!   `{"model_available": bool, "model_loaded": bool}`.
//! - Model push: `[{"model_data": true, "model_name": "..."}, bytes]`, answered
//!   `{"model_saved": bool, "model_loaded": bool}`.

use crate::model_api::types::DataType;
use bytes::Bytes;
use serde::Deserialize;

/// Rows of a detection reply.
pub const ROWS: usize = 20;
/// Values of a row: class, score, y_min, x_min, y_max, x_max.
pub const COLS: usize = 6;
/// Bytes of a detection reply's tensor.
pub const REPLY_BYTES: usize = ROWS * COLS * 4;

#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    Detect { shape: Vec<i64>, datatype: DataType, model_type: Option<String>, tensor: Bytes },
    ModelCheck { name: String },
    ModelPush { name: String, data: Bytes },
}

/// Why a request could not be read; each is counted under its `reason` label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadRequest {
    /// No frames, or a first frame that is not a JSON object.
    Header(String),
    /// A dtype this server does not know.
    Dtype(String),
    /// A detection or push without its data frame.
    MissingData,
}

impl BadRequest {
    pub fn reason(&self) -> &'static str {
        match self {
            BadRequest::Header(_) => "header",
            BadRequest::Dtype(_) => "dtype",
            BadRequest::MissingData => "short_tensor",
        }
    }

    pub fn message(&self) -> String {
        match self {
            BadRequest::Header(why) => format!("the request's header is not Frigate's JSON: {why}"),
            BadRequest::Dtype(d) => format!("dtype '{d}' is not a tensor type tritonrs takes"),
            BadRequest::MissingData => "the request has a header but no tensor frame".to_string(),
        }
    }
}

#[derive(Deserialize)]
struct Header {
    #[serde(default)]
    shape: Option<Vec<i64>>,
    #[serde(default)]
    dtype: Option<String>,
    #[serde(default)]
    model_type: Option<String>,
    #[serde(default)]
    model_request: bool,
    #[serde(default)]
    model_data: bool,
    #[serde(default)]
    model_name: Option<String>,
}

/// numpy's dtype names (`np.dtype(...).name`) to tensor types.
pub fn dtype(name: &str) -> Option<DataType> {
    Some(match name {
        "uint8" => DataType::Uint8,
        "int8" => DataType::Int8,
        "uint16" => DataType::Uint16,
        "int16" => DataType::Int16,
        "int32" => DataType::Int32,
        "int64" => DataType::Int64,
        "float16" => DataType::Fp16,
        "float32" => DataType::Fp32,
        "float64" => DataType::Fp64,
        _ => return None,
    })
}

/// Reads a request's frames (the envelope already taken off).
pub fn parse(frames: &[Bytes]) -> Result<Request, BadRequest> {
    let first = frames.first().ok_or_else(|| BadRequest::Header("the request has no frames".into()))?;
    let header: Header = serde_json::from_slice(first).map_err(|e| BadRequest::Header(e.to_string()))?;
    let name = || header.model_name.clone().unwrap_or_default();
    if header.model_request {
        return Ok(Request::ModelCheck { name: name() });
    }
    if header.model_data {
        let data = frames.get(1).cloned().ok_or(BadRequest::MissingData)?;
        return Ok(Request::ModelPush { name: name(), data });
    }
    let shape = header.shape.ok_or_else(|| BadRequest::Header("missing field `shape`".into()))?;
    let dt = header.dtype.ok_or_else(|| BadRequest::Header("missing field `dtype`".into()))?;
    let datatype = dtype(&dt).ok_or(BadRequest::Dtype(dt))?;
    let tensor = frames.get(1).cloned().ok_or(BadRequest::MissingData)?;
    Ok(Request::Detect { shape, datatype, model_type: header.model_type, tensor })
}

/// The reply's 20x6 float32 rows (little-endian, as numpy reads them on every board Frigate runs on).
pub fn detections_bytes(rows: &[[f32; COLS]]) -> Vec<u8> {
    let mut out = vec![0u8; REPLY_BYTES];
    for (row, chunk) in rows.iter().take(ROWS).zip(out.chunks_exact_mut(COLS * 4)) {
        for (v, b) in row.iter().zip(chunk.chunks_exact_mut(4)) {
            b.copy_from_slice(&v.to_le_bytes());
        }
    }
    out
}

pub use crate::config::frigate::ReplyForm;

/// The frames of a detection reply.
pub fn detection_reply(rows: &[[f32; COLS]], form: ReplyForm) -> Vec<Bytes> {
    let data = Bytes::from(detections_bytes(rows));
    match form {
        ReplyForm::Tensor => vec![Bytes::from_static(br#"{"shape": [20, 6], "dtype": "float32"}"#), data],
        ReplyForm::Bytes => vec![data],
    }
}

pub fn model_check_reply(available: bool, loaded: bool) -> Vec<Bytes> {
    vec![Bytes::from(format!(r#"{{"model_available": {available}, "model_loaded": {loaded}}}"#))]
}

pub fn model_push_reply(saved: bool, loaded: bool) -> Vec<Bytes> {
    vec![Bytes::from(format!(r#"{{"model_saved": {saved}, "model_loaded": {loaded}}}"#))]
}

/// The model a Frigate model path names: its file name without the extension
/// (`/config/model_cache/yolov9-t-320.onnx` names `yolov9-t-320`).
pub fn model_stem(path: &str) -> &str {
    let file = path.rsplit(['/', '\\']).next().unwrap_or(path);
    match file.rsplit_once('.') {
        Some((stem, _)) if !stem.is_empty() => stem,
        _ => file,
    }
}

#[cfg(test)]
mod tests;
