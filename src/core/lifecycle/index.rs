//! Reading the table: the serving model for a request, readiness, and the repository index.

use super::manager::ModelManager;
use super::state::{IndexEntry, LoadedModel, ModelEntry, ModelState};
use crate::core::repository::namespace;
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::sync::Arc;

impl ModelManager {
    /// The serving model for `version`, or the highest READY version when `None`.
    pub fn get(&self, name: &str, version: Option<i64>) -> Result<Arc<LoadedModel>> {
        let table = self.table.read();
        let entry = resolve(&table, name)?;
        match version {
            Some(v) => {
                let slot = entry.versions.get(&v).ok_or_else(|| {
                    Error::not_found(format!("Request for unknown model: '{name}' version {v} is not found"))
                })?;
                match (&slot.model, slot.state) {
                    (Some(m), ModelState::Ready | ModelState::Loading) => Ok(m.clone()),
                    _ => Err(Error::unavailable(format!(
                        "Request for unknown model: '{name}' version {v} is not at ready state ({})",
                        slot.state.as_str()
                    ))),
                }
            }
            None => entry.versions.values().rev().find_map(|s| s.model.clone()).ok_or_else(|| {
                // Say why when the index knows (e.g. an ensemble whose composing model went away).
                let why = entry
                    .error
                    .as_deref()
                    .or_else(|| entry.versions.values().next_back().map(|s| s.reason.as_str()))
                    .filter(|r| !r.is_empty())
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default();
                Error::unavailable(format!("Request for unknown model: '{name}' has no available versions{why}"))
            }),
        }
    }

    /// The keys a load or unload of `name` acts on: with namespacing, every repository's copy of a
    /// name found in several (on disk or in the table); otherwise `name` itself.
    pub fn keys_for(&self, name: &str) -> Vec<String> {
        if !self.opts.namespacing || namespace::split(name).1.is_some() {
            return vec![name.to_string()];
        }
        let mut keys: Vec<String> = self.scan().0.into_keys().filter(|k| namespace::is_key_of(k, name)).collect();
        keys.extend(self.table.read().keys().filter(|k| namespace::is_key_of(k, name)).cloned());
        keys.sort();
        keys.dedup();
        if keys.is_empty() {
            keys.push(name.to_string());
        }
        keys
    }

    /// Whether `name` (and `version`, when given) is ready to serve.
    pub fn is_ready(&self, name: &str, version: Option<i64>) -> Result<bool> {
        let table = self.table.read();
        let entry = resolve(&table, name)?;
        Ok(match version {
            Some(v) => entry.versions.get(&v).map(|s| s.model.is_some()).unwrap_or(false),
            None => entry.versions.values().any(|s| s.model.is_some()),
        })
    }

    /// The versions of `name` that are serving, ascending.
    pub fn ready_versions(&self, name: &str) -> Vec<i64> {
        let table = self.table.read();
        table
            .get(name)
            .map(|e| e.versions.iter().filter(|(_, s)| s.model.is_some()).map(|(v, _)| *v).collect())
            .unwrap_or_default()
    }

    /// All ready model versions, for statistics.
    pub fn loaded(&self) -> Vec<Arc<LoadedModel>> {
        let table = self.table.read();
        let mut v: Vec<_> = table.values().flat_map(|e| e.versions.values().filter_map(|s| s.model.clone())).collect();
        v.sort_by(|a, b| (a.name.as_str(), a.version).cmp(&(b.name.as_str(), b.version)));
        v
    }

    /// Strict readiness: every model the server is meant to serve is READY in every version its policy
    /// selects. Models and versions unloaded on purpose do not count.
    pub fn all_ready(&self) -> bool {
        let table = self.table.read();
        table.values().filter(|e| !e.unloaded).all(|e| {
            e.error.is_none()
                && !(e.loading && e.versions.is_empty())
                && e.versions.values().filter(|s| s.wanted).all(|s| s.state == ModelState::Ready)
        })
    }

    /// The repository index: every model folder in the repositories plus every model the server knows.
    pub fn index(&self, ready_only: bool) -> Vec<IndexEntry> {
        let (on_disk, _) = self.scan();
        // A cloud repository's models are listed even before their files are brought in.
        let listed: Vec<String> = self.remotes.iter().flat_map(|r| r.listed_models()).collect();
        let mut out = self.rows(on_disk.keys().map(String::as_str).chain(listed.iter().map(String::as_str)));
        if ready_only {
            out.retain(|e| e.state == Some(ModelState::Ready));
        }
        out
    }

    /// Every model the server knows (loaded, loading or failed) with its versions' states, without
    /// reading the repositories.
    pub fn states(&self) -> Vec<IndexEntry> {
        self.rows(std::iter::empty())
    }

    /// Index rows of the known models plus `also` (names found on disk).
    fn rows<'a>(&self, also: impl Iterator<Item = &'a str>) -> Vec<IndexEntry> {
        let table = self.table.read();
        let mut names: Vec<&str> = also.collect();
        names.extend(table.keys().map(String::as_str));
        names.sort();
        names.dedup();
        let mut out = Vec::new();
        for name in names {
            // A namespaced model is listed under its own name, as tritonserver lists it.
            let shown = namespace::plain(name);
            let row = |state: Option<ModelState>, reason: &str| IndexEntry {
                name: shown.into(),
                version: None,
                state,
                reason: reason.to_string(),
            };
            match table.get(name) {
                Some(e) if e.versions.is_empty() => out.push(match (&e.error, e.loading, e.unloaded) {
                    (Some(err), _, _) => row(Some(ModelState::Unavailable), err),
                    (None, true, _) => row(Some(ModelState::Loading), ""),
                    (None, false, true) => row(Some(ModelState::Unavailable), "unloaded"),
                    (None, false, false) => row(None, ""),
                }),
                Some(e) => {
                    for (v, s) in &e.versions {
                        out.push(IndexEntry {
                            name: shown.into(),
                            version: Some(*v),
                            state: Some(s.state),
                            reason: s.reason.clone(),
                        })
                    }
                }
                None => out.push(row(None, "")),
            }
        }
        out
    }

    /// Names of every model folder in the repositories.
    pub fn repository_models(&self) -> Vec<String> {
        self.scan().0.into_keys().collect()
    }

    /// Names of models the server has been asked to serve (loaded, loading or failed).
    pub fn known_models(&self) -> Vec<String> {
        self.table.read().keys().cloned().collect()
    }

    /// The fingerprint recorded at the last load of `name`.
    pub fn fingerprint(&self, name: &str) -> Option<u64> {
        self.table.read().get(name).and_then(|e| e.fingerprint)
    }
}

/// The table's entry for a request's model `name`. With namespacing, a name the table holds only under
/// namespaced keys resolves when one repository's copy is known, and is the client's error when
/// several are, since a request cannot tell them apart (tritonserver resolves names the same way).
fn resolve<'t>(table: &'t HashMap<String, ModelEntry>, name: &str) -> Result<&'t ModelEntry> {
    if let Some(e) = table.get(name) {
        return Ok(e);
    }
    let mut found: Vec<(&str, &ModelEntry)> = table
        .iter()
        .filter(|(k, _)| namespace::is_key_of(k, name))
        .filter_map(|(k, e)| Some((namespace::split(k).1?, e)))
        .collect();
    match found.len() {
        0 => Err(Error::not_found(format!("Request for unknown model: '{name}' is not found"))),
        1 => Ok(found.remove(0).1),
        n => {
            let mut places: Vec<&str> = found.iter().map(|(p, _)| *p).collect();
            places.sort();
            Err(Error::invalid(format!(
                "model '{name}' is in {n} model repositories ({}) and --model-namespacing is on: a request \
                 cannot tell them apart (an ensemble uses the one of its own repository)",
                places.join(", ")
            )))
        }
    }
}
