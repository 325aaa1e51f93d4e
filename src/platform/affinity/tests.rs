use super::*;

#[test]
fn cpu_lists_parse_as_linux_writes_them() {
    assert_eq!(parse_cpu_list("0-3,5").unwrap(), vec![0, 1, 2, 3, 5]);
    assert_eq!(parse_cpu_list("1").unwrap(), vec![1]);
    assert!(parse_cpu_list("3-1").is_err());
    assert!(parse_cpu_list("x").is_err());
    assert!(parse_cpu_list("99999").is_err());
}

#[test]
fn policies_merge_and_refuse_unknown_settings() {
    let p = parse_host_policies(&["a,cpu-cores=2-3".into(), "a,cpu-cores=0".into(), "b,cpu-cores=1".into()]).unwrap();
    assert_eq!(p["a"], vec![0, 2, 3]);
    assert_eq!(p["b"], vec![1]);
    let e = parse_host_policies(&["a,pinned-memory=1".into()]).unwrap_err();
    assert!(e.message.contains("unknown setting 'pinned-memory'"), "{}", e.message);
    assert!(parse_host_policies(&["a".into()]).is_err());
}
