//! Unit tests of `core/repository/version_policy.rs`.

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
