//! The transport-neutral image pipeline: a JPEG or PNG payload → decode (EXIF orientation) → resize
//! and normalise as the model's `image.*` parameters say → [`Server::infer`] → classes, detections in
//! the picture's pixels, or the raw outputs. The MQTT bridge and the DeepStack HTTP endpoints call
//! [`infer_image`]; nothing here knows a transport.

pub mod frames;
pub mod postprocess;
pub mod preprocess;
pub mod spec;

use crate::core::Server;
use crate::error::{Error, Result};
use crate::model_api::types::{InferRequest, Tensor};
use bytes::Bytes;
use serde::Serialize;
use serde_json::{json, Map, Value};
use spec::{ImageSpec, OutputKind, NMS_OUTPUTS};
use std::time::Instant;

/// Per-request post-processing choices.
#[derive(Debug, Clone, Default)]
pub struct PostOptions {
    /// Drops classes and detections scoring less; overrides `detection.score_threshold`.
    pub min_confidence: Option<f32>,
    /// The most classes (default 5) or detections (default 300) answered.
    pub top_k: Option<usize>,
}

/// Where a request's time went, in milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Timings {
    pub decode: f64,
    pub preprocess: f64,
    /// In the server but not computing: the scheduler queue, validation, copies.
    pub queue: f64,
    /// The backend's compute time.
    pub infer: f64,
    pub postprocess: f64,
    pub total: f64,
}

/// One class of a classification.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Class {
    pub index: usize,
    /// "" when the output has no labels.
    pub label: String,
    pub score: f32,
}

/// One detected object, in the original picture's pixels (after EXIF orientation), clamped to it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Detection {
    /// The class's label, or its index as text when the output has no labels.
    pub label: String,
    pub class_id: usize,
    pub confidence: f32,
    pub x_min: f32,
    pub y_min: f32,
    pub x_max: f32,
    pub y_max: f32,
}

/// What the model said about the picture.
#[derive(Debug, Clone, PartialEq)]
pub enum Analysis {
    Classes(Vec<Class>),
    Detections(Vec<Detection>),
    /// The KServe v2 JSON `outputs` array of the response.
    Raw(Value),
}

/// The answer for one picture.
#[derive(Debug, Clone)]
pub struct ImageResult {
    pub model_version: i64,
    /// The picture's size (after EXIF orientation).
    pub width: u32,
    pub height: u32,
    pub timings: Timings,
    pub analysis: Analysis,
}

impl ImageResult {
    /// Writes this result's fields into a JSON object: "image": {"width","height"}, "timings_ms": {...},
    /// and for Classes: "classes": [{"index","label","score"}]; for Detections: "success": true,
    /// "predictions": [{"label","confidence","x_min","y_min","x_max","y_max","class_id"}]; for Raw:
    /// "outputs": [...].
    pub fn write_json(&self, obj: &mut Map<String, Value>) {
        obj.insert("image".into(), json!({ "width": self.width, "height": self.height }));
        obj.insert("timings_ms".into(), serde_json::to_value(&self.timings).unwrap_or(Value::Null));
        match &self.analysis {
            Analysis::Classes(classes) => {
                obj.insert("classes".into(), serde_json::to_value(classes).unwrap_or(Value::Null));
            }
            Analysis::Detections(detections) => {
                obj.insert("success".into(), Value::Bool(true));
                obj.insert("predictions".into(), serde_json::to_value(detections).unwrap_or(Value::Null));
            }
            Analysis::Raw(outputs) => {
                obj.insert("outputs".into(), outputs.clone());
            }
        }
    }
}

pub use preprocess::Format;

/// A picture as it arrived, with its format recognised once from its magic bytes (`None`: not a JPEG
/// or PNG, which decoding answers with a client error).
#[derive(Debug, Clone)]
pub struct Picture {
    /// The encoded picture.
    pub bytes: Bytes,
    /// What [`preprocess::format_of`] found.
    pub format: Option<Format>,
}

impl Picture {
    /// Takes a payload, recognising its format.
    pub fn new(bytes: Bytes) -> Picture {
        let format = preprocess::format_of(&bytes);
        Picture { bytes, format }
    }
}

/// The input tensor's bytes for a picture, its size and the transform back, with the time decoding
/// and pre-processing took.
pub struct Prepared {
    pub data: Vec<u8>,
    pub width: u32,
    pub height: u32,
    pub transform: preprocess::Transform,
    pub decode_ms: f64,
    pub preprocess_ms: f64,
}

/// Decodes and pre-processes a picture for `spec` (CPU work: call it off the async workers).
pub fn prepare(image: &Picture, spec: &ImageSpec) -> Result<Prepared> {
    let t = Instant::now();
    let img = preprocess::decode(&image.bytes, image.format)?;
    let decode_ms = ms(t);
    let t = Instant::now();
    let (resized, transform) = preprocess::resize(&img, spec)?;
    let data = preprocess::to_tensor(&resized, spec);
    Ok(Prepared { data, width: img.width(), height: img.height(), transform, decode_ms, preprocess_ms: ms(t) })
}

/// Decode → preprocess (per the model's config parameters) → Server::infer → postprocess.
pub async fn infer_image(
    server: &Server,
    model: &str,
    version: Option<i64>,
    id: &str,
    image: Picture,
    opts: &PostOptions,
) -> Result<ImageResult> {
    let start = Instant::now();
    let version_str = version.map(|v| v.to_string()).unwrap_or_default();
    let config = server.model_config(model, &version_str)?;
    let spec = ImageSpec::from_config(&config)?;
    let labels = |output: &str| server.model_labels(model, version, output);

    let prep_spec = spec.clone();
    let prepared = tokio::task::spawn_blocking(move || prepare(&image, &prep_spec))
        .await
        .map_err(|e| Error::internal(format!("the image pre-processing task failed: {e}")))??;

    let request = InferRequest {
        model_name: model.to_string(),
        model_version: version,
        id: id.to_string(),
        inputs: vec![Tensor::new(spec.input.clone(), spec.datatype, spec.shape.clone(), prepared.data)],
        ..Default::default()
    };
    let t = Instant::now();
    let (response, exec) = server.infer_with_timings(request).await?;
    let in_server = ms(t);
    let compute_ns = exec.compute_input_ns + exec.compute_infer_ns + exec.compute_output_ns;
    let infer = compute_ns as f64 / 1e6;

    let t = Instant::now();
    let (w, h, transform) = (prepared.width, prepared.height, prepared.transform);
    let top_k = opts.top_k;
    let analysis = match &spec.output {
        OutputKind::Raw => Analysis::Raw(postprocess::raw_json(&response.outputs)?),
        OutputKind::Classification { output } => {
            let labels = labels(output);
            let t = find(&response.outputs, output)?;
            let min = opts.min_confidence;
            let values = postprocess::to_f32(t)?;
            // The first batch item: the classes are the last dimension.
            let classes = t.shape.last().and_then(|&c| usize::try_from(c).ok()).unwrap_or(values.len());
            let first = &values[..classes.min(values.len())];
            Analysis::Classes(postprocess::classify(
                first,
                labels.as_deref().map(Vec::as_slice),
                top_k.unwrap_or(5),
                min,
            ))
        }
        OutputKind::Yolo { output, objectness } => {
            let labels = labels(output);
            let tensor = find(&response.outputs, output)?.clone();
            let threshold = opts.min_confidence.unwrap_or(spec.score_threshold);
            let (iou, objectness) = (spec.iou_threshold, *objectness);
            // NMS over thousands of boxes is CPU work too.
            let detections = tokio::task::spawn_blocking(move || -> Result<Vec<Detection>> {
                let values = postprocess::to_f32(&tensor)?;
                let classes = labels.as_ref().map(|l| l.len());
                let boxes = postprocess::yolo_candidates(&values, &tensor.shape, objectness, classes, threshold)?;
                let kept = postprocess::nms(boxes, iou, postprocess::max_detections(top_k));
                Ok(postprocess::to_detections(&kept, &transform, w, h, labels.as_deref().map(Vec::as_slice)))
            })
            .await
            .map_err(|e| Error::internal(format!("the detection post-processing task failed: {e}")))??;
            Analysis::Detections(detections)
        }
        OutputKind::Ssd { boxes, classes, scores, count } => {
            let labels = labels(classes);
            let read = |name: &str| find(&response.outputs, name).and_then(postprocess::to_f32);
            let threshold = opts.min_confidence.unwrap_or(spec.score_threshold);
            let found =
                postprocess::ssd_boxes(&read(boxes)?, &read(classes)?, &read(scores)?, &read(count)?, threshold)?;
            // Normalised to the input: back to its pixels, then through the letterbox to the picture's.
            let (iw, ih) = (spec.width as f32, spec.height as f32);
            let mut kept: Vec<postprocess::Candidate> = found
                .into_iter()
                .map(|(class, score, [y1, x1, y2, x2])| postprocess::Candidate {
                    x1: x1 * iw,
                    y1: y1 * ih,
                    x2: x2 * iw,
                    y2: y2 * ih,
                    score,
                    class,
                })
                .collect();
            kept.truncate(postprocess::max_detections(top_k));
            Analysis::Detections(postprocess::to_detections(
                &kept,
                &transform,
                w,
                h,
                labels.as_deref().map(Vec::as_slice),
            ))
        }
        OutputKind::EfficientNms => {
            let [num, boxes, scores, classes] = NMS_OUTPUTS;
            let labels = labels(classes);
            let read = |name: &str| find(&response.outputs, name).and_then(postprocess::to_f32);
            let threshold = opts.min_confidence.unwrap_or(spec.score_threshold);
            let candidates = postprocess::efficient_nms_candidates(
                &read(num)?,
                &read(boxes)?,
                &read(scores)?,
                &read(classes)?,
                threshold,
            )?;
            let mut kept = candidates;
            kept.truncate(postprocess::max_detections(top_k));
            Analysis::Detections(postprocess::to_detections(
                &kept,
                &transform,
                w,
                h,
                labels.as_deref().map(Vec::as_slice),
            ))
        }
    };
    let postprocess = ms(t);
    Ok(ImageResult {
        model_version: response.model_version,
        width: w,
        height: h,
        timings: Timings {
            decode: prepared.decode_ms,
            preprocess: prepared.preprocess_ms,
            queue: (in_server - infer).max(0.0),
            infer,
            postprocess,
            total: ms(start),
        },
        analysis,
    })
}

fn find<'a>(outputs: &'a [Tensor], name: &str) -> Result<&'a Tensor> {
    outputs
        .iter()
        .find(|t| t.name == name)
        .ok_or_else(|| Error::internal(format!("the model's response has no output '{name}'")))
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests;
