//! Front-ends: each decodes its transport into core types once, calls `core::Server`, and encodes the
//! answer once.

pub mod conn;
pub mod forward;
pub mod frigate;
pub mod grpc;
pub mod http;
pub mod metrics;
pub mod mqtt;
pub mod restrict;
pub mod tls;
