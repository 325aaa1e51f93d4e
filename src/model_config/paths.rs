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
mod tests;
