//! File names from model configurations, confined to the folder they are named in.
//!
//! `Path::join` with an absolute path replaces the base, and `..` walks out of it, so a label file
//! named `/etc/passwd` (from a load request's `config`) would be read and served. Every caller that
//! turns configuration text into a path goes through [`confined`].

use crate::error::{Error, Result};
use std::path::{Component, Path, PathBuf};

/// Resolves `name` (the value of configuration field `field`) inside `base`.
///
/// Refused, with a reason naming the field: an empty name, a NUL byte, an absolute path, any `..`,
/// and a name that exists but leads outside `base` through a symbolic link. `base` itself may be a
/// symbolic link (a model or version folder kept elsewhere). A name that does not exist is returned
/// as is, so the caller reports it as missing. The reason never shows where a link points.
pub fn confined(base: &Path, name: &str, field: &str) -> Result<PathBuf> {
    let refuse = |why: &str| Error::invalid(format!("field '{field}': '{}' {why}", printable(name)));
    if name.is_empty() {
        return Err(Error::invalid(format!("field '{field}': the file name is empty")));
    }
    if name.contains('\0') {
        return Err(refuse("contains a NUL character"));
    }
    let rel = Path::new(name);
    if rel.is_absolute() {
        return Err(refuse("must be a path relative to its folder, not an absolute path"));
    }
    if rel.components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir)) {
        return Err(refuse("must stay inside its folder ('..' is not allowed)"));
    }
    let path = base.join(rel);
    // Only an existing name can lead anywhere; a missing one is the caller's "not found".
    if std::fs::symlink_metadata(&path).is_err() {
        return Ok(path);
    }
    let inside = match (base.canonicalize(), path.canonicalize()) {
        (Ok(b), Ok(p)) => p.starts_with(&b),
        // A dangling link: reading it fails anyway, but it may not be followed later either.
        (Ok(_), Err(_)) => false,
        (Err(_), _) => true,
    };
    if !inside {
        return Err(refuse("leads outside its folder through a symbolic link"));
    }
    Ok(path)
}

/// The name as it may appear in a message: control characters escaped, at most 200 characters.
pub fn printable(name: &str) -> String {
    let mut out: String = name.chars().take(200).flat_map(char::escape_debug).collect();
    if name.chars().count() > 200 {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
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
}
