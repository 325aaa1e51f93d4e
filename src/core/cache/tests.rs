use super::*;
use crate::model_api::types::DataType;

fn t(name: &str, bytes: usize) -> Tensor {
    Tensor::new(name, DataType::Uint8, vec![bytes as i64], vec![7u8; bytes])
}

#[test]
fn config_parses_local_size_only() {
    assert_eq!(parse_cache_config(&[]).unwrap(), None);
    assert_eq!(parse_cache_config(&["local,size=1048576".into()]).unwrap(), Some(1 << 20));
    assert_eq!(parse_cache_config(&["local,size=0".into()]).unwrap(), None);
    assert!(parse_cache_config(&["redis,host=x".into()]).is_err());
    assert!(parse_cache_config(&["local,size=lots".into()]).is_err());
    assert!(parse_cache_config(&["local".into()]).is_err());
}

#[test]
fn keys_depend_on_everything_that_makes_a_request() {
    let base = key("m", 1, &[t("A", 4), t("B", 2)], &["O".into()]).unwrap();
    assert_eq!(base, key("m", 1, &[t("B", 2), t("A", 4)], &["O".into()]).unwrap());
    assert_ne!(base, key("m", 2, &[t("A", 4), t("B", 2)], &["O".into()]).unwrap());
    assert_ne!(base, key("n", 1, &[t("A", 4), t("B", 2)], &["O".into()]).unwrap());
    assert_ne!(base, key("m", 1, &[t("A", 4), t("B", 3)], &["O".into()]).unwrap());
    assert_ne!(base, key("m", 1, &[t("A", 4), t("B", 2)], &["P".into()]).unwrap());
    let mut other = t("A", 4);
    other.data = vec![8u8; 4].into();
    assert_ne!(base, key("m", 1, &[other, t("B", 2)], &["O".into()]).unwrap());
}

#[test]
fn lru_evicts_the_least_recently_used_within_the_byte_bound() {
    let one = entry_bytes(&[t("O", 100)]);
    let c = ResponseCache::new(one * 2);
    c.insert((1, 1), vec![t("O", 100)]);
    c.insert((2, 2), vec![t("O", 100)]);
    assert!(c.lookup(&(1, 1)).is_some()); // 1 is now the most recent
    c.insert((3, 3), vec![t("O", 100)]); // evicts 2
    assert!(c.lookup(&(2, 2)).is_none());
    assert!(c.lookup(&(1, 1)).is_some() && c.lookup(&(3, 3)).is_some());
    let s = c.summary();
    assert_eq!((s.entries, s.used_bytes, s.evictions), (2, one * 2, 1));
    // Too big for the whole cache: not stored, nothing evicted.
    c.insert((4, 4), vec![t("O", 10_000)]);
    assert_eq!(c.summary().entries, 2);
}

#[test]
fn keys_keep_fields_apart() {
    // The same bytes split differently between fields are different requests.
    let a = key("m", 1, &[t("A", 4)], &["AB".into()]).unwrap();
    let b = key("m", 1, &[t("A", 4)], &["A".into(), "B".into()]).unwrap();
    assert_ne!(a, b);
    assert_ne!(key("mA", 1, &[], &[]).unwrap(), key("m", 1, &[], &["A".into()]).unwrap());
}
