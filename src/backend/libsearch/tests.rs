use super::*;
use std::cell::Cell;

fn touch(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A loader that takes a file holding "ok" and refuses any other, as dlopen refuses a non-library.
fn fake_load(p: &Path) -> std::result::Result<String, String> {
    match std::fs::read_to_string(p).unwrap_or_default().as_str() {
        "ok" => Ok(p.display().to_string()),
        _ => Err("not a library".into()),
    }
}

#[test]
fn versioned_files_follow_the_plain_name_newest_first() {
    let dir = tempfile::tempdir().unwrap();
    for f in ["libopenvino_c.so.2540", "libopenvino_c.so.2641", "libopenvino_c.so.x", "libopenvino.so.2641"] {
        std::fs::write(dir.path().join(f), b"").unwrap();
    }
    let names: Vec<String> = libs_in(dir.path(), "libopenvino_c.so")
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["libopenvino_c.so", "libopenvino_c.so.2641", "libopenvino_c.so.2540"]);
}

#[test]
fn stages_are_tried_in_order_and_a_later_one_is_not_worked_out_when_an_earlier_one_loads() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a/lib.so"), dir.path().join("b/lib.so"));
    touch(&a, "garbage");
    touch(&b, "ok");
    let asked = Cell::new(false);
    let stages = vec![
        Stage::new("first", || vec![dir.path().join("missing/lib.so"), a.clone()]),
        Stage::new("second", || vec![a.clone(), b.clone()]),
        Stage::new("third", || {
            asked.set(true);
            Vec::new()
        }),
    ];
    let found = first_loadable(stages, fake_load).unwrap();
    assert_eq!((found.path, found.origin.as_str()), (b, "second"));
    assert!(!asked.get(), "the third stage was worked out although the second loaded");

    // Nothing loads: every place once, with why.
    let stages = vec![Stage::new("only", || vec![a.clone(), a.clone(), dir.path().join("none.so")])];
    let tried = first_loadable(stages, fake_load).unwrap_err();
    assert_eq!(tried.len(), 2, "{tried:?}");
    assert!(tried[0].ends_with("(not a library)") && tried[1].ends_with("(not found)"), "{tried:?}");
}

#[test]
fn the_checkout_is_found_above_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    let checkout = dir.path().join("checkout");
    std::fs::create_dir_all(checkout.join(".ort")).unwrap();
    std::fs::create_dir_all(checkout.join("target/release")).unwrap();
    let exe = checkout.join("target/release/tritonrs");
    assert_eq!(above(&exe, ".ort"), Some(checkout.join(".ort")));
    assert_eq!(above(&exe, ".no-such-folder-here"), None);
}

#[test]
fn the_pinned_onnxruntime_version_is_read_from_the_requirements() {
    let v = pinned_version("onnxruntime").expect("onnxruntime is pinned in scripts/requirements.txt");
    assert!(v.split('.').all(|n| n.parse::<u32>().is_ok()) && v.starts_with("1."), "{v}");
    // Not a package whose name only starts the same way.
    assert_ne!(pinned_version("onnxruntime"), pinned_version("onnxruntime-extensions"));
    assert_eq!(pinned_version("no-such-package"), None);
}

#[test]
fn a_command_past_its_time_is_killed_and_one_in_time_gives_its_output() {
    let started = Instant::now();
    let mut sleeper = Command::new("sh");
    sleeper.args(["-c", "sleep 30"]);
    assert!(output_within(sleeper, Duration::from_millis(200)).unwrap().is_none());
    // Killed, not waited for (generous: the point is that it is not 30 s).
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());

    let mut echo = Command::new("sh");
    echo.args(["-c", "echo hello; exit 3"]);
    let (status, out) = output_within(echo, Duration::from_secs(20)).unwrap().expect("in time");
    assert_eq!((status.code(), out.as_slice()), (Some(3), &b"hello\n"[..]));

    // A missing program: an error (under qemu-user, whose vfork is a fork, a child exiting 127).
    match output_within(Command::new("/nonexistent/python3"), Duration::from_secs(20)) {
        Err(_) => {}
        Ok(Some((status, _))) => assert!(!status.success()),
        Ok(None) => panic!("a missing program timed out"),
    }
}
