//! Unit tests of `model_config/paths.rs`.

use super::*;

#[test]
fn names_inside_the_folder_resolve() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tmp.path().join("sub")).unwrap();
    std::fs::write(tmp.path().join("sub/labels.txt"), "a\n").unwrap();
    assert_eq!(confined(tmp.path(), "sub/labels.txt", "f").unwrap(), tmp.path().join("sub/labels.txt"));
    assert_eq!(confined(tmp.path(), "./missing.txt", "f").unwrap(), tmp.path().join("missing.txt"));
}

#[test]
fn absolute_dotdot_nul_and_empty_names_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, why) in
        [("/etc/passwd", "absolute"), ("../x", "'..'"), ("a/../../x", "'..'"), ("a\0b", "NUL"), ("", "empty")]
    {
        let e = confined(tmp.path(), name, "output.label_filename").unwrap_err();
        assert!(e.message.contains(why) && e.message.contains("output.label_filename"), "{name}: {e}");
    }
}

#[cfg(unix)]
#[test]
fn links_leading_out_are_refused_and_links_inside_or_to_the_folder_are_not() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "x").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(model.join("real.txt"), "a").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret"), model.join("out.txt")).unwrap();
    std::os::unix::fs::symlink(model.join("real.txt"), model.join("in.txt")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("gone"), model.join("dangling")).unwrap();
    let e = confined(&model, "out.txt", "f").unwrap_err();
    assert!(e.message.contains("symbolic link") && !e.message.contains("secret"), "{e}");
    assert!(confined(&model, "dangling", "f").is_err());
    assert!(confined(&model, "in.txt", "f").is_ok());
    // The folder itself may be a link to elsewhere.
    let linked = tmp.path().join("linked");
    std::os::unix::fs::symlink(&model, &linked).unwrap();
    assert!(confined(&linked, "real.txt", "f").is_ok());
}
