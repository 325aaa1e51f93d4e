//! Frigate's `zmq` detector served over a ZMQ ROUTER socket (`--frigate-zmq-endpoint`): Frigate's REQ
//! sockets (several cameras, several Frigate boxes) send pre-processed frames, each answered with the
//! 20 best detections. Every frame goes through `core::Server` like any other request, so a model with
//! a dynamic batcher batches frames from several cameras. The protocol is `protocol.rs`; pushed models
//! are `models.rs`.
//!
//! Nothing a client sends can stop the socket: a frame that cannot be read or run is answered with an
//! all-zero reply (Frigate's "nothing found"), counted under its reason, and logged.

pub mod metrics;
pub mod models;
pub mod protocol;
pub mod router;
pub mod zmtp;

use crate::config::frigate::FrigateArgs;
use crate::core::Server;
use crate::error::{Error, Result};
use crate::vision::frames::{self, Frame, Mismatch, NormBox};
use bytes::Bytes;
use metrics::{FrigateMetrics, Kind};
use protocol::{ReplyForm, Request, COLS, ROWS};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// The detector's settings (`--frigate-zmq-*`).
#[derive(Debug, Clone)]
pub struct FrigateSettings {
    /// `tcp://0.0.0.0:5555` or `ipc:///run/tritonrs/frigate.sock`.
    pub endpoint: String,
    /// The model for a name that names none (`--frigate-zmq-model`).
    pub fallback_model: Option<String>,
    /// A repository folder where models Frigate pushes are written (`--frigate-zmq-accept-models`).
    pub accept_dir: Option<PathBuf>,
    /// The largest model file accepted from Frigate, in bytes.
    pub max_model_bytes: usize,
    pub reply: ReplyForm,
    /// The server's local model repositories: a push may not take a name one of the others has.
    pub repositories: Vec<PathBuf>,
}

/// Peers whose chosen model is remembered (Frigate reconnects with a new identity after a timeout).
const PEERS: usize = 1024;

struct Detector {
    server: Server,
    settings: FrigateSettings,
    metrics: Arc<FrigateMetrics>,
    /// The model each peer asked for, and the last one any peer asked for.
    chosen: parking_lot::Mutex<(lru::LruCache<Bytes, String>, Option<String>)>,
}

impl FrigateSettings {
    /// The settings from the flags; `None` without `--frigate-zmq-endpoint`. The accept folder must be
    /// one of the model repositories, or what Frigate pushes could never load.
    pub fn from_args(a: &FrigateArgs, repositories: &[PathBuf]) -> Result<Option<FrigateSettings>> {
        let Some(endpoint) = a.frigate_zmq_endpoint.clone() else { return Ok(None) };
        if let Some(dir) = &a.frigate_zmq_accept_models {
            let same = |r: &PathBuf| std::fs::canonicalize(r).ok() == std::fs::canonicalize(dir).ok();
            if !dir.is_dir() || !repositories.iter().any(same) {
                return Err(Error::invalid(format!(
                    "--frigate-zmq-accept-models '{}' must be a folder that is also a --model-repository",
                    dir.display()
                )));
            }
        }
        Ok(Some(FrigateSettings {
            endpoint,
            fallback_model: a.frigate_zmq_model.clone(),
            accept_dir: a.frigate_zmq_accept_models.clone(),
            max_model_bytes: a.frigate_zmq_max_model_mb.saturating_mul(1 << 20),
            reply: a.frigate_zmq_reply,
            repositories: repositories.to_vec(),
        }))
    }
}

/// The largest frame every request but a push fits in: its JSON header, a model check.
const HEADER_FRAME: u64 = 64 * 1024;
/// What a message may hold besides its largest frame (the header, the REQ delimiter).
const MESSAGE_SLACK: u64 = HEADER_FRAME;
/// The most frames of a request: the REQ delimiter, the header and the tensor, with room to spare.
const MAX_FRAMES: usize = 16;
/// How long a computed frame limit is used before it is computed again (models come and go).
const LIMIT_TTL_MS: u64 = 10_000;

/// The largest legal frame: the bigger of the largest tensor a ready model takes as a frame and, when
/// pushes are accepted, the largest model a push may carry. A cached figure answers most frames; a
/// frame past it asks for the exact one (a model may have just loaded).
struct FrameLimit {
    server: Server,
    /// `--frigate-zmq-max-model-mb` in bytes; 0 when pushes are refused (their data is never kept).
    push: u64,
    cached: std::sync::atomic::AtomicU64,
    computed_at_ms: std::sync::atomic::AtomicU64,
}

impl FrameLimit {
    fn limits(&self, fresh: bool) -> zmtp::Limits {
        use std::sync::atomic::Ordering::Relaxed;
        let now = crate::core::heartbeat::now_ms();
        let frame = if fresh || now.saturating_sub(self.computed_at_ms.load(Relaxed)) > LIMIT_TTL_MS {
            let f = self.compute();
            self.cached.store(f, Relaxed);
            self.computed_at_ms.store(now, Relaxed);
            f
        } else {
            self.cached.load(Relaxed)
        };
        zmtp::Limits { frame, message: frame.saturating_add(MESSAGE_SLACK), frames: MAX_FRAMES }
    }

    fn compute(&self) -> u64 {
        let tensors = self.server.repository_index(true).into_iter().filter_map(|m| {
            let spec = frames::frame_spec(&self.server, &m.name).ok()?;
            let elements = spec.shape.iter().try_fold(1u64, |n, &d| n.checked_mul(u64::try_from(d).ok()?))?;
            elements.checked_mul(spec.datatype.byte_size()? as u64)
        });
        tensors.chain([HEADER_FRAME, self.push]).max().unwrap_or(HEADER_FRAME)
    }
}

/// Binds the ROUTER socket and logs the address it got (a `:0` port resolved); an endpoint that
/// cannot be bound stops the start, as a taken HTTP port does.
pub async fn bind(
    settings: &FrigateSettings,
    server: &Server,
    metrics: &Arc<FrigateMetrics>,
) -> Result<router::Router> {
    let limit = Arc::new(FrameLimit {
        server: server.clone(),
        push: if settings.accept_dir.is_some() { settings.max_model_bytes as u64 } else { 0 },
        cached: std::sync::atomic::AtomicU64::new(HEADER_FRAME),
        computed_at_ms: std::sync::atomic::AtomicU64::new(0),
    });
    let events: Arc<dyn router::Events> = metrics.clone();
    let socket =
        router::Router::bind(&settings.endpoint, Arc::new(move |fresh| limit.limits(fresh)), events).await.map_err(
            |e| Error::unavailable(format!("cannot bind the Frigate ZMQ detector to {}: {e}", settings.endpoint)),
        )?;
    tracing::info!("Started Frigate ZMQ detector at {}", socket.bound());
    Ok(socket)
}

/// Serves the bound socket until `stop` turns true.
pub async fn serve(
    mut socket: router::Router,
    settings: FrigateSettings,
    server: Server,
    metrics: Arc<FrigateMetrics>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<()> {
    if settings.accept_dir.is_none() {
        tracing::info!("Models pushed by Frigate are refused; --frigate-zmq-accept-models DIR accepts them into DIR.");
    }
    let send = socket.sender();
    let cap = NonZeroUsize::new(PEERS).unwrap_or(NonZeroUsize::MIN);
    let detector = Arc::new(Detector {
        server,
        settings,
        metrics,
        chosen: parking_lot::Mutex::new((lru::LruCache::new(cap), None)),
    });
    loop {
        tokio::select! {
            msg = socket.recv() => {
                let Some(msg) = msg else { return Ok(()) };
                let d = detector.clone();
                let send = send.clone();
                tokio::spawn(async move {
                    let router::Incoming { identity, frames, .. } = &msg;
                    let Some((delimiter, payload)) = split_delimiter(frames) else { return };
                    let reply = d.handle(identity.clone(), payload).await;
                    let frames: Vec<Bytes> = delimiter.iter().cloned().chain(reply).collect();
                    // A peer that left is no error of ours; one whose queue is full is counted there.
                    if send.send(identity, frames) == router::Delivery::Gone {
                        tracing::debug!("Frigate ZMQ detector: a reply found its peer gone.");
                    }
                    // `msg` (and the peer's in-flight place it holds) is dropped only now.
                    drop(msg);
                });
            }
            _ = stop.wait_for(|s| *s) => return Ok(()),
        }
    }
}

/// The REQ delimiter (an empty first frame, echoed before the reply) and the request's frames; a
/// DEALER's request has none.
fn split_delimiter(frames: &[Bytes]) -> Option<(&[Bytes], &[Bytes])> {
    if frames.is_empty() {
        return None;
    }
    let at = usize::from(frames[0].is_empty());
    Some(frames.split_at(at))
}

impl Detector {
    #[tracing::instrument(name = "frigate_detect", level = "debug", skip_all)]
    async fn handle(&self, peer: Bytes, payload: &[Bytes]) -> Vec<Bytes> {
        let start = Instant::now();
        let request = match protocol::parse(payload) {
            Ok(r) => r,
            Err(bad) => {
                self.metrics.request(Kind::Detect);
                return self.failed(bad.reason(), &bad.message());
            }
        };
        match request {
            Request::ModelCheck { name } => {
                self.metrics.request(Kind::ModelCheck);
                let (available, loaded) = self.check_model(peer, &name).await;
                protocol::model_check_reply(available, loaded)
            }
            Request::ModelPush { name, data } => {
                self.metrics.request(Kind::ModelPush);
                let (saved, loaded) = self.push_model(peer, &name, data).await;
                protocol::model_push_reply(saved, loaded)
            }
            Request::Detect { shape, datatype, model_type: _, tensor } => {
                self.metrics.request(Kind::Detect);
                let Some(model) = self.model_for(&peer) else {
                    return self
                        .failed("model", "no model: Frigate has not named one yet and --frigate-zmq-model is not set");
                };
                let frame = Frame { shape, datatype, data: tensor };
                match self.detect(&model, frame).await {
                    Ok(boxes) => {
                        self.metrics.observe(start.elapsed().as_secs_f64());
                        protocol::detection_reply(&rows(&boxes), self.settings.reply)
                    }
                    Err((reason, e)) => self.failed(reason, &format!("model '{model}': {}", e.message)),
                }
            }
        }
    }

    /// An all-zero reply for a request that failed, counted and logged.
    fn failed(&self, reason: &'static str, message: &str) -> Vec<Bytes> {
        self.metrics.error(reason);
        tracing::warn!("Frigate ZMQ detector: {message}");
        protocol::detection_reply(&[], self.settings.reply)
    }

    async fn detect(&self, model: &str, frame: Frame) -> Result<Vec<NormBox>, (&'static str, Error)> {
        let ready = self.server.model_ready(model, "").await.unwrap_or(false);
        if !ready {
            return Err(("model", Error::unavailable("the model is not ready")));
        }
        let spec = frames::frame_spec(&self.server, model).map_err(|e| ("model", e))?;
        if let Err((mismatch, e)) = frames::check_frame(model, &spec, &frame) {
            let reason = match mismatch {
                Mismatch::Datatype => "dtype",
                Mismatch::Shape => "shape",
                Mismatch::Length => "short_tensor",
            };
            return Err((reason, e));
        }
        frames::detect_frame(&self.server, model, &spec, frame, ROWS).await.map_err(|e| ("infer", e))
    }

    /// The model for a name Frigate gives: its stem when the server knows such a model, else the fallback.
    fn resolve(&self, name: &str) -> Option<String> {
        let stem = protocol::model_stem(name);
        let known = self.server.repository_index(false).iter().any(|e| e.name == stem);
        if known {
            return Some(stem.to_string());
        }
        self.settings.fallback_model.clone()
    }

    fn choose(&self, peer: Bytes, model: &str) {
        let mut chosen = self.chosen.lock();
        chosen.0.put(peer, model.to_string());
        chosen.1 = Some(model.to_string());
    }

    /// The peer's model, else the last any peer chose, else the fallback.
    fn model_for(&self, peer: &Bytes) -> Option<String> {
        let mut chosen = self.chosen.lock();
        if let Some(m) = chosen.0.get(peer) {
            return Some(m.clone());
        }
        chosen.1.clone().or_else(|| self.settings.fallback_model.clone())
    }

    async fn check_model(&self, peer: Bytes, name: &str) -> (bool, bool) {
        let Some(model) = self.resolve(name) else {
            tracing::info!(
                "Frigate asked for model '{name}', which names no model here{}",
                if self.settings.accept_dir.is_some() {
                    "; it may push it"
                } else {
                    ": set --frigate-zmq-model NAME, or let Frigate push it with --frigate-zmq-accept-models DIR"
                }
            );
            return (false, false);
        };
        self.choose(peer, &model);
        let loaded = models::ensure_loaded(&self.server, &model).await;
        (true, loaded)
    }

    /// Where a model named `stem` lives outside the accept folder `dir`, if anywhere: a folder of that
    /// name in another local repository, or a model the server knows that the accept folder does not hold
    /// (a cloud repository's).
    fn elsewhere(&self, dir: &std::path::Path, stem: &str) -> Option<String> {
        let accept = std::fs::canonicalize(dir).ok();
        for repo in &self.settings.repositories {
            if std::fs::canonicalize(repo).ok() == accept {
                continue;
            }
            if repo.join(stem).exists() {
                return Some(format!("the model repository '{}'", repo.display()));
            }
        }
        let known = self.server.repository_index(false).iter().any(|e| e.name == stem);
        (known && !dir.join(stem).exists()).then(|| "another model repository".to_string())
    }

    async fn push_model(&self, peer: Bytes, name: &str, data: Bytes) -> (bool, bool) {
        let Some(dir) = &self.settings.accept_dir else {
            self.metrics.error("model_push_refused");
            tracing::warn!("Frigate pushed model '{name}'; pushes are refused without --frigate-zmq-accept-models DIR");
            return (false, false);
        };
        let stem = protocol::model_stem(name).to_string();
        if let Some(elsewhere) = self.elsewhere(dir, &stem) {
            self.metrics.error("model_push_refused");
            tracing::warn!(
                "Frigate pushed model '{stem}', refused: {elsewhere} has a model of that name, and a second copy in \
                 '{}' would make the name ambiguous (it would fail to load)",
                dir.display()
            );
            return (false, false);
        }
        match models::save(dir, &stem, &data, self.settings.max_model_bytes) {
            Ok(()) => {
                tracing::info!("Frigate pushed model '{stem}' ({} bytes); saved in '{}'.", data.len(), dir.display());
                self.choose(peer, &stem);
                (true, models::ensure_loaded(&self.server, &stem).await)
            }
            Err(e) => {
                self.metrics.error("model_push_refused");
                tracing::warn!("Frigate pushed model '{stem}', refused: {}", e.message);
                (false, false)
            }
        }
    }
}

/// The reply's rows: class, score, y_min, x_min, y_max, x_max.
fn rows(boxes: &[NormBox]) -> Vec<[f32; COLS]> {
    boxes.iter().take(ROWS).map(|b| [b.class as f32, b.score, b.y_min, b.x_min, b.y_max, b.x_max]).collect()
}

#[cfg(test)]
mod tests;
