//! Configurations out of a tuning run: `--export DIR` lays them out as Model Analyzer does (the best one
//! as `DIR/<model>/config.pbtxt`, every variant as `DIR/<model>_config_<n>/config.pbtxt`), each folder
//! also linking the model's files so DIR is a repository that serves as it is; `--apply` writes the
//! best one into the model's own folder after keeping the old file.

use super::results::TuneReport;
use std::io;
use std::path::{Path, PathBuf};

/// The variant's configuration under another model name (a folder's config names its folder).
fn renamed(config_pbtxt: &str, to: &str) -> String {
    let mut out = String::with_capacity(config_pbtxt.len() + to.len());
    let mut done = false;
    for line in config_pbtxt.lines() {
        let t = line.trim_start();
        if !done && (t.starts_with("name:") || t.starts_with("name :")) && !line.starts_with(char::is_whitespace) {
            out.push_str(&format!("name: \"{to}\""));
            done = true;
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    if !done {
        out.insert_str(0, &format!("name: \"{to}\"\n"));
    }
    out
}

/// Links every entry of `model_dir` but its config.pbtxt into `dest` (absolute links), so the exported
/// folder serves the same model files.
fn link_model_files(model_dir: &Path, dest: &Path) -> io::Result<()> {
    let source = std::fs::canonicalize(model_dir)?;
    for entry in std::fs::read_dir(&source)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == "config.pbtxt" {
            continue;
        }
        let link = dest.join(&name);
        if std::fs::symlink_metadata(&link).is_ok() {
            std::fs::remove_file(&link).or_else(|_| std::fs::remove_dir_all(&link))?;
        }
        std::os::unix::fs::symlink(entry.path(), &link)?;
    }
    Ok(())
}

fn write_folder(dir: &Path, name: &str, config: &str, model_dir: Option<&Path>) -> io::Result<PathBuf> {
    let folder = dir.join(name);
    std::fs::create_dir_all(&folder)?;
    let path = folder.join("config.pbtxt");
    std::fs::write(&path, config)?;
    if let Some(m) = model_dir {
        link_model_files(m, &folder)?;
    }
    Ok(path)
}

/// Writes the export folder; `model_dirs` gives each model's folder in the repository (to link its
/// files). Returns the files written.
pub fn export(report: &TuneReport, dir: &Path, model_dirs: &[(String, PathBuf)]) -> io::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let dir_of = |m: &str| model_dirs.iter().find(|(n, _)| n == m).map(|(_, d)| d.as_path());
    for v in report.variants.iter().filter(|v| v.error.is_none() && !v.points.is_empty()) {
        written.push(write_folder(dir, &v.name, &renamed(&v.config_pbtxt, &v.name), dir_of(&v.model))?);
    }
    for (model, best) in &report.best {
        let Some(v) = best.and_then(|i| report.variants.get(i)) else { continue };
        written.push(write_folder(dir, model, &renamed(&v.config_pbtxt, model), dir_of(model))?);
    }
    Ok(written)
}

/// Writes `config_pbtxt` as `model_dir/config.pbtxt`, first renaming the old one to
/// `config.pbtxt.bak-<unix seconds>`. Returns the backup's path, if there was a file to keep.
pub fn apply(model_dir: &Path, config_pbtxt: &str) -> io::Result<Option<PathBuf>> {
    let path = model_dir.join("config.pbtxt");
    let backup = if path.exists() {
        let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let mut b = model_dir.join(format!("config.pbtxt.bak-{secs}"));
        let mut n = 1;
        while b.exists() {
            b = model_dir.join(format!("config.pbtxt.bak-{secs}-{n}"));
            n += 1;
        }
        std::fs::copy(&path, &b)?;
        Some(b)
    } else {
        None
    };
    // Written beside and renamed over, so a crash leaves the old file or the new one, never half.
    let tmp = model_dir.join(".config.pbtxt.tune");
    std::fs::write(&tmp, config_pbtxt)?;
    std::fs::rename(&tmp, &path)?;
    Ok(backup)
}

#[cfg(test)]
mod tests;
