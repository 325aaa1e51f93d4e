//! Repositories that live elsewhere (S3, GCS, Azure): what the core asks of them.
//!
//! The core only ever reads local folders. A remote repository keeps a local folder (its *view*) that
//! holds one entry per model it has brought in, and the core scans that view like any other
//! repository. [`RemoteRepository::sync`] brings the view up to date with the store; the core calls it
//! before it looks: at start-up, on every poll, and (explicit model control) before each load. How the
//! files travel is the implementor's business (the storage module), so the core needs no client crate.

use crate::error::Error;
use futures_util::future::BoxFuture;
use std::path::Path;

/// What a sync should bring into the view.
#[derive(Debug, Clone, Copy)]
pub enum SyncScope<'a> {
    /// Every model in the store; models gone from the store leave the view.
    All,
    /// These models only (explicit loads); a name the store lacks leaves the view.
    Models(&'a [String]),
    /// Nothing: refresh the list of model names only (the repository index).
    List,
}

/// Counters of a remote repository's downloads, for the metrics endpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncProgress {
    /// Bytes downloaded since start-up.
    pub bytes: u64,
    /// Files downloaded since start-up.
    pub files: u64,
    /// Bytes of the download under way that have not arrived yet (0 when idle).
    pub pending_bytes: u64,
    /// Syncs that failed (listing or a model's download) since start-up.
    pub failures: u64,
}

pub trait RemoteRepository: Send + Sync + std::fmt::Debug {
    /// The repository as the operator gave it (`s3://bucket/models`); never holds a secret.
    fn url(&self) -> &str;
    /// The local folder the core scans as this repository.
    fn local_dir(&self) -> &Path;
    /// The model names the store held at the last successful listing.
    fn listed_models(&self) -> Vec<String>;
    /// Brings the view up to date for `scope`. Each error names the URL and the cause; what failed
    /// keeps its previous state in the view (a model being served keeps its files).
    fn sync<'a>(&'a self, scope: SyncScope<'a>) -> BoxFuture<'a, Vec<Error>>;
    fn progress(&self) -> SyncProgress;
}
