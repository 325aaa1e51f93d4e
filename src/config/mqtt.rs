//! Flags of the MQTT bridge (`--mqtt-*`). Without `--mqtt-broker` there is no bridge.

use super::parse_bool;
use clap::{ArgAction, Args};
use std::path::PathBuf;

#[derive(Debug, Clone, Args)]
pub struct MqttArgs {
    /// MQTT broker to take requests from, as mqtt://host[:port] (1883) or mqtts://host[:port] (8883);
    /// unset: no MQTT bridge.
    #[arg(help_heading = "MQTT", long, env = "TRITONRS_MQTT_BROKER", value_name = "URL")]
    pub mqtt_broker: Option<String>,
    /// MQTT protocol version: 5 or 3.1.1 (for old brokers; no response topics, user properties or
    /// expiry there).
    #[arg(help_heading = "MQTT", long, env = "TRITONRS_MQTT_PROTOCOL", default_value = "5")]
    pub mqtt_protocol: String,
    /// First level of every topic the bridge uses.
    #[arg(help_heading = "MQTT", long, env = "TRITONRS_MQTT_PREFIX", default_value = "tritonrs")]
    pub mqtt_prefix: String,
    /// This device's name in topics and its client id (`tritonrs-<id>`); default: the host name.
    #[arg(help_heading = "MQTT", long, env = "TRITONRS_MQTT_DEVICE_ID")]
    pub mqtt_device_id: Option<String>,
    /// Shared-subscription group of the fleet: devices of one group split `<prefix>/infer/...` requests.
    #[arg(help_heading = "MQTT", long, env = "TRITONRS_MQTT_GROUP", default_value = "tritonrs")]
    pub mqtt_group: String,
    /// QoS of the request subscriptions and of the results: 0 or 1 (2 is taken as 1).
    #[arg(help_heading = "MQTT", long, env = "TRITONRS_MQTT_QOS", default_value_t = 1)]
    pub mqtt_qos: u8,
    /// Seconds between keep-alive pings.
    #[arg(help_heading = "MQTT", long, env = "TRITONRS_MQTT_KEEP_ALIVE_SECS", default_value_t = 30)]
    pub mqtt_keep_alive_secs: u64,
    /// Requests in progress at once; more get a `rejected` result. Announced to the broker as the
    /// MQTT 5 Receive Maximum.
    #[arg(help_heading = "MQTT", long, env = "TRITONRS_MQTT_MAX_INFLIGHT", default_value_t = 16)]
    pub mqtt_max_inflight: u16,
    /// Seconds the broker keeps this device's session (subscriptions, unacknowledged requests) after
    /// a disconnect.
    #[arg(help_heading = "MQTT", long, env = "TRITONRS_MQTT_SESSION_EXPIRY_SECS", default_value_t = 3600)]
    pub mqtt_session_expiry_secs: u32,
    /// User name for the broker.
    #[arg(help_heading = "MQTT", long, env = "TRITONRS_MQTT_USERNAME")]
    pub mqtt_username: Option<String>,
    /// Password for the broker (prefer --mqtt-password-file).
    #[arg(help_heading = "MQTT", long, env = "TRITONRS_MQTT_PASSWORD", hide_env_values = true)]
    pub mqtt_password: Option<String>,
    /// File holding the broker password (one line; trailing newline ignored).
    #[arg(help_heading = "MQTT", long, env = "TRITONRS_MQTT_PASSWORD_FILE")]
    pub mqtt_password_file: Option<PathBuf>,
    /// PEM CA certificate(s) that the broker's certificate must chain to (mqtts://); default: the
    /// system's roots from /etc/ssl/certs.
    #[arg(help_heading = "MQTT", long, env = "TRITONRS_MQTT_CA_FILE")]
    pub mqtt_ca_file: Option<PathBuf>,
    /// PEM client certificate for brokers that want one (with --mqtt-client-key).
    #[arg(help_heading = "MQTT", long, env = "TRITONRS_MQTT_CLIENT_CERT")]
    pub mqtt_client_cert: Option<PathBuf>,
    /// PEM private key of --mqtt-client-cert.
    #[arg(help_heading = "MQTT", long, env = "TRITONRS_MQTT_CLIENT_KEY")]
    pub mqtt_client_key: Option<PathBuf>,
    /// Seconds between `<prefix>/<device>/stats` messages; 0: none.
    #[arg(help_heading = "MQTT", long, env = "TRITONRS_MQTT_STATS_INTERVAL_SECS", default_value_t = 60)]
    pub mqtt_stats_interval_secs: u64,
    /// Publish Home Assistant MQTT discovery for this device (sensors for inferences per second,
    /// queue time and, where known, GPU load and temperature).
    #[arg(help_heading = "MQTT", long, env = "TRITONRS_MQTT_HOMEASSISTANT", value_parser = parse_bool, num_args = 0..=1,
          default_missing_value = "true", default_value = "false", action = ArgAction::Set)]
    pub mqtt_homeassistant: bool,
    /// Home Assistant's discovery prefix.
    #[arg(help_heading = "MQTT", long, env = "TRITONRS_MQTT_HOMEASSISTANT_PREFIX", default_value = "homeassistant")]
    pub mqtt_homeassistant_prefix: String,
    /// Milliseconds a request may wait from its arrival until it starts; older ones get an `expired`
    /// result. 0: no limit (MQTT 5 Message Expiry still applies).
    #[arg(help_heading = "MQTT", long, env = "TRITONRS_MQTT_REQUEST_TIMEOUT_MS", default_value_t = 0)]
    pub mqtt_request_timeout_ms: u64,
    /// Largest request payload in bytes; larger ones get an error result.
    #[arg(help_heading = "MQTT", long, env = "TRITONRS_MQTT_MAX_PAYLOAD_BYTES", default_value_t = 8 * 1024 * 1024)]
    pub mqtt_max_payload_bytes: usize,
    /// Directory where answered requests are journaled, so a restarted server re-publishes instead
    /// of re-running a request the broker delivers again; default: $STATE_DIRECTORY (systemd), else
    /// none (remembered in memory only).
    #[arg(help_heading = "MQTT", long, env = "TRITONRS_MQTT_STATE_DIR")]
    pub mqtt_state_dir: Option<PathBuf>,
}
