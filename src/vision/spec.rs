//! How a model wants its pictures: the `image.*` and `detection.*` parameters of its config.pbtxt,
//! checked once into an [`ImageSpec`].

use crate::error::{Error, Result};
use crate::model_api::types::DataType;
use crate::proto::inference::{model_input, ModelConfig, ModelInput};

/// The memory order of the input tensor's picture dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `[3, H, W]`: one plane per channel.
    Nchw,
    /// `[H, W, 3]`: interleaved channels.
    Nhwc,
}

/// The channel order the model expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Color {
    Rgb,
    Bgr,
}

/// How a picture of any size becomes the input's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resize {
    /// Both sides scaled independently to the input's size (the aspect ratio is not kept).
    Stretch,
    /// Scaled to fit inside, keeping the aspect ratio, centred and padded with `image.pad`.
    Letterbox,
    /// Scaled to cover, keeping the aspect ratio, and the centre cut out.
    CenterCrop,
}

/// What the model's outputs mean.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputKind {
    /// Scores per class in one output (the first batch item is read).
    Classification { output: String },
    /// YOLOv5/v8-style boxes: `[boxes, 4 (+1 objectness) + classes]` or transposed, cx, cy, w, h in
    /// input pixels.
    Yolo { output: String, objectness: bool },
    /// TensorRT's EfficientNMS_TRT plugin outputs (boxes x1, y1, x2, y2 in input pixels).
    EfficientNms,
    /// TensorFlow's SSD outputs: boxes `[1, N, 4]` (y_min, x_min, y_max, x_max, normalised to the
    /// input), classes `[1, N]`, scores `[1, N]` and the count `[1]`, named here.
    Ssd { boxes: String, classes: String, scores: String, count: String },
    /// The outputs as KServe v2 JSON.
    Raw,
}

/// EfficientNMS_TRT's output names.
pub const NMS_OUTPUTS: [&str; 4] = ["num_detections", "detection_boxes", "detection_scores", "detection_classes"];

/// Everything needed to turn a picture into the model's input and its outputs into results.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageSpec {
    /// The input fed with the picture.
    pub input: String,
    pub datatype: DataType,
    /// The full shape sent (with the batch dimension 1 when the model batches).
    pub shape: Vec<i64>,
    pub layout: Layout,
    /// The input's picture size.
    pub width: u32,
    pub height: u32,
    pub color: Color,
    pub resize: Resize,
    /// The letterbox padding, as a 0..255 pixel value (before scaling).
    pub pad: u8,
    /// Applied to 0..255 pixels: `(x * scale - mean[c]) / std[c]`, per model channel.
    pub scale: f32,
    pub mean: [f32; 3],
    pub std: [f32; 3],
    pub output: OutputKind,
    pub score_threshold: f32,
    pub iou_threshold: f32,
}

/// The largest input side accepted (a config asking for more is a mistake, not a picture size).
const MAX_INPUT_SIDE: i64 = 16384;

impl ImageSpec {
    /// Reads the spec from a model's configuration; an unusable one is an invalid-argument error that
    /// names the model and the parameter.
    pub fn from_config(cfg: &ModelConfig) -> Result<ImageSpec> {
        let r = Params { cfg };
        let input = r.image_input()?;
        let datatype = r.input_datatype(input)?;
        let (layout, w, h) = r.picture_layout(input)?;
        let shape = if cfg.max_batch_size > 0 {
            std::iter::once(1).chain(input.dims.iter().copied()).collect()
        } else {
            input.dims.clone()
        };
        let color = r.color()?;
        let resize = r.resize()?;
        let pad = r.pad()?;
        let scale = r.scale(datatype)?;
        let mean = r.triple("image.mean", 0.0)?;
        let std = r.triple("image.std", 1.0)?;
        if std.contains(&0.0) {
            return Err(r.bad("image.std has a zero".into()));
        }
        let output = r.output_kind()?;
        Ok(ImageSpec {
            input: input.name.clone(),
            datatype,
            shape,
            layout,
            width: w as u32,
            height: h as u32,
            color,
            resize,
            pad,
            scale,
            mean,
            std,
            output,
            score_threshold: r.threshold("detection.score_threshold", 0.25)?,
            iou_threshold: r.threshold("detection.iou_threshold", 0.45)?,
        })
    }
}

/// A model's configuration while its `image.*` and `detection.*` parameters are read.
struct Params<'a> {
    cfg: &'a ModelConfig,
}

impl<'a> Params<'a> {
    /// An invalid-argument error that names the model.
    fn bad(&self, msg: String) -> Error {
        Error::invalid(format!("model '{}' cannot take images: {msg}", self.cfg.name))
    }

    /// A parameter's trimmed value; an empty one counts as unset.
    fn param(&self, key: &str) -> Option<&'a str> {
        self.cfg.parameters.get(key).map(|p| p.string_value.trim()).filter(|v| !v.is_empty())
    }

    /// The input fed with the picture: `image.input`, or the model's only input.
    fn image_input(&self) -> Result<&'a ModelInput> {
        match self.param("image.input") {
            Some(name) => self
                .cfg
                .input
                .iter()
                .find(|i| i.name == name)
                .ok_or_else(|| self.bad(format!("image.input '{name}' is not an input of the model"))),
            None => match self.cfg.input.as_slice() {
                [only] => Ok(only),
                [] => Err(self.bad("it has no inputs".into())),
                _ => Err(self.bad("it has several inputs; set image.input to the one fed with the picture".into())),
            },
        }
    }

    /// The input's datatype, one a picture can be written as.
    fn input_datatype(&self, input: &ModelInput) -> Result<DataType> {
        DataType::from_config(input.data_type)
            .filter(|d| matches!(d, DataType::Fp32 | DataType::Fp16 | DataType::Uint8))
            .ok_or_else(|| self.bad(format!("input '{}' must be TYPE_FP32, TYPE_FP16 or TYPE_UINT8", input.name)))
    }

    /// The input's layout and its picture width and height, from its dims, its format and
    /// `image.layout`.
    fn picture_layout(&self, input: &ModelInput) -> Result<(Layout, i64, i64)> {
        // The picture dimensions: the config's dims, or those after a leading 1 for a model without
        // batching whose graph has a fixed batch of one ([1, 3, 640, 640]).
        let dims: &[i64] = match (self.cfg.max_batch_size, input.dims.as_slice()) {
            (0, [1, rest @ ..]) if rest.len() == 3 => rest,
            (_, d) => d,
        };
        let not_image = || {
            self.bad(format!(
                "input '{}' has dims {:?}; an image input has [3, H, W] (NCHW) or [H, W, 3] (NHWC) with fixed H and W",
                input.name, input.dims
            ))
        };
        let [d0, d1, d2] = <[i64; 3]>::try_from(dims).map_err(|_| not_image())?;
        let layout = match self.param("image.layout") {
            Some(v) if v.eq_ignore_ascii_case("NCHW") => Layout::Nchw,
            Some(v) if v.eq_ignore_ascii_case("NHWC") => Layout::Nhwc,
            Some(v) => return Err(self.bad(format!("image.layout '{v}' is not NCHW or NHWC"))),
            None if input.format == model_input::Format::Nchw as i32 => Layout::Nchw,
            None if input.format == model_input::Format::Nhwc as i32 => Layout::Nhwc,
            None if d0 == 3 => Layout::Nchw,
            None if d2 == 3 => Layout::Nhwc,
            None => return Err(not_image()),
        };
        let (c, h, w) = match layout {
            Layout::Nchw => (d0, d1, d2),
            Layout::Nhwc => (d2, d0, d1),
        };
        if c != 3 || !(1..=MAX_INPUT_SIDE).contains(&h) || !(1..=MAX_INPUT_SIDE).contains(&w) {
            return Err(not_image());
        }
        Ok((layout, w, h))
    }

    /// `image.color` (default RGB).
    fn color(&self) -> Result<Color> {
        match self.param("image.color") {
            None => Ok(Color::Rgb),
            Some(v) if v.eq_ignore_ascii_case("RGB") => Ok(Color::Rgb),
            Some(v) if v.eq_ignore_ascii_case("BGR") => Ok(Color::Bgr),
            Some(v) => Err(self.bad(format!("image.color '{v}' is not RGB or BGR"))),
        }
    }

    /// `image.resize` (default stretch).
    fn resize(&self) -> Result<Resize> {
        match self.param("image.resize") {
            None => Ok(Resize::Stretch),
            Some(v) if v.eq_ignore_ascii_case("stretch") => Ok(Resize::Stretch),
            Some(v) if v.eq_ignore_ascii_case("letterbox") => Ok(Resize::Letterbox),
            Some(v) if v.eq_ignore_ascii_case("center_crop") => Ok(Resize::CenterCrop),
            Some(v) => Err(self.bad(format!("image.resize '{v}' is not stretch, letterbox or center_crop"))),
        }
    }

    /// `image.pad` (default 114, YOLO's grey).
    fn pad(&self) -> Result<u8> {
        match self.param("image.pad") {
            None => Ok(114),
            Some(v) => {
                v.parse::<u8>().map_err(|_| self.bad(format!("image.pad '{v}' is not an integer from 0 to 255")))
            }
        }
    }

    /// `image.scale`; by default 0..255 pixels stay as they are for a UINT8 input and become 0..1
    /// otherwise.
    fn scale(&self, datatype: DataType) -> Result<f32> {
        match self.param("image.scale") {
            None if datatype == DataType::Uint8 => Ok(1.0),
            None => Ok(1.0 / 255.0),
            Some(v) => number(v).ok_or_else(|| self.bad(format!("image.scale '{v}' is not a finite number"))),
        }
    }

    /// A per-channel parameter (`image.mean`, `image.std`): three comma-separated numbers.
    fn triple(&self, key: &str, default: f32) -> Result<[f32; 3]> {
        let Some(v) = self.param(key) else { return Ok([default; 3]) };
        let parsed: Option<Vec<f32>> = v.split(',').map(|s| number(s.trim())).collect();
        match parsed.as_deref() {
            Some(&[a, b, c]) => Ok([a, b, c]),
            _ => Err(self.bad(format!("{key} '{v}' is not three comma-separated numbers"))),
        }
    }

    /// What the outputs mean: `image.output`, or a classification for a model with one output.
    fn output_kind(&self) -> Result<OutputKind> {
        let cfg = self.cfg;
        let first_output =
            || cfg.output.first().map(|o| o.name.clone()).ok_or_else(|| self.bad("it has no outputs".into()));
        Ok(match self.param("image.output") {
            None if cfg.output.len() == 1 => OutputKind::Classification { output: first_output()? },
            None => OutputKind::Raw,
            Some("classification") => OutputKind::Classification { output: first_output()? },
            Some("yolo") => {
                let objectness = self.yolo_objectness()?;
                OutputKind::Yolo { output: first_output()?, objectness }
            }
            Some("efficient_nms") => {
                let missing: Vec<&str> =
                    NMS_OUTPUTS.iter().copied().filter(|n| !cfg.output.iter().any(|o| o.name == *n)).collect();
                if !missing.is_empty() {
                    return Err(
                        self.bad(format!("image.output 'efficient_nms' needs the outputs {}", missing.join(", ")))
                    );
                }
                OutputKind::EfficientNms
            }
            Some("ssd") => ssd_outputs(cfg).map_err(|m| self.bad(m))?,
            Some("raw") => OutputKind::Raw,
            Some(v) => {
                return Err(
                    self.bad(format!("image.output '{v}' is not classification, yolo, efficient_nms, ssd or raw"))
                )
            }
        })
    }

    /// `image.yolo_objectness` (default false): whether YOLO rows carry an objectness score.
    fn yolo_objectness(&self) -> Result<bool> {
        match self.param("image.yolo_objectness") {
            None => Ok(false),
            Some(v) => {
                v.parse::<bool>().map_err(|_| self.bad(format!("image.yolo_objectness '{v}' is not true or false")))
            }
        }
    }

    /// A detection threshold (`detection.score_threshold`, `detection.iou_threshold`): from 0 to 1.
    fn threshold(&self, key: &str, default: f32) -> Result<f32> {
        match self.param(key) {
            None => Ok(default),
            Some(v) => number(v)
                .filter(|t| (0.0..=1.0).contains(t))
                .ok_or_else(|| self.bad(format!("{key} '{v}' is not a number from 0 to 1"))),
        }
    }
}

/// The four SSD outputs: by name where the names say (`*box*`, `*class*`, `*score*`, `num*` or
/// `*count*`, as TensorFlow's exports have them), else in the configuration's order.
fn ssd_outputs(cfg: &ModelConfig) -> std::result::Result<OutputKind, String> {
    let names: Vec<&str> = cfg.output.iter().map(|o| o.name.as_str()).collect();
    if names.len() != 4 {
        return Err(format!(
            "image.output 'ssd' needs four outputs (boxes, classes, scores, count), not {}",
            names.len()
        ));
    }
    let find = |keys: &[&str]| names.iter().find(|n| keys.iter().any(|k| n.to_ascii_lowercase().contains(k))).copied();
    let by_name = (find(&["box"]), find(&["class"]), find(&["score"]), find(&["num", "count"]));
    let [boxes, classes, scores, count] = match by_name {
        (Some(b), Some(c), Some(s), Some(n))
            if [b, c, s, n].iter().collect::<std::collections::HashSet<_>>().len() == 4 =>
        {
            [b, c, s, n]
        }
        _ => [names[0], names[1], names[2], names[3]],
    };
    Ok(OutputKind::Ssd { boxes: boxes.into(), classes: classes.into(), scores: scores.into(), count: count.into() })
}

/// A finite number, also written as a fraction ("1/255").
fn number(s: &str) -> Option<f32> {
    let v = match s.split_once('/') {
        Some((a, b)) => a.trim().parse::<f64>().ok()? / b.trim().parse::<f64>().ok()?,
        None => s.parse::<f64>().ok()?,
    };
    Some(v as f32).filter(|v| v.is_finite())
}
