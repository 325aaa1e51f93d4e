//! One Python stub process: start it, hand it the model, exchange frames with it, notice when it
//! dies or stops answering, and stop it.
//!
//! A stub talks to the server over two sockets, so that neither side hands a request from one thread
//! to another on the hot path. The *main* socket (the stub's standard input) carries only the
//! instance's request/answer pairs (init, execute, finalize), read and written by the instance thread
//! here and by the stub's main thread there. The *side* socket (passed over the main one with
//! SCM_RIGHTS) carries everything else (BLS, calls, logs, decoupled responses, pings), read by a reader
//! thread on each side: decoupled responses go straight to their requests, BLS requests and calls to
//! the server ([`super::calls`]). The stub's standard error is read line by line into the server log,
//! and the last lines are kept to explain a stub that dies before it is ready.
//!
//! As Triton's stubs do, each stub names its model and instance where `ps` and `top` look: its command
//! line is `<python> <files>/tritonrs_stub.py --model M --instance I -- <version folder> <model
//! folder>`, and its process name (`/proc/<pid>/comm`) is [`process_name`]. A stub forked from the
//! fork server sets that same command line over the fork server's (see `stub/tritonrs_zygote.py`).

use super::calls::Calls;
use super::conn::Conn;
use super::ipc::{self, FromStub};
use super::settings::{ExecEnv, Settings};
use super::stub_memory::{Ring, SharedRegion};
use crate::error::{Error, Result};
use crate::model_api::types::{Parameters, Tensor};
use crate::model_api::DecoupledResponse;
use crossbeam_channel::Sender;
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long an interpreter may take to start (import numpy and the stub) when the stub timeout is
/// shorter: a loaded machine must not fail loads that a short hang timeout was never meant for.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Lines of a stub's standard error kept for error messages.
const STDERR_TAIL: usize = 20;

/// One response of a non-decoupled call: its outputs and parameters, or its error.
pub type StubResponse = Result<(Vec<Tensor>, Parameters)>;

/// What an `execute` call answered: one response per request (none for a decoupled model), and the
/// requests (by index) the model rescheduled.
#[derive(Debug, Default)]
pub struct Executed {
    pub responses: Vec<StubResponse>,
    pub rescheduled: Vec<usize>,
}

/// What the instance thread waits for.
#[derive(Debug)]
pub enum Control {
    /// The interpreter is up (its reader thread answers pings from now on).
    Hello,
    Ready,
    InitError(String),
    Autocomplete(Value),
    /// `execute` returned: per request its outputs and parameters, or an error for the whole call.
    Done {
        id: u64,
        result: Result<Executed>,
    },
    Finalized(Option<String>),
}

/// How to start a stub.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The interpreter and the environment it runs in.
    pub settings: Settings,
    /// Interpreter override from the model's `EXECUTION_ENV_PATH`, with the variables its environment needs.
    pub env: Option<ExecEnv>,
    /// The model's name.
    pub model: String,
    /// `model.py` (or `default_model_filename`).
    pub model_path: PathBuf,
    /// Added to the stub's `sys.path`: the version folder, then the model folder.
    pub sys_path: Vec<PathBuf>,
    /// The init message (minus the shared-memory part, which is filled in per process).
    pub init: Value,
    /// "model 'x' instance 'y'", for messages.
    pub label: String,
    /// The instance's name, for Triton's "Stub process '<instance>' is not healthy." messages.
    pub instance: String,
    /// Whether to create shared memory (not for auto-complete).
    pub with_shm: bool,
}

impl Launch {
    /// The interpreter the stub runs with.
    fn executable(&self) -> PathBuf {
        self.env.as_ref().map(|e| e.python.clone()).unwrap_or_else(|| self.settings.executable.clone())
    }

    /// The stub's arguments after the interpreter: the script, the model and instance it serves (for
    /// `ps`; the stub skips them), and the folders added to its `sys.path`.
    fn arguments(&self, files: &std::path::Path) -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = vec![
            files.join("tritonrs_stub.py").into(),
            "--model".into(),
            self.model.clone().into(),
            "--instance".into(),
            self.instance.clone().into(),
            "--".into(),
        ];
        args.extend(self.sys_path.iter().map(|p| p.clone().into_os_string()));
        args
    }
}

/// The stub's process name (`/proc/<pid>/comm`, what `top` and `ps -o comm` show): its instance's name,
/// which by default starts with the model's (`add_sub_0_0`), else `<model>:<instance>`. The kernel
/// keeps 15 bytes, so a longer name keeps its start and its end (where the instance's number is),
/// joined by `~`.
pub fn process_name(model: &str, instance: &str) -> String {
    const MAX: usize = 15;
    let name = if instance.starts_with(model) { instance.to_string() } else { format!("{model}:{instance}") };
    if name.len() <= MAX {
        return name;
    }
    let mut head = 6;
    while !name.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = name.len() - (MAX - 1 - head);
    while !name.is_char_boundary(tail) {
        tail += 1;
    }
    format!("{}~{}", &name[..head], &name[tail..])
}

/// A stub's process: our child, or a child of the fork server (which the kernel reaps; we know its
/// pid and watch its socket).
enum Process {
    Spawned(Child),
    Forked(rustix::process::Pid),
}

impl Process {
    /// `Some(how it ended)` once the process is gone.
    fn exited(&mut self) -> Option<String> {
        match self {
            Process::Spawned(c) => match c.try_wait() {
                Ok(Some(s)) => Some(s.to_string()),
                Ok(None) => None,
                Err(e) => Some(e.to_string()),
            },
            // The fork server ignores SIGCHLD, so a dead stub leaves no zombie and its pid is free.
            Process::Forked(pid) => rustix::process::test_kill_process(*pid).err().map(|_| "forked stub exited".into()),
        }
    }

    fn kill(&mut self) {
        match self {
            Process::Spawned(c) => {
                let _ = c.kill();
                let _ = c.wait();
            }
            Process::Forked(pid) => {
                let _ = rustix::process::kill_process(*pid, rustix::process::Signal::KILL);
            }
        }
    }
}

/// A running stub process.
pub struct Stub {
    child: Process,
    pub conn: Arc<Conn>,
    /// Where BLS requests and other calls go; `None` where the server offers none (auto-complete, tests).
    calls: Option<Arc<Calls>>,
    /// The main socket: requests out, their answers in (with a read timeout, for the liveness checks).
    main: UnixStream,
    /// Partial frames read from `main`.
    frames: ipc::FrameReader,
    /// The last lines of the stub's standard error.
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    /// How long the stub may stay silent (`stub-timeout-seconds`).
    pub timeout: Duration,
    /// Set once the stub has said hello (its interpreter is up).
    started: bool,
}

impl Stub {
    /// Starts a stub and sends it the init message; does not wait for it to be ready.
    /// `on_exit` gets `generation` when the process goes away (the instance's supervisor restarts it).
    pub fn spawn(launch: &Launch, calls: Option<Arc<Calls>>, on_exit: Option<(Sender<u64>, u64)>) -> Result<Stub> {
        let settings = &launch.settings;
        let files = settings.stub_files()?;
        let socket_err =
            |e: std::io::Error| Error::internal(format!("cannot create the sockets for {}: {e}", launch.label));
        let (main, theirs) = UnixStream::pair().map_err(socket_err)?;
        let (side, their_side) = UnixStream::pair().map_err(socket_err)?;
        let shm =
            if launch.with_shm { Some(SharedRegion::create(settings.shm_size, "tritonrs-python-")?) } else { None };
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let forked = match launch.env.is_none() && settings.zygote {
            true => Self::fork(launch, &files, &theirs, &stderr_tail),
            false => None,
        };
        let mut child = match forked {
            Some(pid) => {
                drop(theirs);
                Process::Forked(pid)
            }
            None => Process::Spawned(Self::start_process(launch, &files, theirs, &stderr_tail)?),
        };
        // The stub's first read on its standard input is this byte, with the side socket attached.
        let passed = send_socket(&main, their_side.as_fd()).map_err(socket_err);
        drop(their_side);
        if let Err(e) = passed {
            child.kill();
            return Err(e);
        }
        let reader_sock = side.try_clone().map_err(socket_err)?;
        let main_writer = main.try_clone().map_err(socket_err)?;
        main.set_read_timeout(Some(tick(settings.timeout))).map_err(socket_err)?;
        let conn = Arc::new(Conn::new(side, main_writer, shm, launch.label.clone(), launch.instance.clone()));
        let reader_conn = conn.clone();
        let reader_calls = calls.clone();
        std::thread::Builder::new()
            .name("py-reader".into())
            .spawn(move || {
                read_loop(reader_conn, reader_calls.as_deref(), reader_sock);
                if let Some((deaths, generation)) = on_exit {
                    let _ = deaths.send(generation);
                }
            })
            .map_err(|e| Error::internal(format!("cannot start the reader thread for {}: {e}", launch.label)))?;
        let mut init = launch.init.clone();
        if let Some(shm) = &conn.shm {
            init["shm"] = json!({
                "path": shm.path().map(|p| p.display().to_string()),
                "size": shm.size(),
                "rings": [shm.ring(Ring::Main), shm.ring(Ring::Side)],
            });
        }
        init["type"] = json!("init");
        init["model_path"] = json!(launch.model_path.display().to_string());
        init["process_name"] = json!(process_name(&launch.model, &launch.instance));
        let mut stub = Stub {
            child,
            conn,
            calls,
            main,
            frames: ipc::FrameReader::default(),
            stderr_tail,
            timeout: settings.timeout,
            started: false,
        };
        if let Err(e) = stub.send_main(&init, &[]) {
            stub.kill();
            return Err(e);
        }
        Ok(stub)
    }

    /// Starts the stub as a fresh interpreter (`python3 tritonrs_stub.py PATH...`).
    fn start_process(
        launch: &Launch,
        files: &std::path::Path,
        socket: UnixStream,
        stderr_tail: &Arc<Mutex<VecDeque<String>>>,
    ) -> Result<Child> {
        let exe = launch.executable();
        let mut cmd = Command::new(&exe);
        cmd.args(launch.arguments(files))
            .stdin(Stdio::from(OwnedFd::from(socket)))
            .stdout(Stdio::inherit())
            .stderr(Stdio::piped())
            // Model folders stay as they are (no __pycache__), and prints reach the log at once.
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONUNBUFFERED", "1")
            // Its own process group: a Ctrl-C in the terminal reaches the server, which then stops the
            // stubs in order (finalize first), instead of killing them mid-request.
            .process_group(0);
        if let Some(env) = &launch.env {
            for (k, v) in &env.vars {
                cmd.env(k, v);
            }
        }
        let mut child = cmd.spawn().map_err(|e| {
            Error::unavailable(format!(
                "cannot start the Python stub for {} with '{}': {e} (set --backend-config=python,python-executable=PATH)",
                launch.label,
                exe.display()
            ))
        })?;
        if let Some(err) = child.stderr.take() {
            follow_stderr(err, launch.label.clone(), stderr_tail.clone());
        }
        Ok(child)
    }

    /// Forks the stub from the fork server; `None` (after a warning) means start a fresh process.
    fn fork(
        launch: &Launch,
        files: &std::path::Path,
        socket: &UnixStream,
        stderr_tail: &Arc<Mutex<VecDeque<String>>>,
    ) -> Option<rustix::process::Pid> {
        let (reader, writer) = match std::io::pipe() {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(
                    "{}: no pipe for the stub's error output ({e}); starting a fresh interpreter",
                    launch.label
                );
                return None;
            }
        };
        // The command line a fresh stub would have, which the forked one shows instead of the fork server's.
        let argv: Vec<String> = std::iter::once(launch.executable().into_os_string())
            .chain(launch.arguments(files))
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        match launch.settings.fork_stub(&argv, &launch.sys_path, &[], socket.as_fd(), writer.as_fd()) {
            Ok(pid) => {
                drop(writer);
                follow_stderr(reader, launch.label.clone(), stderr_tail.clone());
                Some(pid)
            }
            Err(e) => {
                tracing::warn!("{}: {}; starting a fresh interpreter instead", launch.label, e.message);
                None
            }
        }
    }

    /// Sends a request on the main socket.
    pub fn send_main(&mut self, msg: &impl serde::Serialize, payload: &[&[u8]]) -> Result<()> {
        let json =
            serde_json::to_vec(msg).map_err(|e| Error::internal(format!("cannot encode a stub message: {e}")))?;
        ipc::write_frame(&mut self.main, &json, payload)
            .map_err(|e| Error::unavailable(format!("cannot send to the Python stub of {}: {e}", self.conn.label)))
    }

    /// The next answer on the main socket: `Ok(None)` when none came within the read timeout, `Err` when
    /// the socket closed (the stub died).
    fn next_answer(&mut self) -> std::io::Result<Option<Control>> {
        loop {
            let Some((json, payload)) = self.frames.read(&mut self.main)? else { return Ok(None) };
            *self.conn.last_seen.lock() = Instant::now();
            let (msg, notes) = match ipc::parse(&json) {
                Ok(m) => m,
                Err(e) => {
                    tracing::error!("{}: {}", self.conn.label, e.message);
                    continue;
                }
            };
            if let Some(shm) = &self.conn.shm {
                shm.release(notes.rel.iter().copied());
            }
            let answer = handle(&self.conn, self.calls.as_deref(), msg, &payload);
            // Only now, with every tensor copied out, may the stub reuse its ring.
            if let (Some(shm), Some(ring)) = (&self.conn.shm, notes.ring) {
                shm.consumed(Ring::Main, ring);
            }
            if let Some(a) = answer {
                return Ok(Some(a));
            }
        }
    }

    /// Waits for the stub's first answer (ready, auto-complete result, or why it failed). Starting the
    /// interpreter may take up to [`START_TIMEOUT`] (or the stub timeout, if longer); from the stub's
    /// first message on, `initialize` may take as long as it needs while the stub answers pings.
    pub fn handshake(&mut self) -> Result<Control> {
        let answer = self.wait("while starting", |c| match c {
            Control::Done { .. } | Control::Finalized(_) | Control::Hello => None,
            other => Some(other),
        });
        // The stub has mapped the file (or failed): it need not stay in /dev/shm.
        if let Some(shm) = &self.conn.shm {
            shm.unlink();
        }
        if answer.is_err() {
            self.kill();
        }
        answer
    }

    /// Waits for the answer to execute call `id`.
    pub fn wait_done(&mut self, id: u64) -> Result<Executed> {
        self.wait("while executing the request", |c| match c {
            Control::Done { id: got, result } if got == id => Some(result),
            _ => None,
        })?
    }

    /// Waits until `want` accepts an answer, pinging a silent stub and killing one that stays silent
    /// for the whole timeout: the reader thread of a live stub answers pings even while the model runs.
    fn wait<T>(&mut self, when: &str, mut want: impl FnMut(Control) -> Option<T>) -> Result<T> {
        let tick = tick(self.timeout);
        loop {
            match self.next_answer() {
                Ok(Some(Control::Hello)) => self.started = true,
                Ok(Some(c)) => {
                    if let Some(t) = want(c) {
                        return Ok(t);
                    }
                }
                Err(e) => {
                    tracing::debug!("The main socket of {} closed: {e}", self.conn.label);
                    return Err(self.death(when));
                }
                Ok(None) => {
                    let silent = self.conn.last_seen.lock().elapsed();
                    let limit = if self.started { self.timeout } else { self.timeout.max(START_TIMEOUT) };
                    if silent >= limit {
                        self.kill();
                        let what = if self.started { "did not answer" } else { "did not start" };
                        return Err(Error::internal(format!(
                            "Stub process '{}' is not healthy. It {what} within {} s {when} (stub-timeout-seconds); \
                             it was killed and will be restarted.",
                            self.conn.instance,
                            limit.as_secs()
                        )));
                    }
                    if self.started && silent >= tick {
                        let _ = self.conn.send(&json!({"type": "ping"}), &[]);
                    }
                }
            }
        }
    }

    /// Asks the stub to run `finalize` and waits for it (at most the timeout), then stops the process.
    pub fn finalize(mut self) -> Option<String> {
        let mut error = None;
        if self.conn.is_alive() && self.send_main(&json!({"type": "finalize"}), &[]).is_ok() {
            let deadline = Instant::now() + self.timeout;
            while Instant::now() < deadline {
                match self.next_answer() {
                    Ok(Some(Control::Finalized(e))) => {
                        error = e;
                        break;
                    }
                    Ok(_) => continue,
                    Err(_) => break,
                }
            }
        }
        self.stop();
        error
    }

    /// Closes the socket (the stub exits when it sees that) and reaps the process, killing it if it
    /// does not exit promptly.
    fn stop(&mut self) {
        let _ = self.main.shutdown(std::net::Shutdown::Both);
        let _ = self.conn.writer.lock().shutdown(std::net::Shutdown::Both);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match self.child.exited() {
                Some(_) => return,
                None if Instant::now() >= deadline => {
                    self.kill();
                    return;
                }
                None => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }

    /// Kills the process at once and reaps it.
    pub fn kill(&mut self) {
        self.child.kill();
        self.conn.alive.store(false, Ordering::SeqCst);
        let _ = self.main.shutdown(std::net::Shutdown::Both);
        let _ = self.conn.writer.lock().shutdown(std::net::Shutdown::Both);
    }

    /// The error for a stub whose socket closed: its exit status and last error lines.
    fn death(&mut self, when: &str) -> Error {
        // The process closes its socket as it exits; give it a moment to be reaped.
        let deadline = Instant::now() + Duration::from_millis(500);
        let status = loop {
            match self.child.exited() {
                Some(s) => break Some(s),
                None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
                None => break None,
            }
        };
        if status.is_none() {
            self.kill();
        }
        let status = status.map(|s| format!(" ({s})")).unwrap_or_default();
        let tail = self.stderr_tail.lock().iter().cloned().collect::<Vec<_>>().join("\n");
        let tail = if tail.is_empty() { String::new() } else { format!(" Its last error output:\n{tail}") };
        Error::internal(format!(
            "Stub process '{}' is not healthy. It exited unexpectedly{status} {when}; it will be restarted.{tail}",
            self.conn.instance
        ))
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        if self.child.exited().is_none() {
            self.kill();
        }
    }
}

/// Logs a stub's error output line by line and keeps its last lines for the death message.
fn follow_stderr(err: impl std::io::Read + Send + 'static, label: String, tail: Arc<Mutex<VecDeque<String>>>) {
    let _ = std::thread::Builder::new().name("py-stderr".into()).spawn(move || {
        for line in BufReader::new(err).lines().map_while(|l| l.ok()) {
            tracing::warn!("Python stub of {label}: {line}");
            let mut t = tail.lock();
            if t.len() == STDERR_TAIL {
                t.pop_front();
            }
            t.push_back(line);
        }
    });
}

/// How often the instance thread looks at a silent stub.
fn tick(timeout: Duration) -> Duration {
    (timeout / 4).clamp(Duration::from_millis(20), Duration::from_secs(1))
}

/// Passes a socket to the stub over `main` (SCM_RIGHTS, with one byte so the stub has something to read).
fn send_socket(main: &UnixStream, socket: std::os::fd::BorrowedFd<'_>) -> std::io::Result<()> {
    use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [socket];
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(std::io::Error::other("no room for the socket in the control message"));
    }
    sendmsg(main, &[std::io::IoSlice::new(b"S")], &mut control, SendFlags::empty())?;
    Ok(())
}

/// The reader thread: handles every frame the stub sends on the side socket until it closes, then fails
/// whatever still waits on the stub.
fn read_loop(conn: Arc<Conn>, calls: Option<&Calls>, mut sock: UnixStream) {
    loop {
        let frame = match ipc::read_frame(&mut sock) {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                tracing::debug!("The side socket of {} failed: {e}", conn.label);
                break;
            }
        };
        *conn.last_seen.lock() = Instant::now();
        let (json, payload) = frame;
        match ipc::parse(&json) {
            Ok((msg, notes)) => {
                if let Some(shm) = &conn.shm {
                    shm.release(notes.rel.iter().copied());
                }
                if let Some(answer) = handle(&conn, calls, msg, &payload) {
                    tracing::error!("{}: the stub sent {answer:?} on its side socket; ignored", conn.label);
                }
                // Only now, with every tensor copied out, may the stub reuse its ring.
                if let (Some(shm), Some(ring)) = (&conn.shm, notes.ring) {
                    shm.consumed(Ring::Side, ring);
                }
            }
            Err(e) => tracing::error!("{}: {}", conn.label, e.message),
        }
    }
    conn.alive.store(false, Ordering::SeqCst);
    if let Some(calls) = calls {
        calls.stub_gone(&conn);
    }
    let gone = conn.gone();
    conn.fail_streams(None, &gone);
    for (_, tx) in conn.replies.lock().drain() {
        let _ = tx.send(Err(gone.clone()));
    }
}

/// Handles one message from the stub: an answer for the instance thread is returned, everything else is
/// done here (decoupled responses to their requests, BLS and calls to the server, logs to the log).
fn handle(conn: &Arc<Conn>, calls: Option<&Calls>, msg: FromStub, payload: &[u8]) -> Option<Control> {
    match msg {
        FromStub::Hello {} => return Some(Control::Hello),
        FromStub::Ready { probe } => {
            conn.has_probe.store(probe, Ordering::SeqCst);
            return Some(Control::Ready);
        }
        FromStub::InitError { error } => return Some(Control::InitError(error)),
        FromStub::Autocomplete { config } => return Some(Control::Autocomplete(config)),
        FromStub::Done { id, err, resps, resched } => {
            let result = match err {
                Some(e) => Err(Error::internal(e)),
                None => Ok(Executed {
                    responses: resps.iter().map(|r| conn.read_response(r, payload)).collect(),
                    rescheduled: resched,
                }),
            };
            return Some(Control::Done { id, result });
        }
        FromStub::Finalized { error } => return Some(Control::Finalized(error)),
        FromStub::Response { key, flags, resp } => decoupled_response(conn, key, flags, resp, payload),
        FromStub::Reply { id, value, error } => {
            if let Some(tx) = conn.replies.lock().remove(&id) {
                let _ = tx.send(match error {
                    Some(e) => Err(Error::internal(e)),
                    None => Ok(value),
                });
            }
        }
        FromStub::Log { level, msg, file, line, call } => {
            // In the span of the request(s) whose `execute` wrote it, so the line names them.
            let span = call.and_then(|c| conn.span_of(c));
            let _entered = span.as_ref().map(|s| s.enter());
            match level {
                0 => tracing::info!("{file}:{line}] {msg}"),
                1 => tracing::warn!("{file}:{line}] {msg}"),
                2 => tracing::error!("{file}:{line}] {msg}"),
                _ => tracing::debug!("{file}:{line}] {msg}"),
            }
        }
        FromStub::Pong {} => {}
        FromStub::Bls(req) => match calls {
            Some(calls) => calls.bls(conn, *req, payload),
            None => {
                let e = Error::unavailable("BLS is not available here");
                super::calls::answer_bls_error(conn, req.id, req.main, &e);
            }
        },
        FromStub::Call { id, op, args } => match calls {
            Some(calls) => calls.call(conn, id, &op, args),
            None => super::calls::reply(conn, id, Err(Error::unavailable(format!("'{op}' is not available here")))),
        },
    };
    None
}

/// A decoupled model's response (or final flag alone) for the request `key`, passed to its stream.
fn decoupled_response(conn: &Conn, key: u64, flags: u32, resp: Option<ipc::WireResponse>, payload: &[u8]) {
    let is_final = flags & 1 == 1;
    let sender = {
        let mut s = conn.streams.lock();
        if is_final {
            s.remove(&key)
        } else {
            s.get(&key).cloned()
        }
    };
    if is_final {
        conn.unwatch([key]);
    }
    let Some(sender) = sender else {
        tracing::warn!("{}: a response for a request that is already complete was dropped", conn.label);
        return;
    };
    let item = match resp {
        None => DecoupledResponse { is_final, empty: true, ..Default::default() },
        Some(r) => match conn.read_response(&r, payload) {
            Ok((outputs, parameters)) => DecoupledResponse { outputs, parameters, is_final, ..Default::default() },
            // An error response; the request goes on until the model sends the final flag.
            Err(e) => DecoupledResponse { is_final, error: Some(e), ..Default::default() },
        },
    };
    sender.send(Ok(item));
}

#[cfg(test)]
mod tests;
