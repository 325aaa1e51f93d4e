//! A ZeroMQ ROUTER socket on tokio, over TCP or IPC: REQ and DEALER peers connect, each message comes
//! out tagged with its peer's routing identity, and replies go back by identity (ZMTP in `zmtp.rs`).
//!
//! What one peer can make the server hold is bounded, as libzmq's high-water marks bound it:
//! - a frame or message past the caller's size limit closes the connection from its header, before
//!   anything is allocated for it;
//! - at most `in_flight` of a peer's messages are being handled at once; its next message is not read
//!   until one of them is answered, so a peer that floods waits in its own buffers, not in ours;
//! - at most `send_queue` replies wait for a peer; past that (a peer that does not read) a reply is
//!   dropped and counted, as a ROUTER drops to a peer at its high-water mark;
//! - every buffer of a peer is its connection's, freed when the peer goes;
//! - at most [`MAX_PEERS`] peers are connected, and a connection has [`HANDSHAKE`] to say who it is.

use super::zmtp::{self, Inbound, Limits, WireError};
use crate::error::{Error, Result};
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

/// The most peers connected at once; a connection past it is closed at once, with a warning.
pub const MAX_PEERS: usize = 1024;
/// How long a new connection has to send its greeting and READY.
pub const HANDSHAKE: Duration = Duration::from_secs(30);
/// Messages of one peer handled at once.
pub const IN_FLIGHT: usize = 32;
/// Replies queued for one peer (libzmq's default send high-water mark).
pub const SEND_QUEUE: usize = 1000;
/// Bytes of each connection's read and write buffers.
const IO_BUFFER: usize = 8 * 1024;

/// What the socket tells its owner about, for metrics.
pub trait Events: Send + Sync {
    /// A peer sent a frame or message past the size limit, and its connection was closed.
    fn too_large(&self);
    /// A reply was dropped because its peer's queue was full.
    fn reply_dropped(&self);
    /// The number of connected peers changed.
    fn peers(&self, connected: usize);
}

/// The size limits of a peer's messages: `fresh` asks for an exact figure instead of a cached one.
pub type SizeLimit = Arc<dyn Fn(bool) -> Limits + Send + Sync>;

/// A message from a peer. While it lives it holds one of its peer's in-flight places.
pub struct Incoming {
    pub identity: Bytes,
    pub frames: Vec<Bytes>,
    _permit: OwnedSemaphorePermit,
}

/// What became of a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    Queued,
    /// The peer's queue was full.
    Dropped,
    /// No peer has that identity (it left).
    Gone,
}

enum Outgoing {
    Message(Vec<Bytes>),
    /// Already encoded (a PONG).
    Raw(Vec<u8>),
}

struct Peer {
    /// Which connection holds the identity (a reconnect under the same identity gets a new one).
    conn: u64,
    tx: mpsc::Sender<Outgoing>,
}

struct Shared {
    peers: Mutex<HashMap<Bytes, Peer>>,
    /// Connections past their handshake or in it, for [`MAX_PEERS`].
    connections: AtomicU64,
    next_identity: AtomicU32,
    next_conn: AtomicU64,
    size_limit: SizeLimit,
    events: Arc<dyn Events>,
}

/// The bound socket: [`Router::recv`] gives messages, [`Router::sender`] answers them.
pub struct Router {
    shared: Arc<Shared>,
    inbox: mpsc::Receiver<Incoming>,
    accept: JoinHandle<()>,
    bound: String,
    /// The IPC socket file, removed when the socket closes.
    ipc_path: Option<PathBuf>,
}

/// Answers peers by identity; cheap to clone.
#[derive(Clone)]
pub struct RouterSender {
    shared: Arc<Shared>,
}

/// Where to bind: `tcp://HOST:PORT` (`*` for every address, port 0 for any) or `ipc://PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Tcp(String, u16),
    Ipc(PathBuf),
}

impl Endpoint {
    pub fn parse(s: &str) -> Result<Endpoint> {
        if let Some(path) = s.strip_prefix("ipc://") {
            if path.is_empty() {
                return Err(Error::invalid(format!("'{s}' names no socket file")));
            }
            return Ok(Endpoint::Ipc(PathBuf::from(path)));
        }
        let rest = s.strip_prefix("tcp://").ok_or_else(|| {
            Error::invalid(format!("'{s}' is not a ZeroMQ endpoint tritonrs binds: tcp://HOST:PORT or ipc://PATH"))
        })?;
        let (host, port) = rest.rsplit_once(':').ok_or_else(|| Error::invalid(format!("'{s}' has no port")))?;
        let port: u16 = port.parse().map_err(|_| Error::invalid(format!("'{s}' has no valid port")))?;
        let host = match host {
            "*" => "0.0.0.0",
            h => h.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(h),
        };
        if host.is_empty() {
            return Err(Error::invalid(format!("'{s}' has no host")));
        }
        Ok(Endpoint::Tcp(host.to_string(), port))
    }
}

enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

impl Router {
    /// Binds `endpoint`; the bound address (a `:0` port resolved) is [`Router::bound`].
    pub async fn bind(endpoint: &str, size_limit: SizeLimit, events: Arc<dyn Events>) -> Result<Router> {
        let (listener, bound, ipc_path) = match Endpoint::parse(endpoint)? {
            Endpoint::Tcp(host, port) => {
                let l = tokio::net::TcpListener::bind((host.as_str(), port))
                    .await
                    .map_err(|e| Error::unavailable(e.to_string()))?;
                let addr = l.local_addr().map_err(|e| Error::unavailable(e.to_string()))?;
                (Listener::Tcp(l), format!("tcp://{addr}"), None)
            }
            Endpoint::Ipc(path) => {
                // A socket file left by an earlier run would make the bind fail (libzmq replaces it too);
                // anything else at that path is not ours to remove.
                if let Ok(meta) = std::fs::symlink_metadata(&path) {
                    use std::os::unix::fs::FileTypeExt;
                    if meta.file_type().is_socket() {
                        let _ = std::fs::remove_file(&path);
                    }
                }
                let l = tokio::net::UnixListener::bind(&path).map_err(|e| Error::unavailable(e.to_string()))?;
                (Listener::Unix(l), format!("ipc://{}", path.display()), Some(path))
            }
        };
        let shared = Arc::new(Shared {
            peers: Mutex::new(HashMap::new()),
            connections: AtomicU64::new(0),
            next_identity: AtomicU32::new(fastrand::u32(..)),
            next_conn: AtomicU64::new(0),
            size_limit,
            events,
        });
        let (inbox_tx, inbox) = mpsc::channel(MAX_PEERS);
        let accept = tokio::spawn(accept_loop(listener, shared.clone(), inbox_tx));
        Ok(Router { shared, inbox, accept, bound, ipc_path })
    }

    pub fn bound(&self) -> &str {
        &self.bound
    }

    /// The next message from any peer.
    pub async fn recv(&mut self) -> Option<Incoming> {
        self.inbox.recv().await
    }

    pub fn sender(&self) -> RouterSender {
        RouterSender { shared: self.shared.clone() }
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        self.accept.abort();
        if let Some(path) = &self.ipc_path {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl RouterSender {
    /// Queues `frames` for the peer `identity` without waiting: a full queue drops the reply.
    pub fn send(&self, identity: &Bytes, frames: Vec<Bytes>) -> Delivery {
        let Some(tx) = self.shared.peers.lock().get(identity).map(|p| p.tx.clone()) else {
            return Delivery::Gone;
        };
        match tx.try_send(Outgoing::Message(frames)) {
            Ok(()) => Delivery::Queued,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.shared.events.reply_dropped();
                Delivery::Dropped
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Delivery::Gone,
        }
    }
}

async fn accept_loop(listener: Listener, shared: Arc<Shared>, inbox: mpsc::Sender<Incoming>) {
    let mut backoff = Duration::ZERO;
    loop {
        let accepted = match &listener {
            Listener::Tcp(l) => l.accept().await.map(|(s, addr)| {
                let _ = s.set_nodelay(true);
                (Stream::Tcp(s), addr.to_string())
            }),
            Listener::Unix(l) => l.accept().await.map(|(s, _)| (Stream::Unix(s), "a local peer".to_string())),
        };
        let (stream, addr) = match accepted {
            Ok(a) => {
                backoff = Duration::ZERO;
                a
            }
            Err(e) => {
                // EMFILE and the like: wait instead of spinning, and say so once per burst.
                if backoff.is_zero() {
                    tracing::warn!("Frigate ZMQ detector: cannot accept a connection: {e}");
                }
                backoff = (backoff * 2).clamp(Duration::from_millis(10), Duration::from_secs(1));
                tokio::time::sleep(backoff).await;
                continue;
            }
        };
        if shared.connections.fetch_add(1, Ordering::AcqRel) >= MAX_PEERS as u64 {
            shared.connections.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!(
                "Frigate ZMQ detector: closed a connection from {addr}: {MAX_PEERS} peers are connected already"
            );
            continue;
        }
        let (shared, inbox) = (shared.clone(), inbox.clone());
        tokio::spawn(async move {
            match stream {
                Stream::Tcp(s) => connection(&shared, s, &addr, inbox).await,
                Stream::Unix(s) => connection(&shared, s, &addr, inbox).await,
            }
            shared.connections.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

enum Stream {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

/// The greeting and READY exchange; the peer's READY.
async fn handshake<R, W>(rd: &mut R, wr: &mut W) -> Result<zmtp::Ready, WireError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    wr.write_all(&zmtp::greeting()).await?;
    wr.flush().await?;
    zmtp::read_greeting(rd).await?;
    wr.write_all(&zmtp::ready("ROUTER")).await?;
    wr.flush().await?;
    zmtp::read_ready(rd).await
}

impl Shared {
    /// Registers a peer under the identity it asked for, or a new one (five bytes, a zero first, as
    /// libzmq makes them); `None` when another connected peer holds the identity asked for.
    fn register(&self, asked: Bytes, conn: u64, tx: mpsc::Sender<Outgoing>) -> Option<(Bytes, usize)> {
        let mut peers = self.peers.lock();
        let identity = if asked.is_empty() {
            loop {
                let n = self.next_identity.fetch_add(1, Ordering::Relaxed);
                let mut id = vec![0u8];
                id.extend_from_slice(&n.to_be_bytes());
                let id = Bytes::from(id);
                if !peers.contains_key(&id) {
                    break id;
                }
            }
        } else if peers.contains_key(&asked) {
            return None;
        } else {
            asked
        };
        peers.insert(identity.clone(), Peer { conn, tx });
        Some((identity, peers.len()))
    }

    fn unregister(&self, identity: &Bytes, conn: u64) -> usize {
        let mut peers = self.peers.lock();
        if peers.get(identity).is_some_and(|p| p.conn == conn) {
            peers.remove(identity);
        }
        peers.len()
    }
}

/// Serves one connection until it closes, the peer breaks the protocol or the socket is dropped.
async fn connection<S>(shared: &Arc<Shared>, stream: S, addr: &str, inbox: mpsc::Sender<Incoming>)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (rd, mut wr) = tokio::io::split(stream);
    let mut rd = BufReader::with_capacity(IO_BUFFER, rd);
    let Some(ready) = greet(&mut rd, &mut wr, addr).await else { return };
    let conn = shared.next_conn.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = mpsc::channel(SEND_QUEUE);
    let Some((identity, peers)) = shared.register(ready.identity.clone(), conn, tx.clone()) else {
        tracing::warn!(
            "Frigate ZMQ detector: closed the connection from {addr}: another connected peer has its identity {:?}",
            String::from_utf8_lossy(&ready.identity)
        );
        return;
    };
    shared.events.peers(peers);
    let writer_failed = Arc::new(Notify::new());
    let writer = tokio::spawn(write_loop(BufWriter::with_capacity(IO_BUFFER, wr), rx, writer_failed.clone()));
    read_loop(shared, &mut rd, addr, &identity, &inbox, &tx, &writer_failed).await;
    drop(tx);
    writer.abort();
    shared.events.peers(shared.unregister(&identity, conn));
}

/// Greets a new connection within [`HANDSHAKE`] and checks that its socket type can talk to a
/// ROUTER; `None` (logged) when it cannot.
async fn greet<R, W>(rd: &mut R, wr: &mut W, addr: &str) -> Option<zmtp::Ready>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let ready = match tokio::time::timeout(HANDSHAKE, handshake(rd, wr)).await {
        Ok(Ok(r)) => r,
        Ok(Err(WireError::Io(e))) => {
            tracing::debug!("Frigate ZMQ detector: {addr} left during the handshake: {e}");
            return None;
        }
        Ok(Err(e)) => {
            tracing::warn!("Frigate ZMQ detector: closed the connection from {addr}: {e}");
            return None;
        }
        Err(_) => {
            tracing::warn!(
                "Frigate ZMQ detector: closed the connection from {addr}: no handshake in {} s",
                HANDSHAKE.as_secs()
            );
            return None;
        }
    };
    let socket_type = ready.socket_type.to_ascii_uppercase();
    if !zmtp::ROUTER_PEERS.contains(&socket_type.as_str()) {
        tracing::warn!(
            "Frigate ZMQ detector: closed the connection from {addr}: a {} socket cannot talk to a ROUTER (REQ or DEALER can)",
            ready.socket_type.escape_debug()
        );
        return None;
    }
    Some(ready)
}

/// Hands a registered peer's messages to the socket's owner, at most [`IN_FLIGHT`] at once, and
/// answers its pings, until it leaves, breaks the protocol, the owner goes or writing to it fails.
async fn read_loop<R: AsyncRead + Unpin>(
    shared: &Shared,
    rd: &mut R,
    addr: &str,
    identity: &Bytes,
    inbox: &mpsc::Sender<Incoming>,
    tx: &mpsc::Sender<Outgoing>,
    writer_failed: &Notify,
) {
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut limit = |fresh: bool| (shared.size_limit)(fresh);
    loop {
        let step = async {
            let permit = in_flight.clone().acquire_owned().await.ok();
            (permit, zmtp::read_inbound(rd, &mut limit).await)
        };
        let (permit, read) = tokio::select! {
            r = step => r,
            _ = writer_failed.notified() => break,
        };
        match read {
            Ok(Inbound::Message(frames)) => {
                let Some(permit) = permit else { break };
                if inbox.send(Incoming { identity: identity.clone(), frames, _permit: permit }).await.is_err() {
                    break;
                }
            }
            Ok(Inbound::Ping(context)) => {
                // A PONG that does not fit behind a full queue is skipped: the peer is not reading anyway.
                let _ = tx.try_send(Outgoing::Raw(zmtp::pong(&context)));
            }
            Err(WireError::Io(_)) => break,
            Err(e @ WireError::TooLarge { .. }) => {
                shared.events.too_large();
                tracing::warn!("Frigate ZMQ detector: closed the connection from {addr}: {e}");
                break;
            }
            Err(e) => {
                tracing::warn!("Frigate ZMQ detector: closed the connection from {addr}: {e}");
                break;
            }
        }
    }
}

/// Writes queued replies, flushing when the queue is empty; tells the reader when writing fails.
async fn write_loop<W: AsyncWrite + Unpin>(mut w: BufWriter<W>, mut rx: mpsc::Receiver<Outgoing>, failed: Arc<Notify>) {
    async fn put<W: AsyncWrite + Unpin>(w: &mut BufWriter<W>, out: Outgoing) -> std::io::Result<()> {
        match out {
            Outgoing::Message(frames) => zmtp::write_message(w, &frames).await,
            Outgoing::Raw(bytes) => w.write_all(&bytes).await,
        }
    }
    while let Some(first) = rx.recv().await {
        let mut result = put(&mut w, first).await;
        while result.is_ok() {
            match rx.try_recv() {
                Ok(next) => result = put(&mut w, next).await,
                Err(_) => break,
            }
        }
        if result.is_err() || w.flush().await.is_err() {
            failed.notify_one();
            return;
        }
    }
}

#[cfg(test)]
mod tests;
