//! MQTT front-end: subscribes to a broker, runs what cameras and apps publish through the core, and
//! publishes the results (see README "Images, MQTT and DeepStack"). One task owns the connection and
//! all state; inference runs on spawned tasks that report back, so the MQTT loop never waits on a
//! model.

pub mod dedup;
pub mod generate;
pub mod ledger;
pub mod link;
pub mod metrics;
pub mod request;
pub mod status;
pub mod topics;

use crate::config::mqtt::MqttArgs;
use crate::core::lifecycle::ModelState;
use crate::core::Server;
use crate::error::{Error, Result};
use bytes::Bytes;
use dedup::{Dedup, JobId, Seen};
use ledger::{Accepted, Action, DeliveryId, Ledger, Outgoing};
use link::{Link, LinkEvent, LinkOptions, Message, Protocol};
use metrics::{MqttMetrics, Outcome};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use topics::{RequestTopic, Topics};

/// Packet ids of our publishes; rumqttc numbers subscriptions below them.
const PKIDS: std::ops::RangeInclusive<u16> = 100..=1123;
/// Keys remembered for duplicate detection, and the bytes of results kept for them.
const DEDUP_ENTRIES: usize = 4096;
const DEDUP_BYTES: usize = 16 * 1024 * 1024;
/// Back-off between connection attempts.
const BACKOFF_MIN: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The bridge's settings, checked.
pub struct Settings {
    pub link: LinkOptions,
    pub topics: Topics,
    pub broker: String,
    pub qos: u8,
    pub max_inflight: usize,
    pub stats_interval: Option<Duration>,
    /// Home Assistant's discovery prefix, when discovery is on.
    pub homeassistant: Option<String>,
    pub request_timeout: Option<Duration>,
    pub max_payload: usize,
    pub journal: Option<PathBuf>,
}

/// Splits a broker URL into TLS or not, host and port.
pub fn parse_broker(url: &str) -> Result<(bool, String, u16)> {
    let (tls, rest) = match url.split_once("://") {
        Some(("mqtt" | "tcp", r)) => (false, r),
        Some(("mqtts" | "ssl" | "tls", r)) => (true, r),
        Some((s, _)) => {
            return Err(Error::invalid(format!(
                "--mqtt-broker '{url}': unknown scheme '{s}' (use mqtt:// or mqtts://)"
            )))
        }
        None => (false, url),
    };
    let rest = rest.trim_end_matches('/');
    let default_port = if tls { 8883 } else { 1883 };
    let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
        let (h, p) =
            v6.split_once(']').ok_or_else(|| Error::invalid(format!("--mqtt-broker '{url}': unclosed '['")))?;
        (h, p.strip_prefix(':'))
    } else {
        match rest.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        }
    };
    let port = match port {
        Some(p) => {
            p.parse::<u16>().map_err(|_| Error::invalid(format!("--mqtt-broker '{url}': '{p}' is not a port")))?
        }
        None => default_port,
    };
    if host.is_empty() || rest.contains('/') {
        return Err(Error::invalid(format!(
            "--mqtt-broker '{url}': expected mqtt://host[:port] or mqtts://host[:port]"
        )));
    }
    Ok((tls, host.to_string(), port))
}

impl Settings {
    /// The settings of `--mqtt-*`, or `None` without a broker.
    pub fn from_args(a: &MqttArgs) -> Result<Option<Settings>> {
        let Some(broker) = a.mqtt_broker.as_deref().filter(|b| !b.is_empty()) else { return Ok(None) };
        let (tls, host, port) = parse_broker(broker)?;
        let protocol = protocol_of(&a.mqtt_protocol)?;
        let device = match &a.mqtt_device_id {
            Some(d) => d.clone(),
            None => sysinfo::System::host_name().unwrap_or_else(|| "tritonrs".into()),
        };
        let topics = Topics::new(&a.mqtt_prefix, &device, &a.mqtt_group, true)?;
        let qos = match a.mqtt_qos {
            0 => 0,
            1 | 2 => 1,
            q => return Err(Error::invalid(format!("--mqtt-qos {q}: use 0, 1 or 2"))),
        };
        let credentials = credentials(a)?;
        let tls_config = tls_config(a, tls, broker)?;
        if a.mqtt_max_inflight == 0 {
            return Err(Error::invalid("--mqtt-max-inflight must be at least 1"));
        }
        let max_payload = a.mqtt_max_payload_bytes.max(1024);
        let link = LinkOptions {
            protocol,
            host,
            port,
            tls: tls_config,
            client_id: format!("tritonrs-{device}"),
            credentials,
            keep_alive: Duration::from_secs(a.mqtt_keep_alive_secs.max(5)),
            session_expiry: a.mqtt_session_expiry_secs,
            receive_max: a.mqtt_max_inflight,
            // Payloads a little over the limit still arrive, to be answered with an error; the
            // broker drops larger ones for us (MQTT 5 Maximum Packet Size).
            max_packet: max_payload.saturating_mul(2).saturating_add(64 * 1024),
            will: (topics.available(), Bytes::from_static(b"offline")),
            max_pkid: *PKIDS.end(),
        };
        let journal = a
            .mqtt_state_dir
            .clone()
            .or_else(|| std::env::var_os("STATE_DIRECTORY").map(|d| PathBuf::from(d).join("mqtt")))
            .map(|d| d.join(format!("answered-{device}.jsonl")));
        Ok(Some(Settings {
            link,
            broker: broker.to_string(),
            topics,
            qos,
            max_inflight: usize::from(a.mqtt_max_inflight),
            stats_interval: (a.mqtt_stats_interval_secs > 0).then(|| Duration::from_secs(a.mqtt_stats_interval_secs)),
            homeassistant: a.mqtt_homeassistant.then(|| a.mqtt_homeassistant_prefix.clone()),
            request_timeout: (a.mqtt_request_timeout_ms > 0).then(|| Duration::from_millis(a.mqtt_request_timeout_ms)),
            max_payload,
            journal,
        }))
    }
}

/// The MQTT version `--mqtt-protocol` names.
fn protocol_of(p: &str) -> Result<Protocol> {
    match p {
        "5" | "5.0" => Ok(Protocol::V5),
        "3.1.1" | "3" | "4" => Ok(Protocol::V311),
        p => Err(Error::invalid(format!("--mqtt-protocol '{p}': use 5 or 3.1.1"))),
    }
}

/// The user name and password to log in with, if any (the password from `--mqtt-password-file`
/// before `--mqtt-password`).
fn credentials(a: &MqttArgs) -> Result<Option<(String, String)>> {
    let password = match (&a.mqtt_password, &a.mqtt_password_file) {
        (_, Some(f)) => Some(
            std::fs::read_to_string(f)
                .map_err(|e| Error::invalid(format!("--mqtt-password-file '{}': {e}", f.display())))?
                .trim_end_matches(['\r', '\n'])
                .to_string(),
        ),
        (Some(p), None) => Some(p.clone()),
        (None, None) => None,
    };
    match (&a.mqtt_username, password) {
        (Some(u), p) => Ok(Some((u.clone(), p.unwrap_or_default()))),
        (None, Some(_)) => Err(Error::invalid("--mqtt-password needs --mqtt-username")),
        (None, None) => Ok(None),
    }
}

/// The TLS client configuration for an mqtts:// broker; CA and client certificates without TLS are
/// an error.
fn tls_config(a: &MqttArgs, tls: bool, broker: &str) -> Result<Option<Arc<rustls::ClientConfig>>> {
    let client = match (&a.mqtt_client_cert, &a.mqtt_client_key) {
        (Some(c), Some(k)) => Some((c.as_path(), k.as_path())),
        (None, None) => None,
        _ => return Err(Error::invalid("--mqtt-client-cert and --mqtt-client-key go together")),
    };
    if tls {
        Ok(Some(crate::frontend::tls::client_config(a.mqtt_ca_file.as_deref(), client)?))
    } else {
        if a.mqtt_ca_file.is_some() || client.is_some() {
            return Err(Error::invalid(format!(
                "--mqtt-ca-file and client certificates need an mqtts:// broker, not '{broker}'"
            )));
        }
        Ok(None)
    }
}

/// A running bridge.
pub struct Bridge {
    stop: Option<oneshot::Sender<Duration>>,
    task: tokio::task::JoinHandle<()>,
}

impl Bridge {
    /// Starts the bridge; it connects (and reconnects) on its own.
    pub fn start(settings: Settings, server: Server, metrics: Arc<MqttMetrics>) -> Bridge {
        let (stop_tx, stop_rx) = oneshot::channel();
        let task = tokio::spawn(Actor::new(settings, server, metrics).run(stop_rx));
        Bridge { stop: Some(stop_tx), task }
    }

    /// Finishes the requests in progress (up to `grace`), publishes `offline` and disconnects.
    pub async fn stop(mut self, grace: Duration) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(grace);
        }
        let _ = tokio::time::timeout(grace + Duration::from_secs(3), &mut self.task).await;
    }
}

/// A request being answered.
struct Job {
    /// Its duplicate-detection key.
    key: String,
    /// Deliveries waiting for this job's result.
    deliveries: Vec<DeliveryId>,
    /// Duplicates that arrived while it ran: each gets the result too, on its own reply topic.
    duplicates: Vec<(Reply, Vec<DeliveryId>)>,
}

/// What a job's task tells the actor: a streamed result to publish now, or its end.
enum JobEvent {
    /// One response of a generation, published before the next and before the final result.
    Partial(JobId, Outgoing),
    Done(Done),
}

/// A job's end, sent back to the actor.
struct Done {
    job: JobId,
    outcome: Outcome,
    msg: Outgoing,
    /// Keep the result for duplicates (not for `rejected`, `expired` or passing failures).
    keep: bool,
    received: Instant,
}

/// Where a request's result goes.
#[derive(Clone)]
struct Reply {
    topic: String,
    correlation: Option<Bytes>,
}

struct Actor {
    s: Settings,
    server: Server,
    metrics: Arc<MqttMetrics>,
    link: Link,
    ledger: Ledger,
    dedup: Dedup,
    jobs: HashMap<JobId, Job>,
    next_job: JobId,
    done_tx: mpsc::Sender<JobEvent>,
    done_rx: mpsc::Receiver<JobEvent>,
    /// Models whose fleet topic is subscribed.
    subscribed: BTreeSet<String>,
    backoff: Duration,
    /// When to try connecting again.
    retry_at: Option<tokio::time::Instant>,
    /// When to send Home Assistant discovery again.
    discovery_at: Option<tokio::time::Instant>,
    /// The stats totals and time of the last stats message.
    stats_before: (Instant, status::Totals),
    platform: Value,
    /// Set once a shutdown begins: no new work.
    stopping: bool,
    /// Log the next connection failure (the first of a series).
    log_failure: bool,
}

impl Actor {
    fn new(s: Settings, server: Server, metrics: Arc<MqttMetrics>) -> Actor {
        let (dedup, warning) = Dedup::new(DEDUP_ENTRIES, DEDUP_BYTES, s.journal.as_deref());
        if let Some(w) = warning {
            tracing::warn!("{w}; duplicates are recognised in memory only.");
        }
        let (done_tx, done_rx) = mpsc::channel(s.max_inflight.max(1));
        let stats_before = (Instant::now(), status::Totals::of(&server.statistics(None, "").unwrap_or_default()));
        Actor {
            link: Link::new(&s.link),
            s,
            server,
            metrics,
            ledger: Ledger::new(PKIDS),
            dedup,
            jobs: HashMap::new(),
            next_job: 1,
            done_tx,
            done_rx,
            subscribed: BTreeSet::new(),
            backoff: BACKOFF_MIN,
            retry_at: None,
            discovery_at: None,
            stats_before,
            platform: crate::platform::info::describe(),
            stopping: false,
            log_failure: true,
        }
    }

    async fn run(mut self, mut stop: oneshot::Receiver<Duration>) {
        tracing::info!(
            "MQTT bridge: connecting to {} as '{}' (prefix '{}', group '{}').",
            self.s.broker,
            self.s.link.client_id,
            self.s.topics.prefix,
            self.s.topics.group
        );
        let mut changes = self.server.model_changes();
        let mut stats_tick = self.s.stats_interval.map(|d| {
            let mut i = tokio::time::interval_at(tokio::time::Instant::now() + d, d);
            i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            i
        });
        let mut grace: Option<tokio::time::Instant> = None;
        loop {
            let connecting = self.retry_at.is_none();
            tokio::select! {
                ev = self.link.poll(), if connecting => match ev {
                    Ok(ev) => self.on_event(ev),
                    Err(e) => self.on_failure(e),
                },
                _ = sleep_until(self.retry_at) => {
                    self.retry_at = None;
                }
                Some(ev) = self.done_rx.recv() => match ev {
                    JobEvent::Partial(job, msg) => self.on_partial(job, msg),
                    JobEvent::Done(done) => self.on_done(done),
                },
                Ok(()) = changes.changed() => self.on_models_changed(),
                _ = tick(&mut stats_tick) => self.publish_stats(),
                _ = sleep_until(self.discovery_at) => {
                    self.discovery_at = None;
                    self.publish_discovery();
                }
                g = &mut stop, if grace.is_none() => {
                    let g = g.unwrap_or(Duration::ZERO);
                    grace = Some(tokio::time::Instant::now() + g);
                    self.begin_stop();
                }
                _ = sleep_until(grace), if grace.is_some() => break,
            }
            if grace.is_some() && self.jobs.is_empty() && self.ledger.unsent() == 0 {
                break;
            }
        }
        self.finish().await;
    }

    /// Stops taking fleet work (other devices get it) and lets running jobs finish.
    fn begin_stop(&mut self) {
        self.stopping = true;
        if self.ledger.is_connected() {
            for m in std::mem::take(&mut self.subscribed) {
                for fleet in self.s.topics.fleet_filters(&m) {
                    self.link.unsubscribe(&fleet);
                }
            }
        }
    }

    /// Publishes `offline` and disconnects, giving the broker a moment to take both.
    async fn finish(&mut self) {
        if !self.ledger.is_connected() {
            return;
        }
        self.publish(self.s.topics.available(), Bytes::from_static(b"offline"), true);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while self.ledger.unsent() > 0 {
            match tokio::time::timeout_at(deadline, self.link.poll()).await {
                Ok(Ok(ev)) => self.on_event(ev),
                _ => break,
            }
        }
        self.link.disconnect();
        while self.link.queued() > 0 {
            match tokio::time::timeout_at(deadline, self.link.poll()).await {
                Ok(Ok(_)) => {}
                _ => break,
            }
        }
        self.metrics.set_connected(false);
        tracing::info!("MQTT bridge: disconnected from {}.", self.s.broker);
    }

    fn apply(&mut self, actions: Vec<Action>) {
        for a in actions {
            match a {
                Action::Publish { pkid, msg } => self.link.publish(pkid, &msg),
                Action::Ack { pkid, qos } => self.link.ack(pkid, qos),
            }
        }
    }

    /// Publishes a message of our own: availability (plain text), state, stats, discovery (JSON).
    fn publish(&mut self, topic: String, payload: Bytes, retain: bool) {
        let json = payload.first() == Some(&b'{');
        let msg = Outgoing {
            topic,
            payload,
            qos: self.s.qos,
            retain,
            correlation: None,
            content_type: json.then(|| "application/json".into()),
            user: Vec::new(),
        };
        self.send(msg, Vec::new());
    }

    fn on_failure(&mut self, e: crate::error::Error) {
        let was = self.ledger.is_connected();
        self.ledger.disconnected();
        self.metrics.set_connected(false);
        let jitter = 0.5 + fastrand::f64();
        let wait = self.backoff.mul_f64(jitter);
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        self.retry_at = Some(tokio::time::Instant::now() + wait);
        if was {
            tracing::warn!("MQTT bridge: lost the connection to {}: {e}; reconnecting.", self.s.broker);
        } else if self.log_failure || wait >= BACKOFF_MAX / 2 {
            tracing::warn!(
                "MQTT bridge: cannot connect to {}: {e}; retrying in {:.1} s (and on, backing off up to {} s).",
                self.s.broker,
                wait.as_secs_f64(),
                BACKOFF_MAX.as_secs()
            );
        }
        self.log_failure = false;
    }

    fn on_event(&mut self, ev: LinkEvent) {
        match ev {
            LinkEvent::Connected { session_present, receive_max } => self.on_connected(session_present, receive_max),
            LinkEvent::Message(m) => self.on_message(m),
            LinkEvent::PubAck(pkid) => {
                let a = self.ledger.puback(pkid);
                self.apply(a);
            }
            LinkEvent::Other => {}
        }
    }

    fn on_connected(&mut self, session_present: bool, receive_max: u16) {
        tracing::info!(
            "MQTT bridge: connected to {} ({}session kept).",
            self.s.broker,
            if session_present { "" } else { "no " }
        );
        self.metrics.set_connected(true);
        self.backoff = BACKOFF_MIN;
        self.log_failure = true;
        let a = self.ledger.connected(session_present, receive_max);
        self.apply(a);
        for own in self.s.topics.device_filters() {
            self.link.subscribe(&own, self.s.qos);
        }
        if let Some(ha) = &self.s.homeassistant {
            self.link.subscribe(&format!("{ha}/status"), 1);
        }
        // The broker may still hold fleet subscriptions of models that went away meanwhile.
        let ready = self.ready_models();
        let previous = std::mem::take(&mut self.subscribed);
        for m in previous.difference(&ready) {
            for fleet in self.s.topics.fleet_filters(m) {
                self.link.unsubscribe(&fleet);
            }
        }
        self.subscribed = BTreeSet::new();
        self.sync_subscriptions(ready);
        self.publish(self.s.topics.available(), Bytes::from_static(b"online"), true);
        self.publish_state();
        self.publish_discovery();
    }

    /// Models READY in some version whose names fit in a topic.
    fn ready_models(&self) -> BTreeSet<String> {
        self.server
            .model_states()
            .into_iter()
            .filter(|e| e.state == Some(ModelState::Ready) && topics::check_level("model", &e.name).is_ok())
            .map(|e| e.name)
            .collect()
    }

    /// Subscribes the fleet topics of newly ready models and drops those of models gone.
    fn sync_subscriptions(&mut self, ready: BTreeSet<String>) {
        if self.stopping {
            return;
        }
        for m in ready.difference(&self.subscribed) {
            for fleet in self.s.topics.fleet_filters(m) {
                self.link.subscribe(&fleet, self.s.qos);
            }
        }
        for m in self.subscribed.difference(&ready) {
            for fleet in self.s.topics.fleet_filters(m) {
                self.link.unsubscribe(&fleet);
            }
        }
        self.subscribed = ready;
    }

    fn on_models_changed(&mut self) {
        if !self.ledger.is_connected() {
            return;
        }
        let ready = self.ready_models();
        if ready != self.subscribed {
            self.sync_subscriptions(ready);
        }
        self.publish_state();
    }

    fn publish_state(&mut self) {
        let v = status::state(&self.s.topics.device, &self.server.model_states(), &self.platform);
        self.publish(self.s.topics.state(), Bytes::from(v.to_string()), true);
    }

    fn publish_stats(&mut self) {
        if !self.ledger.is_connected() {
            return;
        }
        let models = self.server.statistics(None, "").unwrap_or_default();
        let (then, before) = self.stats_before;
        let v = status::stats(&self.s.topics.device, &models, before, then.elapsed().as_secs_f64(), &self.metrics);
        self.stats_before = (Instant::now(), status::Totals::of(&models));
        self.publish(self.s.topics.stats(), Bytes::from(v.to_string()), false);
    }

    fn publish_discovery(&mut self) {
        let Some(ha) = self.s.homeassistant.clone() else { return };
        if !self.ledger.is_connected() {
            return;
        }
        let (topic, payload) = status::discovery(&self.s.topics, &ha);
        self.publish(topic, Bytes::from(payload.to_string()), true);
    }

    fn on_message(&mut self, m: Message) {
        let delivery = match self.ledger.delivery(m.pkid, m.qos) {
            Accepted::AlreadyHeld => return,
            Accepted::Tracked(d) => Some(d),
            Accepted::Untracked => None,
        };
        let deliveries: Vec<DeliveryId> = delivery.into_iter().collect();
        if let Some(ha) = &self.s.homeassistant {
            if m.topic == format!("{ha}/status") {
                if m.payload.as_ref() == b"online" {
                    // Home Assistant restarted: every device answers, spread over 0-5 s.
                    let wait = Duration::from_millis(fastrand::u64(0..5000));
                    self.discovery_at = Some(tokio::time::Instant::now() + wait);
                }
                let a = self.ledger.complete(&deliveries);
                self.apply(a);
                return;
            }
        }
        let Some(req) = self.s.topics.parse_request(&m.topic) else {
            let a = self.ledger.complete(&deliveries);
            self.apply(a);
            return;
        };
        self.on_request(m, req, deliveries);
    }

    /// A request arrived: answered again if it is a duplicate, refused at once, or started as a job.
    fn on_request(&mut self, m: Message, req: RequestTopic, deliveries: Vec<DeliveryId>) {
        let received = Instant::now();
        let reply = Reply {
            topic: m.response_topic.clone().filter(|t| !t.is_empty()).unwrap_or_else(|| self.s.topics.result(&req)),
            correlation: m.correlation.clone(),
        };
        // The size is checked before anything reads the payload: one over the limit is refused unread.
        let too_large = m.payload.len() > self.s.max_payload;
        let id = request::request_id(&m.user, &m.payload, too_large);
        let key = dedup_key(&m, &req, &reply, id.as_deref());
        let Some((reply, deliveries)) = self.answer_duplicate(&key, &m, &req, id.as_deref(), reply, deliveries) else {
            return;
        };
        let id = id.unwrap_or_else(new_id);
        let job = self.next_job;
        self.next_job += 1;
        let common = OwnedCommon {
            model: req.model.clone(),
            device: self.s.topics.device.clone(),
            source: req.source.clone(),
            id,
            generate: req.generate,
        };
        if let Some((outcome, code, message)) = self.refusal(&m, too_large) {
            let fields = common.borrow().error(code, &message);
            let msg = result_message(self.s.qos, &reply, request::Answer::fields(fields));
            // A payload over the limit is refused the same way again; a full queue or an expiry passes.
            if outcome == Outcome::Error {
                self.dedup.answered(key, Arc::new(msg.clone()));
            }
            self.finish_result(outcome, received, msg, deliveries);
            return;
        }
        self.start_job(job, Job { key, deliveries, duplicates: Vec::new() }, common, m, reply, received);
    }

    /// Answers a duplicate of a request already seen under `key`: its stored result, an
    /// "interrupted" error, or the result of the job still running, when that comes. `None` when it
    /// was answered (or will be); else the reply and deliveries back, to run the request.
    fn answer_duplicate(
        &mut self,
        key: &str,
        m: &Message,
        req: &RequestTopic,
        id: Option<&str>,
        reply: Reply,
        deliveries: Vec<DeliveryId>,
    ) -> Option<(Reply, Vec<DeliveryId>)> {
        // A message without correlation data or id counts as a duplicate only when the broker says
        // it re-sends it (DUP): the same frame twice from a camera is two requests.
        if key.starts_with("d:") && !m.dup {
            return Some((reply, deliveries));
        }
        match self.dedup.lookup(key) {
            Some(Seen::Answered(msg)) => {
                self.metrics.count(Outcome::Duplicate);
                let msg = Outgoing { topic: reply.topic, correlation: reply.correlation, ..(*msg).clone() };
                self.send(msg, deliveries);
                None
            }
            Some(Seen::Interrupted) => {
                self.metrics.count(Outcome::Duplicate);
                let common = request::Common {
                    model: &req.model,
                    device: &self.s.topics.device,
                    source: req.source.as_deref(),
                    id: id.unwrap_or(""),
                };
                let fields = common.error(
                    "interrupted",
                    "the server stopped while this request was running; it is not run again, so that it never runs \
                     twice (send it with a new id or correlation data to run it)",
                );
                let msg = result_message(self.s.qos, &reply, request::Answer::fields(fields));
                self.dedup.answered(key.to_string(), Arc::new(msg.clone()));
                self.send(msg, deliveries);
                None
            }
            Some(Seen::Running(job)) => match self.jobs.get_mut(&job) {
                Some(j) => {
                    self.metrics.count(Outcome::Duplicate);
                    j.duplicates.push((reply, deliveries));
                    None
                }
                None => Some((reply, deliveries)),
            },
            None => Some((reply, deliveries)),
        }
    }

    /// Why a request is refused without running, if it is: the outcome counted, the error code and
    /// the message.
    fn refusal(&self, m: &Message, too_large: bool) -> Option<(Outcome, &'static str, String)> {
        if self.stopping {
            Some((Outcome::Rejected, "rejected", "the server is shutting down".to_string()))
        } else if too_large {
            Some((
                Outcome::Error,
                "payload_too_large",
                format!("the payload of {} bytes is over the limit of {} bytes", m.payload.len(), self.s.max_payload),
            ))
        } else if self.jobs.len() >= self.s.max_inflight {
            Some((
                Outcome::Rejected,
                "rejected",
                format!(
                    "{} requests are in progress, the most this bridge takes (--mqtt-max-inflight)",
                    self.jobs.len()
                ),
            ))
        } else if m.expiry == Some(0) {
            Some((Outcome::Expired, "expired", "the request expired before it arrived".to_string()))
        } else {
            None
        }
    }

    /// Runs a request on its own task, remembered as running (for duplicates) until its result comes
    /// back to [`Actor::on_done`]; it has until its expiry or `--mqtt-request-timeout-ms`.
    fn start_job(&mut self, job: JobId, entry: Job, common: OwnedCommon, m: Message, reply: Reply, received: Instant) {
        self.dedup.running(entry.key.clone(), job);
        self.jobs.insert(job, entry);
        let deadline = [m.expiry.map(|s| Duration::from_secs(u64::from(s))), self.s.request_timeout]
            .into_iter()
            .flatten()
            .min()
            .map(|d| received + d);
        let server = self.server.clone();
        let tx = self.done_tx.clone();
        let qos = self.s.qos;
        tokio::spawn(async move {
            let (outcome, answer, keep) = match common.generate {
                true => execute_generate(&server, &common, &m, deadline, job, &reply, qos, &tx).await,
                false => execute(&server, &common, &m, deadline).await,
            };
            let msg = result_message(qos, &reply, answer);
            let _ = tx.send(JobEvent::Done(Done { job, outcome, msg, keep, received })).await;
        });
    }

    /// A generation's response: published at once (the request's acknowledgement waits for the end).
    fn on_partial(&mut self, job: JobId, msg: Outgoing) {
        if self.jobs.contains_key(&job) {
            self.send(msg, Vec::new());
        }
    }

    fn on_done(&mut self, d: Done) {
        let Some(job) = self.jobs.remove(&d.job) else { return };
        if d.keep {
            self.dedup.answered(job.key, Arc::new(d.msg.clone()));
        } else {
            self.dedup.forget(&job.key);
        }
        for (reply, deliveries) in job.duplicates {
            let msg = Outgoing { topic: reply.topic, correlation: reply.correlation, ..d.msg.clone() };
            self.send(msg, deliveries);
        }
        self.finish_result(d.outcome, d.received, d.msg, job.deliveries);
    }

    fn finish_result(&mut self, outcome: Outcome, received: Instant, msg: Outgoing, deliveries: Vec<DeliveryId>) {
        self.metrics.count(outcome);
        self.metrics.observe(received.elapsed().as_secs_f64());
        self.send(msg, deliveries);
    }

    /// Publishes `msg` through the ledger; once the broker has it, `deliveries` are done.
    fn send(&mut self, msg: Outgoing, deliveries: Vec<DeliveryId>) {
        let a = self.ledger.publish(msg, deliveries);
        self.apply(a);
    }
}

/// [`request::Common`] with owned strings, for a spawned job.
struct OwnedCommon {
    model: String,
    device: String,
    source: Option<String>,
    id: String,
    /// A `generate` request: its responses are published as they stream.
    generate: bool,
}

impl OwnedCommon {
    fn borrow(&self) -> request::Common<'_> {
        request::Common { model: &self.model, device: &self.device, source: self.source.as_deref(), id: &self.id }
    }
}

/// Runs one request: its outcome, its answer with the common fields, and whether to keep it for
/// duplicates.
#[tracing::instrument(name = "mqtt_request", level = "debug", skip_all)]
async fn execute(
    server: &Server,
    c: &OwnedCommon,
    m: &Message,
    deadline: Option<Instant>,
) -> (Outcome, request::Answer, bool) {
    let common = c.borrow();
    let run = async {
        // A kept session delivers requests as soon as the server connects, before its models load.
        while !server.is_started() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let kind = request::kind(&m.payload, &m.user)?;
        let opts = request::Options::from_user(&m.user)?;
        let timeout_us = deadline.map(|d| d.saturating_duration_since(Instant::now()).as_micros() as u64);
        request::run(server, kind, &c.model, &c.id, &opts, m.payload.clone(), timeout_us).await
    };
    let result = match deadline {
        Some(d) => match tokio::time::timeout_at(d.into(), run).await {
            Ok(r) => r,
            Err(_) => {
                let f = common.error("expired", "the request expired before its result was ready");
                return (Outcome::Expired, request::Answer::fields(f), false);
            }
        },
        None => run.await,
    };
    match result {
        Ok(mut a) => {
            common.write(&mut a.fields);
            (Outcome::Ok, a, true)
        }
        Err(e) => {
            use crate::error::ErrorKind;
            // A client's mistake is answered the same way again; a passing failure is not kept.
            let keep =
                matches!(e.kind, ErrorKind::InvalidArgument | ErrorKind::Unsupported | ErrorKind::PayloadTooLarge);
            let fields = common.error(request::error_code(e.kind), &e.message);
            (Outcome::Error, request::Answer::fields(fields), keep)
        }
    }
}

/// Runs one generation ([`generate::run`]), each response sent to the actor as it comes; its outcome
/// and final marker as [`execute`] gives them.
#[allow(clippy::too_many_arguments)]
#[tracing::instrument(name = "mqtt_generate", level = "debug", skip_all)]
async fn execute_generate(
    server: &Server,
    c: &OwnedCommon,
    m: &Message,
    deadline: Option<Instant>,
    job: JobId,
    reply: &Reply,
    qos: u8,
    tx: &mpsc::Sender<JobEvent>,
) -> (Outcome, request::Answer, bool) {
    while !server.is_started() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let emit = |fields| {
        let msg = result_message(qos, reply, request::Answer::fields(fields));
        async move {
            let _ = tx.send(JobEvent::Partial(job, msg)).await;
        }
    };
    let end = generate::run(server, &c.borrow(), &m.user, m.payload.clone(), deadline, emit).await;
    let expired = end.answer.fields.get("error").and_then(|e| e.get("code")).is_some_and(|c| c == "expired");
    let outcome = match (end.ok, expired) {
        (true, _) => Outcome::Ok,
        (false, true) => Outcome::Expired,
        (false, false) => Outcome::Error,
    };
    (outcome, end.answer, end.keep)
}

fn result_message(qos: u8, reply: &Reply, answer: request::Answer) -> Outgoing {
    let json = answer.to_json();
    let (payload, user, content_type) = match answer.binary {
        Some(b) => {
            let len = json.len();
            let mut all = Vec::with_capacity(len + b.len());
            all.extend_from_slice(&json);
            all.extend_from_slice(&b);
            (Bytes::from(all), vec![(request::HEADER_LEN.to_string(), len.to_string())], "application/octet-stream")
        }
        None => (Bytes::from(json), Vec::new(), "application/json"),
    };
    Outgoing {
        topic: reply.topic.clone(),
        payload,
        qos,
        retain: false,
        correlation: reply.correlation.clone(),
        content_type: Some(content_type.into()),
        user,
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn tick(i: &mut Option<tokio::time::Interval>) {
    match i {
        Some(i) => {
            i.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// The key a request is known by for duplicate detection: its correlation data, else its id, else
/// a digest of its topic and payload.
fn dedup_key(m: &Message, req: &RequestTopic, reply: &Reply, id: Option<&str>) -> String {
    match (&m.correlation, id) {
        (Some(c), _) => format!("c:{}:{}", reply.topic, hex(c)),
        (None, Some(id)) => format!("r:{}:{}:{id}", req.model, req.source.as_deref().unwrap_or("")),
        (None, None) => format!("d:{}:{:016x}", m.topic, digest(&m.payload)),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A stable digest of a payload (FNV-1a), for recognising re-deliveries across restarts.
fn digest(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3))
}

/// A fresh request id (random, UUID-shaped).
fn new_id() -> String {
    let v = fastrand::u128(..);
    let h = format!("{v:032x}");
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

#[cfg(test)]
mod tests;
