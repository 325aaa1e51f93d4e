//! The built-in `checksum` repository agent: before a model loads, each file its parameters name must
//! have the digest they give. Parameters are Triton's checksum agent's, `MD5:<relative path>` = hex
//! digest, plus `SHA256:<relative path>`. A missing file, a mismatch, a path outside the model's folder
//! or an unknown algorithm fails the load with the file and, for a mismatch, both digests. The agent
//! reads the files where the agents before it left them and never moves them.

use crate::error::{Error, Result};
use crate::model_api::agents::{AgentAction, AgentModel, RepoAgent};
use md5::Md5;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The agent; one serves every model.
pub struct Checksum;

/// A digest algorithm the parameters may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Algorithm {
    Md5,
    Sha256,
}

impl Algorithm {
    fn parse(s: &str) -> Option<Algorithm> {
        match s.to_ascii_uppercase().as_str() {
            "MD5" => Some(Algorithm::Md5),
            "SHA256" | "SHA-256" => Some(Algorithm::Sha256),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Algorithm::Md5 => "MD5",
            Algorithm::Sha256 => "SHA256",
        }
    }

    /// The digest of a file, read in blocks (models are large), as lower-case hex.
    fn file_digest(self, path: &Path) -> std::io::Result<String> {
        fn run<D: Digest>(mut file: std::fs::File) -> std::io::Result<String> {
            let mut d = D::new();
            let mut buf = vec![0u8; 1 << 20];
            loop {
                match file.read(&mut buf)? {
                    0 => break,
                    n => d.update(&buf[..n]),
                }
            }
            Ok(hex::encode(d.finalize()))
        }
        let file = std::fs::File::open(path)?;
        match self {
            Algorithm::Md5 => run::<Md5>(file),
            Algorithm::Sha256 => run::<Sha256>(file),
        }
    }
}

/// One file to check.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Check {
    algorithm: Algorithm,
    /// As the parameter names it, relative to the model's folder.
    file: String,
    /// Lower-case hex.
    expected: String,
}

/// Reads the parameters; every one must be a check.
fn checks(parameters: &[(String, String)]) -> Result<Vec<Check>> {
    let mut out = Vec::with_capacity(parameters.len());
    for (key, value) in parameters {
        let Some((algo, file)) = key.split_once(':') else {
            return Err(Error::invalid(format!(
                "checksum agent: parameter '{key}' is not of the form 'MD5:<file>' or 'SHA256:<file>'"
            )));
        };
        let algorithm = Algorithm::parse(algo).ok_or_else(|| {
            Error::invalid(format!("checksum agent: unknown algorithm '{algo}' in '{key}' (MD5 and SHA256 are known)"))
        })?;
        let expected = value.trim().to_ascii_lowercase();
        let len = match algorithm {
            Algorithm::Md5 => 32,
            Algorithm::Sha256 => 64,
        };
        if expected.len() != len || !expected.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::invalid(format!(
                "checksum agent: the {} digest of '{file}' must be {len} hex digits, not '{value}'",
                algorithm.name()
            )));
        }
        out.push(Check { algorithm, file: file.to_string(), expected });
    }
    Ok(out)
}

impl RepoAgent for Checksum {
    fn model(
        &self,
        _name: &str,
        location: &Path,
        parameters: &[(String, String)],
        _config_json: &str,
    ) -> Result<Box<dyn AgentModel>> {
        Ok(Box::new(ChecksumModel { location: location.to_path_buf(), checks: checks(parameters)? }))
    }
}

struct ChecksumModel {
    location: PathBuf,
    checks: Vec<Check>,
}

impl ChecksumModel {
    fn verify(&self) -> Result<()> {
        for c in &self.checks {
            let path = crate::model_config::paths::confined(&self.location, &c.file, "checksum agent parameter")?;
            let actual = c.algorithm.file_digest(&path).map_err(|e| {
                Error::invalid(format!(
                    "checksum agent: cannot read '{}' to check its {}: {e}",
                    c.file,
                    c.algorithm.name()
                ))
            })?;
            if actual != c.expected {
                return Err(Error::invalid(format!(
                    "checksum agent: the {} digest of '{}' is {actual}, but the configuration expects {}",
                    c.algorithm.name(),
                    c.file,
                    c.expected
                )));
            }
        }
        Ok(())
    }
}

impl AgentModel for ChecksumModel {
    fn action(&mut self, action: AgentAction) -> Result<()> {
        match action {
            AgentAction::Load => self.verify(),
            _ => Ok(()),
        }
    }

    fn location(&self) -> PathBuf {
        self.location.clone()
    }
}

#[cfg(test)]
mod tests;
