//! The bridge's reliability layer, as a pure state struct (no I/O, no runtime): which request
//! deliveries still need their PUBACK, which of our publishes still wait for the broker's, and which
//! packet ids are free.
//!
//! The rule it keeps: a request's PUBACK goes out only after its result has been published and
//! acknowledged by the broker, and PUBACKs go out in the order the requests arrived (MQTT 3.1.1
//! §4.6, MQTT 5 §4.6). So if this process dies or the broker restarts before a result is safe, the
//! broker delivers the request again.

use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// Identifies one delivery of a request (one PUBLISH received).
pub type DeliveryId = u64;

/// A message to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    pub topic: String,
    pub payload: Bytes,
    pub qos: u8,
    pub retain: bool,
    /// MQTT 5 Correlation Data, echoed from the request.
    pub correlation: Option<Bytes>,
    /// MQTT 5 Content Type.
    pub content_type: Option<String>,
    /// MQTT 5 user properties.
    pub user: Vec<(String, String)>,
}

/// What the link must do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Publish `msg` with packet id `pkid` (0 for QoS 0).
    Publish { pkid: u16, msg: Arc<Outgoing> },
    /// Acknowledge the request delivered with `pkid` (PUBACK for QoS 1, PUBREC for QoS 2).
    Ack { pkid: u16, qos: u8 },
}

/// How a received PUBLISH is tracked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepted {
    /// A QoS 1/2 delivery whose acknowledgement waits for its result.
    Tracked(DeliveryId),
    /// QoS 0: nothing to acknowledge.
    Untracked,
    /// The broker re-sent a delivery this session still holds (same packet id after a reconnect
    /// that kept the session): it is already being answered.
    AlreadyHeld,
}

#[derive(Debug)]
struct Delivery {
    id: DeliveryId,
    pkid: u16,
    qos: u8,
    /// The session it came in; a PUBACK for a lost session means nothing to the broker.
    session: u64,
    /// Its result is safe with the broker.
    done: bool,
}

#[derive(Debug)]
struct Pending {
    msg: Arc<Outgoing>,
    /// Deliveries answered by this message, done once the broker acknowledges it.
    deliveries: Vec<DeliveryId>,
}

/// See the module documentation.
#[derive(Debug)]
pub struct Ledger {
    /// Bumped when a connection comes up without the previous session.
    session: u64,
    connected: bool,
    next_delivery: DeliveryId,
    /// Deliveries in arrival order; the front ones are acknowledged as soon as they are done.
    acks: VecDeque<Delivery>,
    /// Our QoS 1 publishes the broker has not acknowledged yet.
    inflight: HashMap<u16, Pending>,
    /// Publishes waiting for the broker's receive window or a connection.
    outbox: VecDeque<Pending>,
    free: Vec<u16>,
    /// The broker's Receive Maximum: our publishes it accepts unacknowledged at once.
    window: usize,
}

impl Ledger {
    /// Packet ids for our publishes come from `ids` (the link keeps the others for subscriptions).
    pub fn new(ids: std::ops::RangeInclusive<u16>) -> Ledger {
        let free: Vec<u16> = ids.rev().collect();
        Ledger {
            session: 0,
            connected: false,
            next_delivery: 1,
            acks: VecDeque::new(),
            inflight: HashMap::new(),
            outbox: VecDeque::new(),
            window: free.len(),
            free,
        }
    }

    pub fn is_connected(&self) -> bool {
        self.connected
    }

    /// Deliveries not acknowledged yet (for tests and the shutdown drain).
    pub fn unacked(&self) -> usize {
        self.acks.len()
    }

    /// Our publishes not yet acknowledged or not yet sent.
    pub fn unsent(&self) -> usize {
        self.inflight.len() + self.outbox.len()
    }

    /// A connection is up. Without the old session, what was in flight is gone from the broker:
    /// our unacknowledged publishes are sent again, and the old deliveries are no longer acknowledged
    /// (the broker forgot them; it will not send them again either).
    pub fn connected(&mut self, session_present: bool, receive_max: u16) -> Vec<Action> {
        self.connected = true;
        self.window = usize::from(receive_max.max(1)).min(self.free.len() + self.inflight.len());
        if !session_present {
            self.session += 1;
            let mut resend: Vec<(u16, Pending)> = self.inflight.drain().collect();
            resend.sort_by_key(|(pkid, _)| *pkid);
            for (pkid, p) in resend.into_iter().rev() {
                self.free.push(pkid);
                self.outbox.push_front(p);
            }
            let session = self.session;
            self.acks.retain(|d| d.session == session);
        }
        let mut out = self.flush_acks();
        out.extend(self.send());
        out
    }

    /// The connection is gone; nothing is sent until the next one.
    pub fn disconnected(&mut self) {
        self.connected = false;
    }

    /// A request PUBLISH arrived.
    pub fn delivery(&mut self, pkid: u16, qos: u8) -> Accepted {
        if qos == 0 {
            return Accepted::Untracked;
        }
        if self.acks.iter().any(|d| d.pkid == pkid && d.session == self.session) {
            return Accepted::AlreadyHeld;
        }
        let id = self.next_delivery;
        self.next_delivery += 1;
        self.acks.push_back(Delivery { id, pkid, qos, session: self.session, done: false });
        Accepted::Tracked(id)
    }

    /// Queues `msg`; once the broker has it, `deliveries` are done.
    pub fn publish(&mut self, msg: Outgoing, deliveries: Vec<DeliveryId>) -> Vec<Action> {
        self.outbox.push_back(Pending { msg: Arc::new(msg), deliveries });
        self.send()
    }

    /// Marks deliveries done that need no publish of their own.
    pub fn complete(&mut self, deliveries: &[DeliveryId]) -> Vec<Action> {
        self.mark_done(deliveries);
        self.flush_acks()
    }

    /// The broker acknowledged our publish `pkid`.
    pub fn puback(&mut self, pkid: u16) -> Vec<Action> {
        let Some(p) = self.inflight.remove(&pkid) else {
            return Vec::new();
        };
        self.free.push(pkid);
        self.mark_done(&p.deliveries);
        let mut out = self.flush_acks();
        out.extend(self.send());
        out
    }

    /// Moves publishes from the outbox into the broker's window.
    fn send(&mut self) -> Vec<Action> {
        let mut out = Vec::new();
        while self.connected {
            let qos0 = self.outbox.front().is_some_and(|p| p.msg.qos == 0);
            if !qos0 && self.inflight.len() >= self.window {
                break;
            }
            let Some(p) = self.outbox.pop_front() else { break };
            if qos0 {
                out.push(Action::Publish { pkid: 0, msg: p.msg.clone() });
                self.mark_done(&p.deliveries);
                out.extend(self.flush_acks());
                continue;
            }
            let Some(pkid) = self.free.pop() else {
                self.outbox.push_front(p);
                break;
            };
            out.push(Action::Publish { pkid, msg: p.msg.clone() });
            self.inflight.insert(pkid, p);
        }
        out
    }

    fn mark_done(&mut self, ids: &[DeliveryId]) {
        for d in self.acks.iter_mut().filter(|d| ids.contains(&d.id)) {
            d.done = true;
        }
    }

    /// Acknowledges the done deliveries at the front, in arrival order.
    fn flush_acks(&mut self) -> Vec<Action> {
        let mut out = Vec::new();
        if !self.connected {
            return out;
        }
        while self.acks.front().is_some_and(|d| d.done) {
            if let Some(d) = self.acks.pop_front() {
                out.push(Action::Ack { pkid: d.pkid, qos: d.qos });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
