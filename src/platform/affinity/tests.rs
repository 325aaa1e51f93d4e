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

/// The calling thread's scheduling policy, field 41 of /proc/thread-self/stat (after the name).
fn policy_of_this_thread() -> u32 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    let after_name = stat.rsplit_once(')').unwrap().1;
    // Field 3 (the state) is the first after the name, so field 41 is the 39th from there.
    after_name.split_whitespace().nth(38).unwrap().parse().unwrap()
}

#[test]
fn a_thread_made_batch_has_the_batch_policy_and_the_others_keep_theirs() {
    let before = policy_of_this_thread();
    let (batch, child) = std::thread::spawn(|| {
        batch_current_thread().unwrap();
        // A thread it starts inherits the policy.
        (policy_of_this_thread(), std::thread::spawn(policy_of_this_thread).join().unwrap())
    })
    .join()
    .unwrap();
    assert_eq!((batch, child), (libc::SCHED_BATCH as u32, libc::SCHED_BATCH as u32));
    assert_eq!(policy_of_this_thread(), before, "only the calling thread changes");
}
