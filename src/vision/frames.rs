//! Frames a caller has already pre-processed (Frigate's ZMQ detector sends the model's input tensor as
//! is): checked against the model's image input, run through [`Server::infer`], and decoded into
//! detections with boxes normalised to 0..1 of the input. Nothing here knows a transport.

use super::find;
use super::postprocess::{self, Candidate};
use super::spec::{ImageSpec, OutputKind, NMS_OUTPUTS};
use crate::core::Server;
use crate::error::{Error, Result};
use crate::model_api::types::{DataType, InferRequest, Tensor};
use bytes::Bytes;

/// A model input tensor as the caller made it.
#[derive(Debug, Clone)]
pub struct Frame {
    pub shape: Vec<i64>,
    pub datatype: DataType,
    pub data: Bytes,
}

/// One detection, its box as fractions of the input's width and height.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NormBox {
    pub class: usize,
    pub score: f32,
    pub y_min: f32,
    pub x_min: f32,
    pub y_max: f32,
    pub x_max: f32,
}

/// The dimensions without leading ones (a batch of one), so `[1, 3, H, W]` matches `[3, H, W]`.
fn squeezed(shape: &[i64]) -> &[i64] {
    let ones = shape.iter().take_while(|&&d| d == 1).count();
    &shape[ones.min(shape.len().saturating_sub(3))..]
}

/// What about a frame the model does not take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    Datatype,
    Shape,
    /// Not the bytes its shape and datatype need.
    Length,
}

/// Whether `frame` is what the model's image input takes: its datatype, its shape (a leading batch of
/// one or not), and exactly the bytes that shape holds. The error says which, and why.
pub fn check_frame(model: &str, spec: &ImageSpec, frame: &Frame) -> std::result::Result<(), (Mismatch, Error)> {
    if frame.datatype != spec.datatype {
        return Err((
            Mismatch::Datatype,
            Error::invalid(format!(
                "model '{model}' takes {} frames, not {}",
                spec.datatype.as_str(),
                frame.datatype.as_str()
            )),
        ));
    }
    if squeezed(&frame.shape) != squeezed(&spec.shape) {
        return Err((
            Mismatch::Shape,
            Error::invalid(format!("model '{model}' takes frames of shape {:?}, not {:?}", spec.shape, frame.shape)),
        ));
    }
    let elements: i64 = spec.shape.iter().product();
    let want = usize::try_from(elements).unwrap_or(usize::MAX).saturating_mul(spec.datatype.byte_size().unwrap_or(1));
    if frame.data.len() != want {
        return Err((
            Mismatch::Length,
            Error::invalid(format!(
                "the frame holds {} bytes; shape {:?} of {} needs {want}",
                frame.data.len(),
                frame.shape,
                spec.datatype.as_str()
            )),
        ));
    }
    Ok(())
}

/// The model's image spec, for a caller that checks frames before queueing them.
pub fn frame_spec(server: &Server, model: &str) -> Result<ImageSpec> {
    let config = server.model_config(model, "")?;
    ImageSpec::from_config(&config)
}

/// Runs a checked frame through the model and decodes its detections (at most `max`, best first).
pub async fn detect_frame(
    server: &Server,
    model: &str,
    spec: &ImageSpec,
    frame: Frame,
    max: usize,
) -> Result<Vec<NormBox>> {
    check_frame(model, spec, &frame).map_err(|(_, e)| e)?;
    let request = InferRequest {
        model_name: model.to_string(),
        inputs: vec![Tensor::new(spec.input.clone(), spec.datatype, spec.shape.clone(), frame.data)],
        ..Default::default()
    };
    let response = server.infer(request).await?;
    let boxes = detector_boxes(server, model, spec, &response.outputs, max).await?;
    Ok(best(boxes, max))
}

/// The boxes in a detector's outputs, read as the spec's `image.output` says; a model that is not a
/// detector is an invalid-argument error.
async fn detector_boxes(
    server: &Server,
    model: &str,
    spec: &ImageSpec,
    outputs: &[Tensor],
    max: usize,
) -> Result<Vec<NormBox>> {
    let threshold = spec.score_threshold;
    let read = |name: &str| find(outputs, name).and_then(postprocess::to_f32);
    Ok(match &spec.output {
        OutputKind::Yolo { output, objectness } => {
            let tensor = find(outputs, output)?.clone();
            let classes = server.model_labels(model, None, output).map(|l| l.len());
            let (iou, objectness) = (spec.iou_threshold, *objectness);
            let kept = tokio::task::spawn_blocking(move || -> Result<Vec<Candidate>> {
                let values = postprocess::to_f32(&tensor)?;
                let candidates = postprocess::yolo_candidates(&values, &tensor.shape, objectness, classes, threshold)?;
                Ok(postprocess::nms(candidates, iou, max))
            })
            .await
            .map_err(|e| Error::internal(format!("the detection post-processing task failed: {e}")))??;
            fractions(spec, kept)
        }
        OutputKind::EfficientNms => {
            let [num, b, s, c] = NMS_OUTPUTS;
            fractions(
                spec,
                postprocess::efficient_nms_candidates(&read(num)?, &read(b)?, &read(s)?, &read(c)?, threshold)?,
            )
        }
        OutputKind::Ssd { boxes, classes, scores, count } => {
            postprocess::ssd_boxes(&read(boxes)?, &read(classes)?, &read(scores)?, &read(count)?, threshold)?
                .into_iter()
                .map(|(class, score, [y_min, x_min, y_max, x_max])| NormBox {
                    class,
                    score,
                    y_min,
                    x_min,
                    y_max,
                    x_max,
                })
                .collect()
        }
        OutputKind::Classification { .. } | OutputKind::Raw => {
            return Err(Error::invalid(format!(
                "model '{model}' is not a detector: its image.output must be yolo, efficient_nms or ssd"
            )))
        }
    })
}

/// Boxes in the input's pixels as fractions of its width and height.
fn fractions(spec: &ImageSpec, boxes: Vec<Candidate>) -> Vec<NormBox> {
    let (w, h) = (spec.width as f32, spec.height as f32);
    boxes
        .into_iter()
        .map(|b| NormBox {
            class: b.class,
            score: b.score,
            y_min: b.y1.min(b.y2) / h,
            x_min: b.x1.min(b.x2) / w,
            y_max: b.y1.max(b.y2) / h,
            x_max: b.x1.max(b.x2) / w,
        })
        .collect()
}

/// The `max` best-scoring boxes with a finite score, best first, clamped to the input.
fn best(mut boxes: Vec<NormBox>, max: usize) -> Vec<NormBox> {
    boxes.retain(|b| b.score.is_finite());
    boxes.sort_by(|a, b| b.score.total_cmp(&a.score));
    boxes.truncate(max);
    for b in &mut boxes {
        for v in [&mut b.y_min, &mut b.x_min, &mut b.y_max, &mut b.x_max] {
            *v = v.clamp(0.0, 1.0);
        }
    }
    boxes
}
