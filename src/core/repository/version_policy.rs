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
mod tests {
    use super::*;

    fn avail(v: &[i64]) -> BTreeSet<i64> {
        v.iter().copied().collect()
    }

    #[test]
    fn latest_picks_highest_versions() {
        assert_eq!(VersionPolicy::Latest(1).select(&avail(&[1, 3, 2])), vec![3]);
        assert_eq!(VersionPolicy::Latest(2).select(&avail(&[1, 3, 2, 10])), vec![3, 10]);
        assert_eq!(VersionPolicy::Latest(5).select(&avail(&[7])), vec![7]);
        assert!(VersionPolicy::Latest(1).select(&avail(&[])).is_empty());
    }

    #[test]
    fn all_and_specific() {
        assert_eq!(VersionPolicy::All.select(&avail(&[2, 1])), vec![1, 2]);
        assert_eq!(VersionPolicy::Specific(vec![3, 1, 3]).select(&avail(&[1, 2])), vec![1, 3]);
    }

    #[test]
    fn default_policy_is_latest_one() {
        assert_eq!(VersionPolicy::from_config(&ModelConfig::default()), VersionPolicy::Latest(1));
    }
}
