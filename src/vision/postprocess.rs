//! Model outputs → results: classification top-k, YOLO boxes with class-wise NMS, EfficientNMS_TRT
//! outputs, and the raw KServe v2 JSON. Every box is mapped back to the picture's pixels.

use super::preprocess::Transform;
use super::{Class, Detection};
use crate::error::{Error, Result};
use crate::kserve::{KeyOrder, Outputs};
use crate::model_api::types::Tensor;
use crate::tensor::view;

/// Most candidate boxes kept for NMS (the highest scores), as Ultralytics does.
const MAX_CANDIDATES: usize = 30_000;
/// Most detections answered after NMS.
const MAX_DETECTIONS: usize = 300;

/// A tensor's elements as `f32` (integer and half types converted), row-major.
pub fn to_f32(t: &Tensor) -> Result<Vec<f32>> {
    Ok(view::numbers(t)?.into_iter().map(|v| v as f32).collect())
}

/// The first batch item's scores, top `top_k` (at least `min_score`), sorted by score then index.
pub fn classify(scores: &[f32], labels: Option<&[String]>, top_k: usize, min_score: Option<f32>) -> Vec<Class> {
    let min = min_score.map_or(f64::NEG_INFINITY, f64::from);
    view::top_k(scores, top_k, |s| !s.is_nan() && s >= min)
        .into_iter()
        .map(|i| Class {
            index: i,
            label: labels.and_then(|l| l.get(i)).cloned().unwrap_or_default(),
            score: scores[i],
        })
        .collect()
}

/// A box in input pixels before mapping: x1, y1, x2, y2, score, class.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    pub x1: f32,
    pub y1: f32,
    pub x2: f32,
    pub y2: f32,
    pub score: f32,
    pub class: usize,
}

fn iou(a: &Candidate, b: &Candidate) -> f32 {
    let iw = (a.x2.min(b.x2) - a.x1.max(b.x1)).max(0.0);
    let ih = (a.y2.min(b.y2) - a.y1.max(b.y1)).max(0.0);
    let inter = iw * ih;
    let union =
        (a.x2 - a.x1).max(0.0) * (a.y2 - a.y1).max(0.0) + (b.x2 - b.x1).max(0.0) * (b.y2 - b.y1).max(0.0) - inter;
    if union > 0.0 {
        inter / union
    } else {
        0.0
    }
}

/// Greedy class-wise non-maximum suppression: highest scores first, a box goes when it overlaps a kept
/// box of the same class by more than `iou_threshold`.
pub fn nms(mut boxes: Vec<Candidate>, iou_threshold: f32, max: usize) -> Vec<Candidate> {
    boxes.sort_by(|a, b| b.score.total_cmp(&a.score));
    boxes.truncate(MAX_CANDIDATES);
    let mut kept: Vec<Candidate> = Vec::new();
    for b in boxes {
        if kept.len() >= max {
            break;
        }
        if !kept.iter().any(|k| k.class == b.class && iou(k, &b) > iou_threshold) {
            kept.push(b);
        }
    }
    kept
}

/// The boxes of a YOLO output whose best class scores at least `threshold`. `shape` is the output's
/// (with or without a batch dimension; the first item is read). Rows are boxes when a row holds
/// 4 (+1) + labels values; otherwise the smaller dimension is taken as the attributes (YOLOv8 exports
/// `[1, 84, 8400]`).
pub fn yolo_candidates(
    values: &[f32],
    shape: &[i64],
    objectness: bool,
    classes: Option<usize>,
    threshold: f32,
) -> Result<Vec<Candidate>> {
    let dims: Vec<usize> = shape.iter().map(|&d| usize::try_from(d).unwrap_or(0)).collect();
    let (a, b) = match dims.as_slice() {
        [1, a, b] | [a, b] => (*a, *b),
        _ => {
            return Err(Error::invalid(format!(
                "a YOLO output has shape [1, boxes, attributes] or [1, attributes, boxes], not {shape:?}"
            )))
        }
    };
    let head = if objectness { 5 } else { 4 };
    let transposed = match classes {
        Some(c) if b == head + c => false,
        Some(c) if a == head + c => true,
        _ => a < b,
    };
    let (count, attrs) = if transposed { (b, a) } else { (a, b) };
    if attrs <= head || values.len() < count * attrs {
        return Err(Error::invalid(format!(
            "a YOLO output of shape {shape:?} has no class scores ({attrs} attributes a box{})",
            if objectness { ", 5 of them box and objectness" } else { ", 4 of them the box" }
        )));
    }
    let at = |i: usize, k: usize| if transposed { values[k * count + i] } else { values[i * attrs + k] };
    let mut out = Vec::new();
    for i in 0..count {
        let obj = if objectness { at(i, 4) } else { 1.0 };
        let (mut class, mut best) = (0, f32::NEG_INFINITY);
        for k in head..attrs {
            let s = at(i, k);
            if s > best {
                (class, best) = (k - head, s);
            }
        }
        let score = best * obj;
        // NaN scores are never kept.
        if score.is_nan() || score < threshold {
            continue;
        }
        let (cx, cy, w, h) = (at(i, 0), at(i, 1), at(i, 2), at(i, 3));
        if ![cx, cy, w, h].iter().all(|v| v.is_finite()) {
            continue;
        }
        out.push(Candidate { x1: cx - w / 2.0, y1: cy - h / 2.0, x2: cx + w / 2.0, y2: cy + h / 2.0, score, class });
    }
    Ok(out)
}

/// The detections of EfficientNMS_TRT's outputs (num_detections, detection_boxes, detection_scores,
/// detection_classes, in that order) at least `threshold`, first batch item.
pub fn efficient_nms_candidates(
    num: &[f32],
    boxes: &[f32],
    scores: &[f32],
    classes: &[f32],
    threshold: f32,
) -> Result<Vec<Candidate>> {
    let k = scores.len().min(classes.len()).min(boxes.len() / 4);
    let n = num.first().copied().unwrap_or(0.0);
    if n.is_nan() || n < 0.0 {
        return Err(Error::invalid(format!("EfficientNMS num_detections is {n}")));
    }
    let n = (n as usize).min(k);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let (score, class) = (scores[i], classes[i]);
        let b = &boxes[i * 4..i * 4 + 4];
        let usable = score >= threshold && class >= 0.0 && b.iter().all(|v| v.is_finite());
        if !usable {
            continue;
        }
        out.push(Candidate { x1: b[0], y1: b[1], x2: b[2], y2: b[3], score, class: class as usize });
    }
    Ok(out)
}

/// The detections of TensorFlow SSD outputs at least `threshold`, first batch item: class, score and
/// the box as y_min, x_min, y_max, x_max (normalised, as the model gives it).
pub fn ssd_boxes(
    boxes: &[f32],
    classes: &[f32],
    scores: &[f32],
    count: &[f32],
    threshold: f32,
) -> Result<Vec<(usize, f32, [f32; 4])>> {
    let k = scores.len().min(classes.len()).min(boxes.len() / 4);
    let n = count.first().copied().unwrap_or(k as f32);
    if n.is_nan() || n < 0.0 {
        return Err(Error::invalid(format!("the SSD detection count is {n}")));
    }
    let mut out = Vec::new();
    for i in 0..(n as usize).min(k) {
        let (score, class) = (scores[i], classes[i]);
        let b = [boxes[i * 4], boxes[i * 4 + 1], boxes[i * 4 + 2], boxes[i * 4 + 3]];
        if score >= threshold && class >= 0.0 && b.iter().all(|v| v.is_finite()) {
            out.push((class as usize, score, b));
        }
    }
    Ok(out)
}

/// Maps boxes back to the `w`x`h` picture, clamped to it, and names their classes.
pub fn to_detections(boxes: &[Candidate], t: &Transform, w: u32, h: u32, labels: Option<&[String]>) -> Vec<Detection> {
    let (wf, hf) = (w as f32, h as f32);
    boxes
        .iter()
        .map(|b| {
            let (x1, y1) = t.to_original(b.x1, b.y1);
            let (x2, y2) = t.to_original(b.x2, b.y2);
            Detection {
                label: labels.and_then(|l| l.get(b.class)).cloned().unwrap_or_else(|| b.class.to_string()),
                class_id: b.class,
                confidence: b.score,
                x_min: x1.min(x2).clamp(0.0, wf),
                y_min: y1.min(y2).clamp(0.0, hf),
                x_max: x1.max(x2).clamp(0.0, wf),
                y_max: y1.max(y2).clamp(0.0, hf),
            }
        })
        .collect()
}

/// The most detections answered.
pub fn max_detections(top_k: Option<usize>) -> usize {
    top_k.unwrap_or(MAX_DETECTIONS).min(MAX_DETECTIONS)
}

/// The outputs as KServe v2 JSON (`[{"data", "datatype", "name", "shape"}]`), every output's data
/// in JSON.
pub fn raw_json(outputs: &[Tensor]) -> Result<serde_json::Value> {
    let encoded = Outputs::new(outputs, |_| false)?;
    serde_json::to_value(encoded.json(KeyOrder::Sorted))
        .map_err(|e| Error::internal(format!("cannot encode the raw outputs: {e}")))
}
