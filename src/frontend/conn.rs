//! Connection guarding shared by the HTTP, gRPC and metrics listeners.
//!
//! A [`GuardedListener`] accepts connections itself instead of leaving that to axum or tonic, so that:
//! - each listener holds at most `max_connections` sockets; at the cap it closes the oldest connection
//!   that has no request in flight (one that never sent a complete request first), and when every
//!   connection is busy it stops accepting until one closes, leaving newcomers in the kernel's backlog;
//! - accept errors (EMFILE, ENFILE, ENOMEM…) back off exponentially up to a second, logged once per burst,
//!   instead of spinning;
//! - a connection must send a complete request head within the header timeout (HTTP/1: counted from the
//!   accept for the first request and from the first byte for later ones; HTTP/2: from the accept to its
//!   first request), and an HTTP/1 connection with nothing in flight is closed after the idle timeout;
//! - a connection past its maximum lifetime (gRPC's max connection age plus grace) is closed.
//!
//! [`Track`] (a tower layer) marks when a connection's requests start and end: from the call to the end
//! of the response body. The connection's [`Conn`] reaches it through the request extensions, put there
//! by tonic (`Connected`) or axum (`ConnectInfo`). One reaper task per listener closes the connections
//! whose time is up; closing means the socket fails its next read or write, so hyper drops it.

use crate::core::heartbeat::now_ms;
use axum::http;
use futures_util::task::AtomicWaker;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// How one listener guards its connections.
#[derive(Clone, Debug)]
pub struct ConnLimits {
    /// The listener's name in log lines ("HTTP", "gRPC", "metrics").
    pub name: &'static str,
    /// The flag that sets the cap, named in log lines.
    pub cap_flag: &'static str,
    /// Most connections held open at once.
    pub max_connections: usize,
    /// Time allowed for a request head (see the module comment); `None`: unlimited.
    pub header_timeout: Option<Duration>,
    /// Time an HTTP/1 connection may stay open with nothing in flight; `None`: unlimited.
    pub idle_timeout: Option<Duration>,
    /// Age at which a connection is closed, even with requests in flight (gRPC's max connection age
    /// plus its grace); `None`: unlimited.
    pub max_lifetime: Option<Duration>,
    /// HTTP/2 (gRPC): the header timeout covers only the first request, and there is no idle timeout
    /// (HTTP/2 has its own keep-alive pings and GOAWAY).
    pub http2: bool,
}

/// What the socket, the request tracker and the reaper know of one connection.
#[derive(Debug)]
pub struct ConnState {
    id: u64,
    accepted: u64,
    /// When the current request head began (0: not reading one).
    head_since: AtomicU64,
    active: AtomicU32,
    served: AtomicU64,
    /// Last time bytes were read or written.
    last_io: AtomicU64,
    /// Last time a request ended.
    last_done: AtomicU64,
    killed: AtomicBool,
    read_waker: AtomicWaker,
    write_waker: AtomicWaker,
}

/// A connection's shared state: the `ConnectInfo` handed to the services.
#[derive(Clone, Debug)]
pub struct Conn(Arc<ConnState>);

impl Conn {
    fn new(id: u64) -> Self {
        let now = now_ms();
        Conn(Arc::new(ConnState {
            id,
            accepted: now,
            head_since: AtomicU64::new(now),
            active: AtomicU32::new(0),
            served: AtomicU64::new(0),
            last_io: AtomicU64::new(now),
            last_done: AtomicU64::new(0),
            killed: AtomicBool::new(false),
            read_waker: AtomicWaker::new(),
            write_waker: AtomicWaker::new(),
        }))
    }

    /// Makes every later read and write of the socket fail, and wakes a read or write waiting on it.
    fn kill(&self) {
        self.0.killed.store(true, Ordering::Release);
        self.0.read_waker.wake();
        self.0.write_waker.wake();
    }

    fn killed(&self) -> bool {
        self.0.killed.load(Ordering::Acquire)
    }

    fn snapshot(&self) -> Snapshot {
        let s = &self.0;
        Snapshot {
            accepted: s.accepted,
            head_since: s.head_since.load(Ordering::Relaxed),
            active: s.active.load(Ordering::Acquire),
            served: s.served.load(Ordering::Relaxed),
            last_io: s.last_io.load(Ordering::Relaxed),
            last_done: s.last_done.load(Ordering::Relaxed),
        }
    }
}

/// A request in flight on a connection, from the service call to the end of its response body.
#[derive(Debug)]
pub struct Active(Conn);

impl Active {
    fn start(conn: &Conn) -> Self {
        let s = &conn.0;
        s.active.fetch_add(1, Ordering::AcqRel);
        s.served.fetch_add(1, Ordering::Relaxed);
        s.head_since.store(0, Ordering::Relaxed);
        Active(conn.clone())
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        let s = &self.0 .0;
        s.last_done.store(now_ms(), Ordering::Relaxed);
        s.active.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A copy of a connection's state at one moment, for [`verdict`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub accepted: u64,
    pub head_since: u64,
    pub active: u32,
    pub served: u64,
    pub last_io: u64,
    pub last_done: u64,
}

/// Why the reaper closes a connection, if it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Keep,
    HeaderTimeout,
    Idle,
    TooOld,
}

/// Whether a connection in state `s` at time `now` (both from [`now_ms`]) has outstayed its limits.
pub fn verdict(s: &Snapshot, now: u64, limits: &ConnLimits) -> Verdict {
    if limits.max_lifetime.is_some_and(|t| now.saturating_sub(s.accepted) > t.as_millis() as u64) {
        return Verdict::TooOld;
    }
    if s.active > 0 {
        return Verdict::Keep;
    }
    if let Some(t) = limits.header_timeout {
        if s.head_since != 0 && now.saturating_sub(s.head_since) > t.as_millis() as u64 {
            return Verdict::HeaderTimeout;
        }
    }
    if let (Some(t), false) = (limits.idle_timeout, limits.http2) {
        let since = s.last_io.max(s.last_done).max(s.accepted);
        if s.head_since == 0 && now.saturating_sub(since) > t.as_millis() as u64 {
            return Verdict::Idle;
        }
    }
    Verdict::Keep
}

/// Which connection to close to make room for a new one: the oldest that never had a request, else the
/// one idle longest; never one with a request in flight.
pub fn victim(conns: &[(u64, Snapshot)]) -> Option<u64> {
    let idle = conns.iter().filter(|(_, s)| s.active == 0);
    let fresh = idle.clone().filter(|(_, s)| s.served == 0).min_by_key(|(id, s)| (s.accepted, *id));
    fresh.or_else(|| idle.min_by_key(|(id, s)| (s.last_io.max(s.last_done), *id))).map(|(id, _)| *id)
}

/// The snapshots of the connections that may still be closed for room (those not closing already).
fn victims_of(conns: &HashMap<u64, Conn>) -> Vec<(u64, Snapshot)> {
    conns.iter().filter(|(_, c)| !c.killed()).map(|(id, c)| (*id, c.snapshot())).collect()
}

/// The connections of one listener.
struct Registry {
    limits: ConnLimits,
    conns: Mutex<HashMap<u64, Conn>>,
    /// Signalled whenever a connection closes.
    closed: Notify,
}

impl Registry {
    fn remove(&self, id: u64) {
        self.conns.lock().remove(&id);
        self.closed.notify_waiters();
    }
}

/// A `TcpListener` that enforces [`ConnLimits`]; see the module comment.
pub struct GuardedListener {
    inner: TcpListener,
    registry: Arc<Registry>,
    next_id: u64,
    /// Current accept back-off; reset by a successful accept.
    backoff: Option<Duration>,
    /// When an accept error was last logged, and how many were not logged since.
    error_log: Option<(Instant, u64)>,
    /// When the cap was last logged, and how many connections were closed for room since.
    shed_log: Option<(Instant, u64)>,
}

const FIRST_BACKOFF: Duration = Duration::from_millis(5);
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// Repeated warnings about one listener are at most this frequent.
const LOG_EVERY: Duration = Duration::from_secs(60);

impl GuardedListener {
    pub fn new(inner: TcpListener, limits: ConnLimits) -> Self {
        let registry = Arc::new(Registry { limits, conns: Mutex::new(HashMap::new()), closed: Notify::new() });
        let l = &registry.limits;
        if l.header_timeout.is_some() || l.idle_timeout.is_some() || l.max_lifetime.is_some() {
            tokio::spawn(reap(Arc::downgrade(&registry)));
        }
        GuardedListener { inner, registry, next_id: 0, backoff: None, error_log: None, shed_log: None }
    }

    pub fn limits(&self) -> &ConnLimits {
        &self.registry.limits
    }

    /// Open connections.
    pub fn open(&self) -> usize {
        self.registry.conns.lock().len()
    }

    /// Waits for a connection, within the cap; never fails (errors are retried after a back-off, as a
    /// listening socket has nothing better to do).
    pub async fn accept_guarded(&mut self) -> GuardedStream {
        loop {
            self.wait_for_room().await;
            match self.inner.accept().await {
                Ok((stream, _)) => {
                    self.backoff = None;
                    // Small responses must leave at once: Nagle's algorithm would hold them back.
                    let _ = stream.set_nodelay(true);
                    self.next_id += 1;
                    let conn = Conn::new(self.next_id);
                    let over = {
                        let mut conns = self.registry.conns.lock();
                        let old = (conns.len() >= self.registry.limits.max_connections)
                            .then(|| victim(&victims_of(&conns)).and_then(|id| conns.get(&id).cloned()))
                            .flatten();
                        conns.insert(self.next_id, conn.clone());
                        old
                    };
                    // Over the cap: the newcomer stays and the best victim goes.
                    if let Some(old) = over {
                        old.kill();
                        self.log_shed();
                    }
                    return GuardedStream { stream, conn, registry: self.registry.clone(), hold: None };
                }
                Err(e) if is_connection_error(&e) => {}
                Err(e) => {
                    let delay = self.backoff.map_or(FIRST_BACKOFF, |d| (d * 2).min(MAX_BACKOFF));
                    self.backoff = Some(delay);
                    self.log_accept_error(&e);
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    /// At the cap with every connection busy (none to close for a newcomer), waits for one to close
    /// or to go idle; newcomers wait in the kernel's backlog meanwhile.
    async fn wait_for_room(&self) {
        let registry = &self.registry;
        loop {
            let closed = registry.closed.notified();
            tokio::pin!(closed);
            closed.as_mut().enable();
            {
                let conns = registry.conns.lock();
                if conns.len() < registry.limits.max_connections || victim(&victims_of(&conns)).is_some() {
                    return;
                }
            }
            // Going idle is not signalled: the timeout looks again.
            let _ = tokio::time::timeout(Duration::from_millis(100), closed).await;
        }
    }

    /// Logs accept errors at most once a minute: out of descriptors, accepts fail and succeed in turns.
    fn log_accept_error(&mut self, e: &io::Error) {
        match &mut self.error_log {
            Some((at, n)) if at.elapsed() < LOG_EVERY => *n += 1,
            _ => {
                let unlogged = self.error_log.map_or(0, |(_, n)| n);
                tracing::warn!(
                    "{} cannot accept connections: {e}; retrying with back-off (open connections: {}{}).",
                    self.registry.limits.name,
                    self.open(),
                    if unlogged > 0 {
                        format!("; {unlogged} more failed accepts since the last warning")
                    } else {
                        String::new()
                    }
                );
                self.error_log = Some((Instant::now(), 0));
            }
        }
    }

    fn log_shed(&mut self) {
        let limits = &self.registry.limits;
        match &mut self.shed_log {
            Some((at, n)) if at.elapsed() < LOG_EVERY => *n += 1,
            _ => {
                let before = self.shed_log.map(|(_, n)| n).unwrap_or(0);
                tracing::warn!(
                    "{} has {} connections open ({}); closing the oldest idle ones to make room{}.",
                    limits.name,
                    limits.max_connections,
                    limits.cap_flag,
                    if before > 0 { format!(" ({before} closed since the last warning)") } else { String::new() }
                );
                self.shed_log = Some((Instant::now(), 0));
            }
        }
    }

    /// The listener as a stream of connections, for tonic.
    pub fn into_stream(self) -> impl futures_util::Stream<Item = io::Result<GuardedStream>> + Send + 'static {
        futures_util::stream::unfold(self, |mut l| async move {
            let s = l.accept_guarded().await;
            Some((Ok(s), l))
        })
    }
}

impl Drop for GuardedListener {
    /// At shutdown the front-ends drop their listener and let open requests finish. A connection that
    /// is still sending its first request head would hold that up for the whole header timeout, so it
    /// is closed now.
    fn drop(&mut self) {
        for conn in self.registry.conns.lock().values() {
            let s = conn.snapshot();
            if s.active == 0 && s.head_since != 0 {
                conn.kill();
            }
        }
    }
}

/// Errors that concern one connection, not the listening socket: accept the next one at once.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    )
}

/// Closes the connections of one listener whose time is up, until the listener and its connections
/// are gone.
async fn reap(registry: Weak<Registry>) {
    let Some(limits) = registry.upgrade().map(|r| r.limits.clone()) else { return };
    let shortest = [limits.header_timeout, limits.idle_timeout, limits.max_lifetime].into_iter().flatten().min();
    let tick = shortest.map(|d| (d / 4).clamp(Duration::from_millis(100), Duration::from_secs(1)));
    let Some(tick) = tick else { return };
    let mut timer = tokio::time::interval(tick);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        timer.tick().await;
        let Some(registry) = registry.upgrade() else { return };
        let now = now_ms();
        let mut header = 0usize;
        for conn in registry.conns.lock().values() {
            if conn.killed() {
                continue;
            }
            match verdict(&conn.snapshot(), now, &limits) {
                Verdict::Keep => {}
                Verdict::HeaderTimeout => {
                    header += 1;
                    conn.kill();
                }
                Verdict::Idle | Verdict::TooOld => conn.kill(),
            }
        }
        if header > 0 {
            tracing::debug!("{}: closed {header} connection(s) that sent no complete request in time.", limits.name);
        }
    }
}

/// An accepted socket under its listener's guard.
pub struct GuardedStream {
    stream: TcpStream,
    conn: Conn,
    registry: Arc<Registry>,
    /// A write held back on an HTTP/2 connection (see [`GuardedStream::hold_back`]).
    hold: Option<Arc<Held>>,
}

/// The wake-up a held-back write waits for: the I/O thread's deferred wake, once it has run the tasks
/// ready before it.
struct Held {
    fired: AtomicBool,
    task: std::task::Waker,
}

impl std::task::Wake for Held {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.fired.store(true, Ordering::Release);
        self.task.wake_by_ref();
    }
}

impl GuardedStream {
    pub fn conn(&self) -> &Conn {
        &self.conn
    }

    fn closed_error() -> io::Error {
        io::Error::new(io::ErrorKind::TimedOut, "connection closed by the server's connection limits")
    }

    fn saw_io(&self, read: bool) {
        let s = &self.conn.0;
        let now = now_ms();
        s.last_io.store(now, Ordering::Relaxed);
        // The first bytes of a later HTTP/1 request head start its header timer.
        if read
            && !self.registry.limits.http2
            && s.active.load(Ordering::Acquire) == 0
            && s.head_since.load(Ordering::Relaxed) == 0
        {
            s.head_since.store(now, Ordering::Relaxed);
        }
    }
}

impl Drop for GuardedStream {
    fn drop(&mut self) {
        self.registry.remove(self.conn.0.id);
    }
}

impl AsyncRead for GuardedStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.conn.killed() {
            return Poll::Ready(Err(Self::closed_error()));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.saw_io(true);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => {
                // Registered before the flag is read again, so a kill in between still wakes us.
                this.conn.0.read_waker.register(cx.waker());
                if this.conn.killed() {
                    return Poll::Ready(Err(Self::closed_error()));
                }
                Poll::Pending
            }
            other => other,
        }
    }
}

impl GuardedStream {
    /// Whether to hold a write back for now. On an HTTP/2 connection (gRPC) many requests share one
    /// socket, and the answers of several often reach the I/O thread together (the instance thread
    /// finishes them back to back). Each request's task hands its response to the connection's task,
    /// which the runtime runs right after it, so without this each response left in a write of its
    /// own. While replies are on their way to their requests (`replies_on_the_way`), the write waits
    /// until the I/O thread has run the tasks ready before it (tokio's deferred wake, as in
    /// `yield_now`, which comes at the latest after 61 tasks) or until no reply is on its way, and then
    /// carries every response queued meanwhile. At concurrency 1 no reply is on its way when the
    /// response is written: nothing is held. HTTP/1 connections carry one request at a time: never held.
    fn hold_back(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.registry.limits.http2 {
            return false;
        }
        if let Some(held) = &self.hold {
            if held.fired.load(Ordering::Acquire) || crate::core::scheduler::replies_on_the_way() == 0 {
                self.hold = None;
                return false;
            }
            if held.task.will_wake(cx.waker()) {
                return true;
            }
        } else if crate::core::scheduler::replies_on_the_way() == 0 {
            return false;
        }
        let held = Arc::new(Held { fired: AtomicBool::new(false), task: cx.waker().clone() });
        let waker = std::task::Waker::from(held.clone());
        let mut deferred = std::pin::pin!(tokio::task::yield_now());
        if deferred.as_mut().poll(&mut Context::from_waker(&waker)).is_ready() {
            self.hold = None;
            return false;
        }
        self.hold = Some(held);
        true
    }

    fn after_write(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        match r {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    self.saw_io(false);
                }
                Poll::Ready(Ok(n))
            }
            Poll::Pending => {
                self.conn.0.write_waker.register(cx.waker());
                if self.conn.killed() {
                    return Poll::Ready(Err(Self::closed_error()));
                }
                Poll::Pending
            }
            other => other,
        }
    }
}

impl AsyncWrite for GuardedStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.conn.killed() {
            return Poll::Ready(Err(Self::closed_error()));
        }
        if this.hold_back(cx) {
            return Poll::Pending;
        }
        let r = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.after_write(cx, r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.conn.killed() {
            return Poll::Ready(Err(Self::closed_error()));
        }
        if this.hold_back(cx) {
            return Poll::Pending;
        }
        let r = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.after_write(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for GuardedStream {
    type ConnectInfo = Conn;

    fn connect_info(&self) -> Conn {
        self.conn.clone()
    }
}

impl axum::serve::Listener for GuardedListener {
    type Io = GuardedStream;
    type Addr = Conn;

    async fn accept(&mut self) -> (GuardedStream, Conn) {
        let s = self.accept_guarded().await;
        let conn = s.conn.clone();
        (s, conn)
    }

    fn local_addr(&self) -> io::Result<Conn> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "a guarded listener has no single address"))
    }
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, GuardedListener>> for Conn {
    fn connect_info(stream: axum::serve::IncomingStream<'_, GuardedListener>) -> Self {
        stream.remote_addr().clone()
    }
}

/// The tower layer that counts a connection's requests in flight; see [`Track`].
#[derive(Clone, Copy, Debug, Default)]
pub struct TrackLayer;

impl<S> tower::Layer<S> for TrackLayer {
    type Service = Track<S>;

    fn layer(&self, inner: S) -> Track<S> {
        Track { inner }
    }
}

/// Marks a request in flight on its connection from the call until its response body ends (or is
/// dropped), so the reaper and the cap leave that connection alone.
#[derive(Clone, Debug)]
pub struct Track<S> {
    inner: S,
}

fn conn_of<B>(req: &http::Request<B>) -> Option<&Conn> {
    let ext = req.extensions();
    ext.get::<Conn>()
        .or_else(|| ext.get::<axum::extract::ConnectInfo<Conn>>().map(|c| &c.0))
        .or_else(|| ext.get::<tonic::transport::server::TlsConnectInfo<Conn>>().map(|c| c.get_ref()))
}

impl<S, ReqB, ResB> tower::Service<http::Request<ReqB>> for Track<S>
where
    S: tower::Service<http::Request<ReqB>, Response = http::Response<ResB>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Tracked<ResB>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<ReqB>) -> Self::Future {
        let active = conn_of(&req).map(Active::start);
        let fut = self.inner.call(req);
        Box::pin(async move {
            let resp = fut.await?;
            Ok(resp.map(|body| Tracked { body, active }))
        })
    }
}

/// A response body that ends its request's [`Active`] mark when it ends.
#[derive(Debug)]
pub struct Tracked<B> {
    body: B,
    active: Option<Active>,
}

impl<B: http_body::Body + Unpin> http_body::Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.body).poll_frame(cx);
        if matches!(r, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            this.active = None;
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A request body that fails when no data arrives for `timeout`: a client trickling its body would
/// otherwise hold a request in flight, and so its connection, for ever.
pub struct TimedBody<B> {
    inner: B,
    timeout: Duration,
    /// Armed on the first wait, and again after each frame.
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<B> TimedBody<B> {
    pub fn new(inner: B, timeout: Duration) -> Self {
        TimedBody { inner, timeout, sleep: None }
    }
}

/// The error of a [`TimedBody`] whose client paused too long.
#[derive(Debug)]
pub struct BodyStalled(pub Duration);

impl std::fmt::Display for BodyStalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no request body data arrived for {} s", self.0.as_secs_f64())
    }
}

impl std::error::Error for BodyStalled {}

impl<B> http_body::Body for TimedBody<B>
where
    B: http_body::Body + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = B::Data;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, Self::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(r) => {
                this.sleep = None;
                Poll::Ready(r.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                let timeout = this.timeout;
                let sleep = this.sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                match sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyStalled(timeout))))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Raises the soft open-file limit to the hard one (each connection is a descriptor) and returns the
/// soft limit in force, logging a change.
pub fn raise_open_file_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    let soft = lim.current?;
    match lim.maximum {
        Some(hard) if hard > soft => {
            match setrlimit(Resource::Nofile, Rlimit { current: Some(hard), maximum: Some(hard) }) {
                Ok(()) => {
                    tracing::info!("Raised the open-file limit from {soft} to {hard}.");
                    Some(hard)
                }
                Err(e) => {
                    tracing::warn!("Could not raise the open-file limit from {soft} to {hard}: {e}");
                    Some(soft)
                }
            }
        }
        Some(_) => Some(soft),
        // No hard limit: raise the soft one to a generous bound rather than to "unlimited".
        None => {
            let want = soft.max(1 << 20);
            if want > soft && setrlimit(Resource::Nofile, Rlimit { current: Some(want), maximum: None }).is_ok() {
                tracing::info!("Raised the open-file limit from {soft} to {want}.");
                return Some(want);
            }
            Some(soft)
        }
    }
}

/// Descriptors kept back from the connection caps, for model files, Python stubs, logs and the like.
pub const RESERVED_FDS: u64 = 256;
/// The metrics listener's cap: Prometheus scrapes come from a few collectors.
pub const METRICS_MAX_CONNECTIONS: usize = 64;

/// Default caps for the HTTP and gRPC listeners under an open-file limit (`None`: unlimited), with
/// `listeners` of them enabled: what is left after the reserve and the metrics cap, shared evenly.
pub fn auto_max_connections(open_files: Option<u64>, listeners: usize) -> usize {
    match open_files {
        None => 1 << 16,
        Some(n) => {
            let budget = n.saturating_sub(RESERVED_FDS + METRICS_MAX_CONNECTIONS as u64);
            ((budget / listeners.max(1) as u64) as usize).max(16)
        }
    }
}

#[cfg(test)]
mod tests;
