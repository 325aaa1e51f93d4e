//! Model lifecycle: every model version's state (LOADING → READY → UNLOADING / UNAVAILABLE, with a
//! reason), background loads on a bounded pool, and swapping a new version in only once it is READY.
//! Ensembles depend on their composing models; `ensemble` keeps the two in step.
//!
//! A load runs these steps, one file each, in the order `load::load_from` calls them:
//! `fetch` (a valid name, the files from the cloud or the request, the model folder) → `agents`
//! (repository agents' LOAD, which may relocate the files) → `config` (the override, the declared and
//! completed configuration, labels, the versions to load) → `versions` (failure states, LOADING) →
//! `instances` (each version's instances and scheduler, on the load pool) → `swap` (READY versions
//! swapped in, unselected ones retired). `unload` takes models out of service, `index` reads the table
//! that `manager` owns and `state` describes.

mod agents;
mod config;
mod ensemble;
mod fetch;
mod index;
mod instances;
mod load;
mod manager;
mod state;
mod swap;
mod unload;
mod versions;

pub use instances::instance_specs;
pub use manager::ModelManager;
pub use state::{IndexEntry, LoadedModel, ModelState};
pub use swap::retire;
