//! Unit tests of `config/tune.rs`.

use super::*;

#[test]
fn search_modes_parse() {
    assert_eq!(parse_search("quick"), Ok(SearchMode::Quick));
    assert_eq!(parse_search("brute"), Ok(SearchMode::Brute));
    assert_eq!(parse_search("custom:/a/b.toml"), Ok(SearchMode::Custom("/a/b.toml".into())));
    assert!(parse_search("custom:").is_err());
    assert!(parse_search("fast").is_err());
}

#[test]
fn budgets_and_limits_parse() {
    assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
    assert!(parse_duration("ten").is_err());
    assert!(positive("0").is_err());
    assert!(positive("-1").is_err());
    assert!(positive("NaN").is_err());
    assert_eq!(positive("2.5"), Ok(2.5));
    assert!(concurrency("0").is_err());
    assert_eq!(parse_objective("efficiency"), Ok(Objective::Efficiency));
}
