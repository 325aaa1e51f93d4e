//! Unit tests of `logging.rs`.

use super::*;

fn base() -> LogSettings {
    LogSettings::default()
}

#[test]
fn update_changes_levels_but_not_file() {
    let c = LogControl::detached(base());
    let s = c.update(LogUpdate { log_verbose_level: Some(1), log_info: Some(false), ..Default::default() }).unwrap();
    assert_eq!(s.log_verbose_level, 1);
    assert!(!s.log_info);
    assert_eq!(c.get(), s);
    assert!(c.update(LogUpdate { log_file: Some("/tmp/x".into()), ..Default::default() }).is_err());
    assert_eq!(c.get(), s);
}

#[test]
fn level_follows_flags() {
    let mut s = base();
    assert_eq!(s.level(), LevelFilter::INFO);
    s.log_info = false;
    assert_eq!(s.level(), LevelFilter::WARN);
    s.log_verbose_level = 2;
    assert_eq!(s.level(), LevelFilter::TRACE);
}
