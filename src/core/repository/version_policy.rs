//! Which version folders of a model are served: Triton's `version_policy` latest / all / specific.

use crate::proto::inference::model_version_policy::PolicyChoice;
use crate::proto::inference::ModelConfig;
use std::collections::BTreeSet;

/// A model's version policy, with Triton's default of the single latest version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionPolicy {
    /// The `n` highest numbered versions.
    Latest(u32),
    /// Every version found.
    All,
    /// Exactly these versions.
    Specific(Vec<i64>),
}

impl VersionPolicy {
    pub fn from_config(cfg: &ModelConfig) -> VersionPolicy {
        match cfg.version_policy.as_ref().and_then(|p| p.policy_choice.as_ref()) {
            Some(PolicyChoice::All(_)) => VersionPolicy::All,
            Some(PolicyChoice::Specific(s)) => VersionPolicy::Specific(s.versions.clone()),
            Some(PolicyChoice::Latest(l)) => VersionPolicy::Latest(l.num_versions.max(1)),
            None => VersionPolicy::Latest(1),
        }
    }

    /// The versions to serve out of those on disk, in ascending order. For `Specific`, versions missing on
    /// disk are returned too, so the loader can report each one as failed with a reason.
    pub fn select(&self, available: &BTreeSet<i64>) -> Vec<i64> {
        match self {
            VersionPolicy::All => available.iter().copied().collect(),
            VersionPolicy::Latest(n) => {
                let mut v: Vec<i64> = available.iter().rev().take(*n as usize).copied().collect();
                v.reverse();
                v
            }
            VersionPolicy::Specific(list) => {
                let set: BTreeSet<i64> = list.iter().copied().collect();
                set.into_iter().collect()
            }
        }
    }
}

#[cfg(test)]
mod tests;
