//! The connection to one Python stub process, shared by the instance thread, the stub's reader
//! thread and the server tasks answering the stub (`calls.rs`): writing frames on its two sockets,
//! tensors in and out of its shared memory, its open decoupled requests and the calls waiting for its
//! reply. It imports neither `stub.rs` (which starts the process and reads its sockets) nor
//! `calls.rs`, which both build on it.

use super::ipc::{self, WireResponse, WireTensor};
use super::stub_memory::SharedRegion;
use crate::error::{Error, Result};
use crate::model_api::types::{Parameters, Tensor};
use crate::model_api::{ResponseSender, Signals};
use crossbeam_channel::Sender;
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Tensors at most this big travel in the frame: a shared-memory block would cost more than the copy.
const INLINE_MAX: usize = 64;

/// The part of a stub shared with its reader thread and with server tasks answering it.
pub struct Conn {
    /// Writes frames on the side socket; one writer at a time keeps frames whole.
    pub(super) writer: Mutex<UnixStream>,
    /// Writes answers to BLS requests the stub's main thread waits for on the main socket (the
    /// instance thread is then only reading it).
    main_writer: Mutex<UnixStream>,
    /// Tensors in both directions; `None` for auto-complete stubs.
    pub shm: Option<SharedRegion>,
    /// When the stub last sent anything.
    pub(super) last_seen: Mutex<Instant>,
    /// Cleared when the socket closes.
    pub(super) alive: AtomicBool,
    /// Decoupled requests still open, by key.
    pub(super) streams: Mutex<HashMap<u64, ResponseSender>>,
    /// The signals of the requests the stub holds (those of the `execute` calls in flight, and decoupled
    /// requests still open), by key: what `is_cancelled()` asks.
    pub(super) signals: Mutex<HashMap<u64, Signals>>,
    /// The keys of the decoupled requests whose `execute` call is in flight. Responses sent from
    /// `execute` itself come on the main socket, which the instance thread reads: when the stub dies,
    /// only that thread may end these requests, once it has read what the stub sent before dying.
    in_flight: Mutex<Vec<u64>>,
    /// The spans of the last `execute` calls, by call id: the reader thread logs a model's log line in
    /// the span of the call it came from. Kept for a few calls after their answer, since a log line on
    /// the side socket may be read after the answer on the main one.
    spans: Mutex<VecDeque<(u64, tracing::Span)>>,
    /// Whether the model has its own readiness check (`is_model_ready`).
    pub(super) has_probe: AtomicBool,
    /// Custom-metric handles this stub holds; released when it goes away.
    pub metric_handles: Mutex<std::collections::HashSet<u64>>,
    /// Calls into the stub (readiness) waiting for their reply, by id.
    pub(super) replies: Mutex<HashMap<u64, Sender<Result<Value>>>>,
    /// Ids for requests and calls.
    next_id: AtomicU64,
    /// For messages.
    pub label: String,
    /// The instance's name, for Triton's wording of stub failures.
    pub instance: String,
}

/// How many `execute` calls' spans a connection keeps (a pipelining instance has two in flight).
const SPANS_KEPT: usize = 8;

impl Conn {
    /// A connection over the side socket and the writing half of the main one, to the stub that serves
    /// `instance` (`label` names it in messages).
    pub fn new(
        writer: UnixStream,
        main_writer: UnixStream,
        shm: Option<SharedRegion>,
        label: String,
        instance: String,
    ) -> Conn {
        Conn {
            writer: Mutex::new(writer),
            main_writer: Mutex::new(main_writer),
            shm,
            last_seen: Mutex::new(Instant::now()),
            alive: AtomicBool::new(true),
            has_probe: AtomicBool::new(false),
            metric_handles: Mutex::new(Default::default()),
            streams: Mutex::new(HashMap::new()),
            signals: Mutex::new(HashMap::new()),
            in_flight: Mutex::new(Vec::new()),
            spans: Mutex::new(VecDeque::new()),
            replies: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            label,
            instance,
        }
    }

    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Remembers the span an `execute` call runs in (nothing when no subscriber wants it).
    pub fn remember_span(&self, call: u64, span: tracing::Span) {
        if span.is_none() {
            return;
        }
        let mut spans = self.spans.lock();
        if spans.len() == SPANS_KEPT {
            spans.pop_front();
        }
        spans.push_back((call, span));
    }

    /// The span of `execute` call `call`, if it is one of the last few.
    pub fn span_of(&self, call: u64) -> Option<tracing::Span> {
        self.spans.lock().iter().rev().find(|(c, _)| *c == call).map(|(_, s)| s.clone())
    }

    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// Whether the model has its own readiness check.
    pub fn has_probe(&self) -> bool {
        self.has_probe.load(Ordering::SeqCst)
    }

    /// Sends a message on the side socket; its tensors are already described, `payload` holds the
    /// inline ones.
    pub fn send(&self, msg: &Value, payload: &[&[u8]]) -> Result<()> {
        self.send_on(false, msg, payload)
    }

    /// Sends a message on the main socket (`main`) or the side one.
    pub fn send_on(&self, main: bool, msg: &Value, payload: &[&[u8]]) -> Result<()> {
        let json =
            serde_json::to_vec(msg).map_err(|e| Error::internal(format!("cannot encode a stub message: {e}")))?;
        let mut w = if main { self.main_writer.lock() } else { self.writer.lock() };
        ipc::write_frame(&mut *w, &json, payload)
            .map_err(|e| Error::unavailable(format!("cannot send to the Python stub of {}: {e}", self.label)))
    }

    /// Describes tensors for the stub, copying each into shared memory or, when small or when shared
    /// memory is full, into `payload`.
    pub fn encode_tensors<'a>(
        &self,
        tensors: impl IntoIterator<Item = &'a Tensor>,
        payload: &mut Vec<bytes::Bytes>,
        payload_len: &mut u64,
    ) -> Result<Vec<WireTensor>> {
        let mut out = Vec::new();
        for t in tensors {
            let data = t.data.to_host()?;
            let mut w = WireTensor {
                n: t.name.clone(),
                t: t.datatype.as_str().into(),
                s: t.shape.clone(),
                l: data.len() as u64,
                o: None,
                i: None,
            };
            let shm_off = match &self.shm {
                Some(shm) if data.len() > INLINE_MAX => shm.put(&data),
                _ => None,
            };
            match shm_off {
                Some(off) => w.o = Some(off as u64),
                None => {
                    w.i = Some(*payload_len);
                    *payload_len += data.len() as u64;
                    payload.push(data);
                }
            }
            out.push(w);
        }
        Ok(out)
    }

    /// Registers a decoupled request's response sender before the request is sent.
    pub fn open_stream(&self, key: u64, sender: ResponseSender) {
        self.streams.lock().insert(key, sender);
    }

    /// Marks the decoupled requests of the `execute` call about to be sent as in flight (see
    /// [`Conn::in_flight`]).
    pub fn set_in_flight(&self, keys: &[u64]) {
        let mut f = self.in_flight.lock();
        f.clear();
        f.extend_from_slice(keys);
    }

    /// The `execute` call has ended. If the stub died meanwhile, its reader thread left these requests
    /// open (they were in flight): end them here.
    pub fn end_in_flight(&self, keys: &[u64]) {
        self.in_flight.lock().clear();
        if !self.is_alive() {
            self.fail_streams(Some(keys), &self.gone());
        }
    }

    /// The error for requests left open by a stub that exited.
    pub(super) fn gone(&self) -> Error {
        Error::internal(format!("Stub process '{}' is not healthy. It exited.", self.instance))
    }

    /// Ends open decoupled requests with `e`: those of `keys` (execute failed for all of them, or the stub
    /// died during it), or with `None` every one except those of the call in flight (the stub died).
    pub fn fail_streams(&self, keys: Option<&[u64]>, e: &Error) {
        let failed: Vec<(u64, ResponseSender)> = {
            let mut s = self.streams.lock();
            let ended: Vec<u64> = match keys {
                None => {
                    let in_flight = self.in_flight.lock();
                    s.keys().filter(|k| !in_flight.contains(k)).copied().collect()
                }
                Some(keys) => keys.to_vec(),
            };
            ended.into_iter().filter_map(|k| s.remove(&k).map(|sender| (k, sender))).collect()
        };
        self.unwatch(failed.iter().map(|(k, _)| *k));
        for (_, sender) in failed {
            sender.send(Err(e.clone()));
        }
    }

    /// Forgets a decoupled request's key without ending the request (its model rescheduled it: the next
    /// execution sends it under a new key).
    pub fn close_stream(&self, key: u64) {
        self.streams.lock().remove(&key);
        self.unwatch([key]);
    }

    /// Registers the signals of a request about to be sent, for [`Conn::is_cancelled`].
    pub fn watch(&self, key: u64, signals: &Signals) {
        self.signals.lock().insert(key, signals.clone());
    }

    /// Forgets the signals of requests the stub is done with.
    pub fn unwatch(&self, keys: impl IntoIterator<Item = u64>) {
        let mut s = self.signals.lock();
        for k in keys {
            s.remove(&k);
        }
    }

    /// Whether a request the stub holds was cancelled (its client went away). A request the stub is
    /// done with is not.
    pub fn is_cancelled(&self, key: u64) -> bool {
        self.signals.lock().get(&key).is_some_and(Signals::is_cancelled)
    }

    /// Asks the stub something and waits at most `timeout` for the reply.
    pub fn ask(&self, kind: &str, timeout: Duration) -> Result<Value> {
        let id = self.next_id();
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.replies.lock().insert(id, tx);
        let sent = self.send(&json!({"type": kind, "id": id}), &[]);
        let result = sent.and_then(|()| match rx.recv_timeout(timeout) {
            Ok(r) => r,
            Err(_) => {
                Err(Error::unavailable(format!("the Python stub of {} did not answer within {timeout:?}", self.label)))
            }
        });
        self.replies.lock().remove(&id);
        result
    }

    /// Reads a tensor the stub described (ring or payload).
    pub fn read_tensor(&self, t: &WireTensor, payload: &[u8]) -> Result<Tensor> {
        ipc::read_tensor(t, payload, |off, len| match &self.shm {
            Some(shm) => shm.read_ring(off, len),
            None => Err(Error::internal("the Python stub used shared memory it does not have")),
        })
    }

    /// A stub response as outputs and parameters, or its error.
    pub fn read_response(&self, r: &WireResponse, payload: &[u8]) -> Result<(Vec<Tensor>, Parameters)> {
        if let Some(e) = &r.err {
            return Err(ipc::error_from_code(e.c, e.m.clone()));
        }
        let outputs = r.out.iter().map(|t| self.read_tensor(t, payload)).collect::<Result<Vec<_>>>()?;
        Ok((outputs, ipc::params_from_json(&r.params)))
    }
}

#[cfg(test)]
impl Conn {
    /// A connection over a socket pair with no stub behind it.
    pub(super) fn for_tests() -> Conn {
        let (a, b) = UnixStream::pair().unwrap();
        Conn::new(a, b, None, "model 'm'".into(), "m_0".into())
    }
}

#[cfg(test)]
mod tests;
