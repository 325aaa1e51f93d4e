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
use std::sync::Arc;
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
    trace: Option<&mut crate::core::trace::Trace>,
) -> Result<ImageResult> {
    let start = Instant::now();
    let version_str = version.map(|v| v.to_string()).unwrap_or_default();
    let config = server.model_config(model, &version_str)?;
    let spec = ImageSpec::from_config(&config)?;

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
    let (response, exec) = server.infer_with_timings(request, trace).await?;
    let in_server = ms(t);
    let compute_ns = exec.compute_input_ns + exec.compute_infer_ns + exec.compute_output_ns;
    let infer = compute_ns as f64 / 1e6;

    let t = Instant::now();
    let (w, h, transform) = (prepared.width, prepared.height, prepared.transform);
    let post = Post { server, model, version, spec: &spec, opts, width: w, height: h, transform };
    let analysis = post.analyse(&response.outputs).await?;
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

/// What turning a model's outputs into an [`Analysis`] needs besides the outputs: where the labels
/// are, the spec, the request's choices, and the picture the results are mapped back to.
struct Post<'a> {
    server: &'a Server,
    model: &'a str,
    version: Option<i64>,
    spec: &'a ImageSpec,
    opts: &'a PostOptions,
    /// The picture's size (after EXIF orientation).
    width: u32,
    height: u32,
    /// From the input's pixels back to the picture's.
    transform: preprocess::Transform,
}

impl Post<'_> {
    /// The outputs read as the spec's `image.output` says.
    async fn analyse(&self, outputs: &[Tensor]) -> Result<Analysis> {
        Ok(match &self.spec.output {
            OutputKind::Raw => Analysis::Raw(postprocess::raw_json(outputs)?),
            OutputKind::Classification { output } => self.classes(outputs, output)?,
            OutputKind::Yolo { output, objectness } => self.yolo(outputs, output, *objectness).await?,
            OutputKind::Ssd { boxes, classes, scores, count } => self.ssd(outputs, [boxes, classes, scores, count])?,
            OutputKind::EfficientNms => self.efficient_nms(outputs)?,
        })
    }

    /// The labels of one of the model's outputs, when it has them.
    fn labels(&self, output: &str) -> Option<Arc<Vec<String>>> {
        self.server.model_labels(self.model, self.version, output)
    }

    /// The lowest score kept: the request's, else the model's `detection.score_threshold`.
    fn threshold(&self) -> f32 {
        self.opts.min_confidence.unwrap_or(self.spec.score_threshold)
    }

    /// The best boxes (as many as the request allows), mapped to the picture's pixels.
    fn detections(&self, mut kept: Vec<postprocess::Candidate>, labels: Option<Arc<Vec<String>>>) -> Analysis {
        kept.truncate(postprocess::max_detections(self.opts.top_k));
        Analysis::Detections(postprocess::to_detections(
            &kept,
            &self.transform,
            self.width,
            self.height,
            labels.as_deref().map(Vec::as_slice),
        ))
    }

    /// The top classes of a classification output.
    fn classes(&self, outputs: &[Tensor], output: &str) -> Result<Analysis> {
        let labels = self.labels(output);
        let t = find(outputs, output)?;
        let min = self.opts.min_confidence;
        let values = postprocess::to_f32(t)?;
        // The first batch item: the classes are the last dimension.
        let classes = t.shape.last().and_then(|&c| usize::try_from(c).ok()).unwrap_or(values.len());
        let first = &values[..classes.min(values.len())];
        Ok(Analysis::Classes(postprocess::classify(
            first,
            labels.as_deref().map(Vec::as_slice),
            self.opts.top_k.unwrap_or(5),
            min,
        )))
    }

    /// The detections of a YOLO output, after non-maximum suppression.
    async fn yolo(&self, outputs: &[Tensor], output: &str, objectness: bool) -> Result<Analysis> {
        let labels = self.labels(output);
        let tensor = find(outputs, output)?.clone();
        let threshold = self.threshold();
        let iou = self.spec.iou_threshold;
        let (top_k, transform, w, h) = (self.opts.top_k, self.transform, self.width, self.height);
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
        Ok(Analysis::Detections(detections))
    }

    /// The detections of TensorFlow's SSD outputs (boxes, classes, scores, count).
    fn ssd(&self, outputs: &[Tensor], [boxes, classes, scores, count]: [&String; 4]) -> Result<Analysis> {
        let labels = self.labels(classes);
        let read = |name: &str| find(outputs, name).and_then(postprocess::to_f32);
        let found =
            postprocess::ssd_boxes(&read(boxes)?, &read(classes)?, &read(scores)?, &read(count)?, self.threshold())?;
        // Normalised to the input: back to its pixels, then through the letterbox to the picture's.
        let (iw, ih) = (self.spec.width as f32, self.spec.height as f32);
        let kept: Vec<postprocess::Candidate> = found
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
        Ok(self.detections(kept, labels))
    }

    /// The detections of TensorRT's EfficientNMS_TRT outputs.
    fn efficient_nms(&self, outputs: &[Tensor]) -> Result<Analysis> {
        let [num, boxes, scores, classes] = NMS_OUTPUTS;
        let labels = self.labels(classes);
        let read = |name: &str| find(outputs, name).and_then(postprocess::to_f32);
        let candidates = postprocess::efficient_nms_candidates(
            &read(num)?,
            &read(boxes)?,
            &read(scores)?,
            &read(classes)?,
            self.threshold(),
        )?;
        Ok(self.detections(candidates, labels))
    }
}

/// The response's output named `name`; a missing one is an internal error.
fn find<'a>(outputs: &'a [Tensor], name: &str) -> Result<&'a Tensor> {
    outputs
        .iter()
        .find(|t| t.name == name)
        .ok_or_else(|| Error::internal(format!("the model's response has no output '{name}'")))
}

/// The milliseconds since `since`.
fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests;
