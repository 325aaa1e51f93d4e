//! The systemd service protocol (`Type=notify`), through the sd-notify crate: READY=1 once the
//! listeners are bound and the start-up loads are over, STATUS= lines while loading and once serving,
//! EXTEND_TIMEOUT_USEC while loads run, RELOADING=1 around a SIGHUP reload, STOPPING=1 at shutdown, and
//! WATCHDOG=1 at half of `WatchdogSec`, sent only while no model instance thread is stalled (a check
//! the caller passes in: `core::heartbeat`). Outside systemd (no NOTIFY_SOCKET) every call does nothing.

use sd_notify::NotifyState;
use std::time::Duration;

/// Whether a service manager listens.
pub fn enabled() -> bool {
    std::env::var_os("NOTIFY_SOCKET").is_some_and(|s| !s.is_empty())
}

fn send(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::debug!("Cannot notify systemd: {e}");
    }
}

pub fn status(text: &str) {
    send(&[NotifyState::Status(text)]);
}

/// Start-up is over: the server answers and `/v2/health/ready` says whether models are.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// Asks for more time to start (or stop): the next message must come within `by`.
pub fn extend_timeout(by: Duration, status: &str) {
    let usec = u32::try_from(by.as_micros()).unwrap_or(u32::MAX);
    send(&[NotifyState::ExtendTimeoutUsec(usec), NotifyState::Status(status)]);
}

/// A reload begins; [`ready`] ends it. systemd 253+ wants the monotonic time with RELOADING=1.
pub fn reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[NotifyState::Reloading, now, NotifyState::Status("reloading")]),
        Err(_) => send(&[NotifyState::Reloading, NotifyState::Status("reloading")]),
    }
}

pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
}

/// The watchdog interval systemd asks for (`WatchdogSec`), if any.
pub fn watchdog_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled().filter(|d| !d.is_zero())
}

/// Sends WATCHDOG=1 every half `interval` while `stalled(half)` finds no thread that has gone without
/// progress for longer than that half (it returns the worst one's name and how long it has been busy);
/// logs when it holds back and when it resumes. Runs until the task is dropped. The check is passed in
/// (the server's `core::heartbeat::stalled`), so this module knows nothing of the core.
pub async fn watchdog(interval: Duration, stalled: impl Fn(Duration) -> Option<(String, Duration)>) {
    let half = interval / 2;
    let mut tick = tokio::time::interval(half);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut holding = false;
    loop {
        tick.tick().await;
        match stalled(half) {
            None => {
                if holding {
                    tracing::info!("Every model instance makes progress again; the systemd watchdog is fed again.");
                    holding = false;
                }
                send(&[NotifyState::Watchdog]);
            }
            Some((thread, busy)) => {
                if !holding {
                    tracing::error!(
                        "Thread '{thread}' has run one job for {:.1} s without finishing; the systemd watchdog is no \
                         longer fed, so the service is restarted unless it recovers within WatchdogSec ({} s).",
                        busy.as_secs_f64(),
                        interval.as_secs()
                    );
                    holding = true;
                }
            }
        }
    }
}
