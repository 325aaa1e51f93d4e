//! Flags of Frigate's ZMQ detector (`--frigate-zmq-*`). Without `--frigate-zmq-endpoint` there is none.

use clap::Args;
use std::path::PathBuf;

/// How detection replies are framed; Frigate reads either.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ReplyForm {
    /// `[{"shape": [20, 6], "dtype": "float32"}, bytes]`.
    #[default]
    Tensor,
    /// One frame of the 480 bytes.
    Bytes,
}

#[derive(Debug, Clone, Args)]
pub struct FrigateArgs {
    /// Where Frigate's `zmq` detector connects: tcp://HOST:PORT (Frigate's docs use port 5555) or
    /// ipc://PATH; unset: no ZMQ detector.
    #[arg(help_heading = "Frigate", long, env = "TRITONRS_FRIGATE_ZMQ_ENDPOINT", value_name = "ENDPOINT")]
    pub frigate_zmq_endpoint: Option<String>,
    /// The model that serves a model name Frigate gives when no model has the name's stem
    /// (`yolov9-t-320.onnx` names `yolov9-t-320`), and before Frigate names one.
    #[arg(help_heading = "Frigate", long, env = "TRITONRS_FRIGATE_ZMQ_MODEL", value_name = "MODEL")]
    pub frigate_zmq_model: Option<String>,
    /// A model repository folder where models Frigate pushes are written (as <stem>/1/model.onnx
    /// with a generated config.pbtxt) and then loaded; unset: pushes are refused.
    #[arg(help_heading = "Frigate", long, env = "TRITONRS_FRIGATE_ZMQ_ACCEPT_MODELS", value_name = "DIR")]
    pub frigate_zmq_accept_models: Option<PathBuf>,
    /// The largest model Frigate may push, in MiB.
    #[arg(help_heading = "Frigate", long, env = "TRITONRS_FRIGATE_ZMQ_MAX_MODEL_MB", default_value_t = 512)]
    pub frigate_zmq_max_model_mb: usize,
    /// How detections are framed: tensor ([header, 480 bytes]) or bytes (one 480-byte frame).
    #[arg(help_heading = "Frigate", long, env = "TRITONRS_FRIGATE_ZMQ_REPLY", value_enum, default_value = "tensor")]
    pub frigate_zmq_reply: ReplyForm,
}
