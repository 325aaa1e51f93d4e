//! The load pipeline's first step: a valid model name, its files brought from the cloud repositories
//! or written from the load request, and the model folder the load reads.

use super::manager::ModelManager;
use crate::core::repository::SyncScope;
use crate::error::{Error, Result};
use crate::model_api::LoadOptions;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A model name is a folder name in a repository: nothing that could lead elsewhere, or that a file
/// system would refuse (NUL, control characters, a backslash, over 255 bytes).
pub(super) fn check_model_name(name: &str) -> Result<()> {
    let bad = name.is_empty()
        || name == "."
        || name.contains("..")
        || name.len() > 255
        || name.chars().any(|c| c == '/' || c == '\\' || c.is_control());
    if bad {
        return Err(Error::invalid(format!("'{}' is not a valid model name", name.escape_debug())));
    }
    Ok(())
}

impl ModelManager {
    /// Explicit model control: brings the model's files from the cloud repositories before a load
    /// that names no files.
    pub(super) async fn fetch_from_remotes(&self, name: &str, opts: &LoadOptions) -> Result<()> {
        if self.sync_on_load && opts.files.is_empty() && !self.remotes.is_empty() {
            let errors = self.sync_remotes(SyncScope::Models(std::slice::from_ref(&name.to_string()))).await;
            // Without a copy of the model anywhere, the store's error is the reason; with one (cached
            // earlier, or in a local repository) the load goes on from it.
            if let Some(e) = errors.into_iter().next() {
                if !self.scan().0.contains_key(name) {
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// The folder the load reads: the load request's files, or the model's folder in the repositories.
    pub(super) fn model_dir(&self, name: &str, files_dir: Option<&tempfile::TempDir>) -> Result<PathBuf> {
        let dir: PathBuf = match files_dir {
            Some(tmp) => tmp.path().join(name),
            None => {
                let (found, _) = self.scan();
                match found.get(name) {
                    Some(Ok(d)) => d.clone(),
                    Some(Err(e)) => return Err(e.clone()),
                    None => {
                        return Err(Error::not_found(format!(
                            "failed to load '{name}', no model folder of that name in the model repositories"
                        )))
                    }
                }
            }
        };
        // A cloud repository's view links each model to its current download; the load reads that
        // download, so a newer one switched in meanwhile cannot mix with it.
        Ok(match self.remotes.iter().any(|r| dir.parent() == Some(r.local_dir())) {
            true => std::fs::canonicalize(&dir).unwrap_or(dir),
            false => dir,
        })
    }
}

/// Files from the load API live in a private temporary folder for the model's lifetime (none without
/// files); they need the request's configuration too.
pub(super) fn request_files(name: &str, opts: &LoadOptions) -> Result<Option<Arc<tempfile::TempDir>>> {
    if opts.files.is_empty() {
        return Ok(None);
    }
    if opts.config_json.is_none() {
        return Err(Error::invalid(format!(
            "loading model '{name}' from file parameters requires the 'config' parameter too"
        )));
    }
    Ok(Some(Arc::new(write_files(name, &opts.files)?)))
}

/// `msg` without the folder `hide` (a load request's private files): paths show relative to it.
pub(super) fn scrub(hide: Option<&str>, msg: &str) -> String {
    match hide {
        Some(prefix) => msg.replace(prefix, ""),
        None => msg.to_string(),
    }
}

/// Longest name of one folder or file in a `file:` parameter (common filesystems' limit).
const MAX_FILE_NAME_BYTES: usize = 255;
/// Longest `file:` path, and deepest nesting, so the full path stays far below PATH_MAX.
const MAX_FILE_PATH_BYTES: usize = 1024;
const MAX_FILE_PATH_DEPTH: usize = 16;

/// Checks the names of a load request's `file:` parameters: relative paths inside the model folder,
/// each name short enough for the filesystem, no NUL, and no two naming the same file or a file and a
/// folder at once (`1` and `1/model.onnx`). Every problem is the client's (400), and no message shows a
/// server path.
fn check_file_names(files: &[(String, Vec<u8>)]) -> Result<Vec<PathBuf>> {
    let bad = |rel: &str, why: &str| {
        Error::invalid(format!("file parameter 'file:{}' {why}", crate::model_config::paths::printable(rel)))
    };
    let mut out = Vec::with_capacity(files.len());
    for (rel, _) in files {
        if rel.is_empty() {
            return Err(bad(rel, "has no path; name a file inside the model folder, such as 'file:1/model.onnx'"));
        }
        if rel.contains('\0') {
            return Err(bad(rel, "contains a NUL character"));
        }
        if rel.len() > MAX_FILE_PATH_BYTES {
            return Err(bad(rel, &format!("is longer than {MAX_FILE_PATH_BYTES} bytes")));
        }
        let path = Path::new(rel);
        let mut clean = PathBuf::new();
        for c in path.components() {
            match c {
                std::path::Component::Normal(part) if part.len() > MAX_FILE_NAME_BYTES => {
                    return Err(bad(rel, &format!("has a name longer than {MAX_FILE_NAME_BYTES} bytes")))
                }
                std::path::Component::Normal(part) => clean.push(part),
                std::path::Component::CurDir => {}
                _ => return Err(bad(rel, "must be a relative path inside the model folder")),
            }
        }
        if clean.as_os_str().is_empty() {
            return Err(bad(rel, "has no file name"));
        }
        if clean.components().count() > MAX_FILE_PATH_DEPTH {
            return Err(bad(rel, &format!("is nested deeper than {MAX_FILE_PATH_DEPTH} folders")));
        }
        out.push(clean);
    }
    // A file may not also be another file's folder, and two names may not denote one file.
    for (i, a) in out.iter().enumerate() {
        for (j, b) in out.iter().enumerate() {
            if i == j {
                continue;
            }
            if a == b && i < j {
                return Err(Error::invalid(format!(
                    "file parameters 'file:{}' and 'file:{}' name the same file",
                    crate::model_config::paths::printable(&files[i].0),
                    crate::model_config::paths::printable(&files[j].0)
                )));
            }
            if b.starts_with(a) && a != b {
                return Err(Error::invalid(format!(
                    "file parameters 'file:{}' and 'file:{}' collide: '{}' cannot be both a file and a folder",
                    crate::model_config::paths::printable(&files[i].0),
                    crate::model_config::paths::printable(&files[j].0),
                    crate::model_config::paths::printable(&a.display().to_string())
                )));
            }
        }
    }
    Ok(out)
}

/// Writes load-API model files into a fresh temporary repository (names checked by
/// [`check_file_names`]). A failure to write is the server's, reported without its paths.
fn write_files(name: &str, files: &[(String, Vec<u8>)]) -> Result<tempfile::TempDir> {
    let names = check_file_names(files)?;
    let tmp = tempfile::Builder::new()
        .prefix("tritonrs-model-")
        .tempdir()
        .map_err(|e| Error::internal(format!("cannot create a temporary folder for model files: {e}")))?;
    let root = tmp.path().join(name);
    for (rel, (shown, data)) in names.iter().zip(files) {
        let path = root.join(rel);
        let fail = |e: std::io::Error| {
            Error::internal(format!(
                "cannot write the file of parameter 'file:{}': {e}",
                crate::model_config::paths::printable(shown)
            ))
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(fail)?;
        }
        std::fs::write(&path, data).map_err(fail)?;
    }
    Ok(tmp)
}
