//! One MQTT connection over rumqttc, under MQTT 5 or 3.1.1, behind one small interface: events in
//! (connected, a request, a PUBACK), packets out (publish with our own packet id, acknowledge,
//! subscribe). Packets are queued straight into the event loop so that their order and packet ids
//! are ours, not rumqttc's (its `publish()` hides both).

use super::ledger::Outgoing;
use crate::error::{Error, Result};
use bytes::Bytes;
use rumqttc::v5::mqttbytes::v5 as p5;
use rumqttc::v5::mqttbytes::QoS as QoS5;
use std::sync::Arc;
use std::time::Duration;

/// The protocol level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    V311,
    V5,
}

/// A request PUBLISH, protocol-neutral.
#[derive(Debug, Clone)]
pub struct Message {
    pub topic: String,
    pub payload: Bytes,
    pub qos: u8,
    pub pkid: u16,
    pub dup: bool,
    pub response_topic: Option<String>,
    pub correlation: Option<Bytes>,
    pub user: Vec<(String, String)>,
    /// MQTT 5 Message Expiry Interval left, in seconds.
    pub expiry: Option<u32>,
}

/// What the connection reports.
#[derive(Debug)]
pub enum LinkEvent {
    /// CONNACK: the session was (or was not) kept; the broker's Receive Maximum.
    Connected {
        session_present: bool,
        receive_max: u16,
    },
    Message(Message),
    /// The broker acknowledged our publish.
    PubAck(u16),
    /// Anything else (pings, SUBACKs, our own outgoing packets).
    Other,
}

/// Everything needed to connect.
pub struct LinkOptions {
    pub protocol: Protocol,
    pub host: String,
    pub port: u16,
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub client_id: String,
    pub credentials: Option<(String, String)>,
    pub keep_alive: Duration,
    pub session_expiry: u32,
    pub receive_max: u16,
    /// Largest packet accepted from the broker.
    pub max_packet: usize,
    /// Topic and payload of the will (QoS 1, retained).
    pub will: (String, Bytes),
    /// Our publishes' packet ids are at most this (rumqttc sizes its tables by it).
    pub max_pkid: u16,
}

/// The two event loops.
pub enum Link {
    V311(Box<rumqttc::EventLoop>),
    V5(Box<rumqttc::v5::EventLoop>),
}

fn qos4(q: u8) -> rumqttc::QoS {
    match q {
        0 => rumqttc::QoS::AtMostOnce,
        1 => rumqttc::QoS::AtLeastOnce,
        _ => rumqttc::QoS::ExactlyOnce,
    }
}

fn qos5(q: u8) -> QoS5 {
    match q {
        0 => QoS5::AtMostOnce,
        1 => QoS5::AtLeastOnce,
        _ => QoS5::ExactlyOnce,
    }
}

fn transport(tls: &Option<Arc<rustls::ClientConfig>>) -> rumqttc::Transport {
    match tls {
        Some(c) => rumqttc::Transport::tls_with_config(rumqttc::TlsConfiguration::Rustls(c.clone())),
        None => rumqttc::Transport::Tcp,
    }
}

/// Small packets (acknowledgements, results) go out at once instead of waiting for delayed ACKs.
fn nodelay() -> rumqttc::NetworkOptions {
    let mut n = rumqttc::NetworkOptions::new();
    n.set_tcp_nodelay(true);
    n
}

impl Link {
    pub fn new(o: &LinkOptions) -> Link {
        match o.protocol {
            Protocol::V311 => {
                let mut m = rumqttc::MqttOptions::new(&o.client_id, &o.host, o.port);
                m.set_keep_alive(o.keep_alive)
                    .set_clean_session(false)
                    .set_manual_acks(true)
                    .set_inflight(o.max_pkid)
                    .set_max_packet_size(o.max_packet, o.max_packet)
                    .set_transport(transport(&o.tls))
                    .set_last_will(rumqttc::LastWill::new(
                        &o.will.0,
                        o.will.1.clone(),
                        rumqttc::QoS::AtLeastOnce,
                        true,
                    ));
                if let Some((u, p)) = &o.credentials {
                    m.set_credentials(u, p);
                }
                let mut el = rumqttc::EventLoop::new(m, 1);
                el.set_network_options(nodelay());
                Link::V311(Box::new(el))
            }
            Protocol::V5 => {
                let mut m = rumqttc::v5::MqttOptions::new(&o.client_id, &o.host, o.port);
                m.set_keep_alive(o.keep_alive)
                    .set_clean_start(false)
                    .set_session_expiry_interval(Some(o.session_expiry))
                    .set_receive_maximum(Some(o.receive_max.max(1)))
                    .set_max_packet_size(Some(u32::try_from(o.max_packet).unwrap_or(u32::MAX)))
                    .set_manual_acks(true)
                    .set_outgoing_inflight_upper_limit(o.max_pkid)
                    .set_transport(transport(&o.tls))
                    .set_network_options(nodelay())
                    .set_last_will(p5::LastWill::new(&o.will.0, o.will.1.clone(), QoS5::AtLeastOnce, true, None));
                if let Some((u, p)) = &o.credentials {
                    m.set_credentials(u, p);
                }
                Link::V5(Box::new(rumqttc::v5::EventLoop::new(m, 1)))
            }
        }
    }

    /// Waits for the next event; connects first when there is no connection. An error means the
    /// connection is gone (or could not be made); call again, after a pause, to reconnect.
    pub async fn poll(&mut self) -> Result<LinkEvent> {
        match self {
            Link::V311(el) => {
                use rumqttc::{Event, Packet};
                Ok(match el.poll().await.map_err(|e| Error::unavailable(e.to_string()))? {
                    Event::Incoming(Packet::ConnAck(c)) => {
                        LinkEvent::Connected { session_present: c.session_present, receive_max: 100 }
                    }
                    Event::Incoming(Packet::Publish(p)) => LinkEvent::Message(Message {
                        topic: String::from_utf8_lossy(p.topic.as_bytes()).into_owned(),
                        payload: p.payload,
                        qos: p.qos as u8,
                        pkid: p.pkid,
                        dup: p.dup,
                        response_topic: None,
                        correlation: None,
                        user: Vec::new(),
                        expiry: None,
                    }),
                    Event::Incoming(Packet::PubAck(a)) => LinkEvent::PubAck(a.pkid),
                    _ => LinkEvent::Other,
                })
            }
            Link::V5(el) => {
                use rumqttc::v5::Event;
                Ok(match el.poll().await.map_err(|e| Error::unavailable(e.to_string()))? {
                    Event::Incoming(p5::Packet::ConnAck(c)) => LinkEvent::Connected {
                        session_present: c.session_present,
                        receive_max: c.properties.and_then(|p| p.receive_max).unwrap_or(u16::MAX),
                    },
                    Event::Incoming(p5::Packet::Publish(p)) => {
                        let props = p.properties.unwrap_or_default();
                        LinkEvent::Message(Message {
                            topic: String::from_utf8_lossy(&p.topic).into_owned(),
                            payload: p.payload,
                            qos: p.qos as u8,
                            pkid: p.pkid,
                            dup: p.dup,
                            response_topic: props.response_topic,
                            correlation: props.correlation_data,
                            user: props.user_properties,
                            expiry: props.message_expiry_interval,
                        })
                    }
                    Event::Incoming(p5::Packet::PubAck(a)) => LinkEvent::PubAck(a.pkid),
                    _ => LinkEvent::Other,
                })
            }
        }
    }

    /// Queues a publish with packet id `pkid` (0 for QoS 0).
    pub fn publish(&mut self, pkid: u16, m: &Outgoing) {
        match self {
            Link::V311(el) => {
                let mut p = rumqttc::Publish::from_bytes(&m.topic, qos4(m.qos), m.payload.clone());
                p.retain = m.retain;
                p.pkid = pkid;
                el.pending.push_back(rumqttc::Request::Publish(p));
            }
            Link::V5(el) => {
                let props = (m.correlation.is_some() || m.content_type.is_some() || !m.user.is_empty()).then(|| {
                    p5::PublishProperties {
                        correlation_data: m.correlation.clone(),
                        content_type: m.content_type.clone(),
                        user_properties: m.user.clone(),
                        ..Default::default()
                    }
                });
                let mut p = p5::Publish::new(&m.topic, qos5(m.qos), m.payload.clone(), props);
                p.retain = m.retain;
                p.pkid = pkid;
                el.pending.push_back(rumqttc::v5::Request::Publish(p));
            }
        }
    }

    /// Queues the acknowledgement of a request delivered with `pkid`.
    pub fn ack(&mut self, pkid: u16, qos: u8) {
        match self {
            Link::V311(el) => el.pending.push_back(match qos {
                2 => rumqttc::Request::PubRec(rumqttc::PubRec::new(pkid)),
                _ => rumqttc::Request::PubAck(rumqttc::PubAck::new(pkid)),
            }),
            Link::V5(el) => el.pending.push_back(match qos {
                2 => rumqttc::v5::Request::PubRec(p5::PubRec::new(pkid, None)),
                _ => rumqttc::v5::Request::PubAck(p5::PubAck::new(pkid, None)),
            }),
        }
    }

    pub fn subscribe(&mut self, filter: &str, qos: u8) {
        match self {
            Link::V311(el) => {
                el.pending.push_back(rumqttc::Request::Subscribe(rumqttc::Subscribe::new(filter, qos4(qos))))
            }
            Link::V5(el) => el.pending.push_back(rumqttc::v5::Request::Subscribe(p5::Subscribe::new(
                p5::Filter::new(filter, qos5(qos)),
                None,
            ))),
        }
    }

    pub fn unsubscribe(&mut self, filter: &str) {
        match self {
            Link::V311(el) => el.pending.push_back(rumqttc::Request::Unsubscribe(rumqttc::Unsubscribe::new(filter))),
            Link::V5(el) => el.pending.push_back(rumqttc::v5::Request::Unsubscribe(p5::Unsubscribe::new(filter, None))),
        }
    }

    /// Queues a DISCONNECT (a clean one: the broker does not send the will).
    pub fn disconnect(&mut self) {
        match self {
            Link::V311(el) => el.pending.push_back(rumqttc::Request::Disconnect(rumqttc::Disconnect)),
            Link::V5(el) => el.pending.push_back(rumqttc::v5::Request::Disconnect),
        }
    }

    /// Packets queued and not yet written.
    pub fn queued(&self) -> usize {
        match self {
            Link::V311(el) => el.pending.len(),
            Link::V5(el) => el.pending.len(),
        }
    }
}
