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

/// The calling thread's scheduling policy (asked of the kernel: qemu's user mode, where the aarch64
/// tests run, makes up /proc/self/stat's later fields).
fn policy_of_this_thread() -> i32 {
    // SAFETY: pid 0 is the calling thread; the call takes no pointer.
    unsafe { libc::sched_getscheduler(0) }
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
    assert_eq!((batch, child), (libc::SCHED_BATCH, libc::SCHED_BATCH));
    assert_eq!(policy_of_this_thread(), before, "only the calling thread changes");
}

#[test]
fn a_thread_started_by_a_pinned_batch_thread_gets_the_defaults_back() {
    let defaults = ThreadDefaults::of_current_thread().unwrap();
    let before = (policy_of_this_thread(), cores_of_this_thread());
    let (inherited, restored) = std::thread::spawn(move || {
        batch_current_thread().unwrap();
        pin_current_thread(&[0]).unwrap();
        std::thread::spawn(move || {
            let inherited = (policy_of_this_thread(), cores_of_this_thread());
            defaults.restore_on_current_thread().unwrap();
            (inherited, (policy_of_this_thread(), cores_of_this_thread()))
        })
        .join()
        .unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(inherited, (libc::SCHED_BATCH, 1), "a new thread inherits its creator's setting");
    assert_eq!(restored, before);
}

/// How many cores the calling thread may run on.
fn cores_of_this_thread() -> u32 {
    ThreadDefaults::of_current_thread().unwrap().core_count()
}
