//! The stubs' fork server (`stub/tritonrs_zygote.py`): one Python process per server that has imported
//! numpy, `triton_python_backend_utils` and the stub once, and forks a stub on request. The stubs share
//! those pages copy-on-write, so an instance costs its model's memory rather than a whole interpreter.
//!
//! It is only for the server's own interpreter (a model's `EXECUTION_ENV_PATH` starts its stubs as
//! fresh processes), starts on first use, is started again if it died, and is never needed: when it
//! cannot start or answer, stubs start as fresh processes (`python3 tritonrs_stub.py`) as before.
//! `--backend-config=python,zygote=false` turns it off.

use crate::error::{Error, Result};
use rustix::net::{
    recv, sendmsg, socketpair, sockopt, AddressFamily, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
    SocketFlags, SocketType,
};
use rustix::process::Pid;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running fork server.
#[derive(Debug)]
pub struct Zygote {
    /// Our end of its SOCK_SEQPACKET control socket.
    ctl: OwnedFd,
    child: Child,
}

impl Zygote {
    /// Starts the fork server with `python` and waits (at most `timeout`) until it has imported
    /// everything and says it is ready.
    pub fn start(python: &Path, files: &Path, timeout: Duration) -> Result<Zygote> {
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            Error::unavailable(format!(
                "cannot start the Python stubs' fork server with '{}': {what}: {e}",
                python.display()
            ))
        };
        let (ours, theirs) = socketpair(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)
            .map_err(|e| fail("socketpair", &e))?;
        let child = Command::new(python)
            .arg(files.join("tritonrs_zygote.py"))
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONUNBUFFERED", "1")
            // Its own process group, as every stub has: a Ctrl-C is the server's to handle.
            .process_group(0)
            .spawn()
            .map_err(|e| fail("spawn", &e))?;
        let mut z = Zygote { ctl: ours, child };
        sockopt::set_socket_timeout(&z.ctl, sockopt::Timeout::Recv, Some(timeout)).map_err(|e| fail("timeout", &e))?;
        let ready = z.answer().map_err(|e| fail("no ready message", &e.message))?;
        if ready.get("ready") != Some(&serde_json::Value::Bool(true)) {
            z.stop();
            return Err(fail("unexpected first message", &ready));
        }
        Ok(z)
    }

    /// Whether the process still runs.
    pub fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Forks a stub that runs as `python3 tritonrs_stub.py ... <sys_path>` would, on `stub_socket` (its
    /// fd 0) with `stderr` (its fd 2) and `env` added, and shows `argv` (that fresh stub's command
    /// line) as its own. Returns the stub's process id.
    /// The caller closes its own copies of the descriptors afterwards.
    pub fn fork(
        &self,
        argv: &[String],
        sys_path: &[PathBuf],
        env: &[(String, String)],
        stub_socket: BorrowedFd<'_>,
        stderr: BorrowedFd<'_>,
    ) -> Result<Pid> {
        let request = serde_json::json!({
            "argv": argv,
            "path": sys_path.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
            "env": env.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
        });
        let bytes = serde_json::to_vec(&request).map_err(|e| Error::internal(e.to_string()))?;
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        let fds = [stub_socket, stderr];
        if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err(Error::internal("no room for the stub's descriptors in the control message"));
        }
        sendmsg(&self.ctl, &[std::io::IoSlice::new(&bytes)], &mut control, SendFlags::NOSIGNAL)
            .map_err(|e| Error::unavailable(format!("the Python stubs' fork server is gone: {e}")))?;
        let reply = self.answer()?;
        if let Some(pid) = reply.get("pid").and_then(|p| p.as_i64()).and_then(|p| i32::try_from(p).ok()) {
            return Pid::from_raw(pid).ok_or_else(|| Error::internal(format!("the fork server answered pid {pid}")));
        }
        Err(Error::unavailable(format!(
            "the Python stubs' fork server could not fork: {}",
            reply.get("error").and_then(|e| e.as_str()).unwrap_or("no reason given")
        )))
    }

    /// The next message from the zygote.
    fn answer(&self) -> Result<serde_json::Value> {
        let mut buf = vec![0u8; 4096];
        let (n, _) = recv(&self.ctl, &mut buf, RecvFlags::empty())
            .map_err(|e| Error::unavailable(format!("the Python stubs' fork server did not answer: {e}")))?;
        if n == 0 {
            return Err(Error::unavailable("the Python stubs' fork server exited"));
        }
        serde_json::from_slice(&buf[..n.min(buf.len())])
            .map_err(|e| Error::internal(format!("the Python stubs' fork server answered something else: {e}")))
    }

    /// Closes its socket (it exits when it sees that) and reaps it, killing it if it lingers.
    pub fn stop(&mut self) {
        let _ = rustix::net::shutdown(&self.ctl, rustix::net::Shutdown::Both);
        for _ in 0..100 {
            if !self.is_alive() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Zygote {
    fn drop(&mut self) {
        self.stop();
    }
}
