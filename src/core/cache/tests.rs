use super::*;
use crate::model_api::types::DataType;

fn t(name: &str, bytes: usize) -> Tensor {
    Tensor::new(name, DataType::Uint8, vec![bytes as i64], vec![7u8; bytes])
}

fn spec(values: &[&str]) -> Result<Option<CacheSpec>> {
    parse_cache_config(&values.iter().map(|s| s.to_string()).collect::<Vec<_>>())
}

#[test]
fn config_names_one_cache_and_its_settings() {
    assert_eq!(spec(&[]).unwrap(), None);
    let local = spec(&["local,size=1048576"]).unwrap().unwrap();
    assert_eq!((local.name.as_str(), local.local_size().unwrap()), ("local", Some(1 << 20)));
    assert_eq!(spec(&["local,size=0"]).unwrap().unwrap().local_size().unwrap(), None);
    assert!(spec(&["local,size=lots"]).unwrap().unwrap().local_size().is_err());
    assert!(spec(&["local,colour=red"]).unwrap().unwrap().local_size().is_err());
    assert!(spec(&["local"]).is_err());
    assert!(spec(&["local,size"]).is_err());
    assert!(spec(&["../x,size=1"]).is_err());
    assert!(spec(&["local,size=1", "redis,host=x"]).is_err());
    // Any other name is a library's, with settings it parses itself, handed over as JSON strings.
    let redis = spec(&["redis,host=localhost", "redis,port=6379"]).unwrap().unwrap();
    assert_eq!(redis.name, "redis");
    let json: serde_json::Value = serde_json::from_str(&redis.config_json()).unwrap();
    assert_eq!(json, serde_json::json!({"host": "localhost", "port": "6379"}));
}

#[test]
fn packed_entries_unpack_to_the_same_outputs_and_reject_damage() {
    let mut shaped = t("OUT", 6);
    shaped.shape = vec![2, 3];
    let bytes = Tensor::new("S", DataType::Bytes, vec![1], vec![3, 0, 0, 0, b'a', b'b', b'c']);
    let packed = external::pack(&[shaped.clone(), bytes]).unwrap();
    let back = external::unpack(&packed).unwrap();
    assert_eq!(back.len(), 2);
    assert_eq!((back[0].name.as_str(), &back[0].shape, back[0].datatype), ("OUT", &vec![2, 3], DataType::Uint8));
    assert_eq!(back[0].data.to_host().unwrap().as_ref(), &[7u8; 6]);
    assert_eq!((back[1].datatype, back[1].data.len()), (DataType::Bytes, 7));
    // The layout tritonserver uses: output count, then each output's size before it.
    assert_eq!(&packed[..4], &2u32.to_le_bytes());
    for cut in [0, 3, 11, packed.len() - 1] {
        assert!(external::unpack(&packed[..cut]).is_err(), "cut at {cut}");
    }
    let mut longer = packed.clone();
    longer.push(0);
    assert!(external::unpack(&longer).is_err());
    assert_eq!(external::key_string(&(1, 2)), "00000000000000010000000000000002");
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
    assert!(c.lookup_now(&(1, 1)).is_some()); // 1 is now the most recent
    c.insert((3, 3), vec![t("O", 100)]); // evicts 2
    assert!(c.lookup_now(&(2, 2)).is_none());
    assert!(c.lookup_now(&(1, 1)).is_some() && c.lookup_now(&(3, 3)).is_some());
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
