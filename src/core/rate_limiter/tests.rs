use super::*;

fn key(name: &str) -> ResourceKey {
    ResourceKey { name: name.into(), device: None }
}

fn needs(r: &[(&str, u32)], priority: u32) -> Needs {
    Needs { resources: r.iter().map(|(n, c)| (key(n), *c)).collect(), priority }
}

#[test]
fn flags_parse() {
    assert!(parse_mode("execution_count").unwrap());
    assert!(!parse_mode("off").unwrap());
    assert!(parse_mode("on").is_err());
    assert_eq!(parse_resource("R1:4").unwrap(), ("R1".into(), 4, None));
    assert_eq!(parse_resource("R1:4:1").unwrap(), ("R1".into(), 4, Some(1)));
    for bad in ["R1", ":4", "R1:x", "R1:4:x", "R1:4:1:2"] {
        assert!(parse_resource(bad).is_err(), "{bad}");
    }
}

#[test]
fn pools_grow_to_the_largest_need_unless_fixed() {
    let mut p = Pools::new(&[]);
    p.register(&needs(&[("R", 2)], 1)).unwrap();
    p.register(&needs(&[("R", 1)], 1)).unwrap();
    assert_eq!(p.size[&key("R")], 2);
    let mut fixed = Pools::new(&[("R".into(), 1, None)]);
    assert!(fixed.register(&needs(&[("R", 2)], 1)).is_err());
    fixed.register(&needs(&[("R", 1)], 1)).unwrap();
    assert_eq!(fixed.size[&key("R")], 1);
}

#[test]
fn holders_exclude_each_other_and_release_lets_the_next_in() {
    let mut p = Pools::new(&[]);
    let n = needs(&[("R", 1)], 1);
    p.register(&n).unwrap();
    let a = p.enqueue(n.clone());
    assert!(p.try_acquire(a));
    let b = p.enqueue(n.clone());
    assert!(!p.try_acquire(b));
    p.release(&n);
    assert!(p.try_acquire(b));
}

#[test]
fn lower_priority_values_go_first_among_waiters_that_fit() {
    let mut p = Pools::new(&[]);
    let big = needs(&[("R", 2)], 1);
    let small_low = needs(&[("R", 1)], 5);
    let small_high = needs(&[("R", 1)], 2);
    p.register(&big).unwrap();
    let hold = p.enqueue(small_low.clone());
    assert!(p.try_acquire(hold)); // 1 of 2 in use
    let t_big = p.enqueue(big.clone()); // priority 1 but does not fit now
    let t_low = p.enqueue(small_low.clone());
    let t_high = p.enqueue(small_high.clone());
    assert!(!p.try_acquire(t_big));
    assert!(!p.try_acquire(t_low), "a higher-priority waiter that fits goes first");
    assert!(p.try_acquire(t_high));
    p.release(&small_high);
    p.release(&small_low);
    assert!(p.try_acquire(t_big), "once everything is free the big one fits and has the best priority");
}
