//! `Server`: health, metadata, inference, repository control and statistics, independent of transport.
//!
//! One file per concern: `options` (what a server is built from), `build` (`Server::new`), `handle`
//! (the shared state, readiness and the parts front-ends reach directly), `control` (start-up, poll
//! mode, load and unload), `inference` and `stream` (requests and decoupled responses), `metadata`
//! (metadata, statistics, trace settings), and `bridges` (the server as ensembles and backends call it).

mod bridges;
mod build;
mod control;
mod handle;
mod inference;
mod metadata;
mod options;
mod stream;

pub use handle::{parse_version, Server};
pub use metadata::{ModelMetadata, ModelStatistics, ServerMetadata, TensorMetadata, EXTENSIONS};
pub use options::{ControlMode, MemorySources, ServerOptions};
