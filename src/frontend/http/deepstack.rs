//! DeepStack-compatible image endpoints, for Frigate's, Blue Iris's and Double Take's "deepstack"
//! detectors: `POST /v1/vision/detection` (the `--deepstack-detection-model`) and
//! `POST /v1/vision/custom/{model}`, each a multipart form with an `image` file (and optionally
//! `min_confidence`), answered in DeepStack's JSON. The work is `vision::infer_image`'s.

use super::{error_answer, HttpState, St};
use crate::error::{Error, ErrorKind};
use crate::kserve::error_body;
use crate::vision::{infer_image, Analysis, ImageResult, Picture, PostOptions};
use axum::extract::multipart::MultipartRejection;
use axum::extract::{DefaultBodyLimit, Multipart, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{post, MethodRouter};
use serde_json::{json, Value};
use std::sync::Arc;

/// `POST /v1/vision/detection`, with bodies up to `max_body` (axum's multipart limit is 2 MB otherwise).
pub fn detection(max_body: usize) -> MethodRouter<Arc<HttpState>> {
    post(detect).layer(DefaultBodyLimit::max(max_body))
}

/// `POST /v1/vision/custom/{model}`, with bodies up to `max_body`.
pub fn custom(max_body: usize) -> MethodRouter<Arc<HttpState>> {
    post(run_custom).layer(DefaultBodyLimit::max(max_body))
}

#[tracing::instrument(name = "deepstack_detect", level = "debug", skip_all)]
async fn detect(State(s): St, form: Result<Multipart, MultipartRejection>) -> Response {
    let Some(model) = s.deepstack_detection_model.clone() else {
        return error(&Error::not_found(
            "no detection model is configured: start the server with --deepstack-detection-model \
             (TRITONRS_DEEPSTACK_DETECTION_MODEL), or post to /v1/vision/custom/<model>",
        ));
    };
    run(&s, &model, form).await
}

async fn run_custom(State(s): St, Path(model): Path<String>, form: Result<Multipart, MultipartRejection>) -> Response {
    run(&s, &model, form).await
}

async fn run(s: &HttpState, model: &str, form: Result<Multipart, MultipartRejection>) -> Response {
    let result = async {
        let (image, opts) = read_form(form?).await?;
        infer_image(&s.server, model, None, "", Picture::new(image), &opts, None).await
    }
    .await;
    match result {
        Ok(r) => answer(&r),
        Err(e) => error(&e),
    }
}

/// The `image` file and the options of the form; other fields (`api_key`, ...) are ignored.
async fn read_form(mut form: Multipart) -> Result<(bytes::Bytes, PostOptions), Error> {
    let (mut image, mut opts) = (None, PostOptions::default());
    while let Some(field) = form.next_field().await.map_err(multipart_error)? {
        match field.name() {
            Some("image") => image = Some(field.bytes().await.map_err(multipart_error)?),
            Some("min_confidence") => {
                let text = field.text().await.map_err(multipart_error)?;
                let v = text.trim().parse::<f32>().ok().filter(|v| (0.0..=1.0).contains(v));
                opts.min_confidence = Some(v.ok_or_else(|| {
                    Error::invalid(format!("min_confidence '{}' is not a number from 0 to 1", text.trim()))
                })?);
            }
            _ => {}
        }
    }
    let image = image.ok_or_else(|| Error::invalid("the form has no 'image' file field"))?;
    Ok((image, opts))
}

fn multipart_error(e: axum::extract::multipart::MultipartError) -> Error {
    let kind = if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ErrorKind::PayloadTooLarge
    } else {
        ErrorKind::InvalidArgument
    };
    Error::new(kind, format!("malformed multipart form: {}", e.body_text()))
}

impl From<MultipartRejection> for Error {
    fn from(e: MultipartRejection) -> Self {
        Error::invalid(format!("expected a multipart/form-data body with an 'image' file: {}", e.body_text()))
    }
}

/// DeepStack's JSON: detections with integer pixel coordinates; for a classifier its top class and
/// the classes; for any other model the raw outputs. `duration` is always 0, as DeepStack's is.
fn answer(r: &ImageResult) -> Response {
    let mut body = match &r.analysis {
        Analysis::Detections(d) => json!({
            "success": true,
            "predictions": d.iter().map(|d| json!({
                "label": d.label,
                "confidence": d.confidence,
                "x_min": d.x_min.round() as i64,
                "y_min": d.y_min.round() as i64,
                "x_max": d.x_max.round() as i64,
                "y_max": d.y_max.round() as i64,
            })).collect::<Vec<Value>>(),
        }),
        Analysis::Classes(c) => json!({
            "success": true,
            "label": c.first().map(|c| c.label.as_str()),
            "confidence": c.first().map(|c| c.score),
            "predictions": c.iter().map(|c| json!({ "label": c.label, "confidence": c.score })).collect::<Vec<Value>>(),
        }),
        Analysis::Raw(outputs) => json!({ "success": true, "outputs": outputs }),
    };
    if let Value::Object(obj) = &mut body {
        obj.insert("duration".into(), json!(0));
        // CodeProject.AI's names for where the time went (Blue Iris shows them).
        obj.insert("inferenceMs".into(), json!(r.timings.infer.round() as i64));
        obj.insert("processMs".into(), json!(r.timings.total.round() as i64));
        obj.insert("image".into(), json!({ "width": r.width, "height": r.height }));
    }
    axum::Json(body).into_response()
}

/// `{"success": false, "error": ..., "duration": 0}` with the status the error's kind maps to.
fn error(e: &Error) -> Response {
    let mut body = error_body(&e.message);
    body.insert("success".into(), json!(false));
    body.insert("duration".into(), json!(0));
    error_answer(e, body)
}
