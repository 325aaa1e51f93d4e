//! The cloud repository forms `--model-repository` accepts, as tritonserver spells them:
//!
//! - `s3://bucket/path`; for S3-compatible servers `s3://host:port/bucket/path` (HTTP) and
//!   `s3://https://host:port/bucket/path` (HTTPS; `s3://http://...` also names HTTP);
//! - `gs://bucket/path`;
//! - `as://account/container/path`.

use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cloud {
    S3,
    Gcs,
    Azure,
}

impl Cloud {
    /// The key of this cloud in tritonserver's credential file.
    pub fn key(self) -> &'static str {
        match self {
            Cloud::S3 => "s3",
            Cloud::Gcs => "gs",
            Cloud::Azure => "as",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudUrl {
    pub cloud: Cloud,
    /// The repository as given, without a trailing `/`: what messages and metrics name.
    pub url: String,
    /// S3 and GCS: the bucket; Azure: the container.
    pub bucket: String,
    /// Azure: the storage account.
    pub account: Option<String>,
    /// S3-compatible servers: `http://host:port` or `https://host:port`.
    pub endpoint: Option<String>,
    /// The repository's folder in the bucket, without leading or trailing `/` (empty: the bucket's root).
    pub prefix: String,
}

/// Whether `s` names a cloud repository rather than a local path.
pub fn is_cloud(s: &str) -> bool {
    ["s3://", "gs://", "as://"].iter().any(|p| s.starts_with(p))
}

pub fn parse(s: &str) -> Result<CloudUrl> {
    let url = s.trim_end_matches('/').to_string();
    let bad = |why: &str| Err(Error::invalid(format!("'{s}' is not a valid cloud model repository: {why}")));
    let (cloud, rest) = if let Some(r) = url.strip_prefix("s3://") {
        (Cloud::S3, r)
    } else if let Some(r) = url.strip_prefix("gs://") {
        (Cloud::Gcs, r)
    } else if let Some(r) = url.strip_prefix("as://") {
        (Cloud::Azure, r)
    } else {
        return bad("expected s3://, gs:// or as://");
    };
    let mut endpoint = None;
    let mut account = None;
    let mut rest = rest;
    if cloud == Cloud::S3 {
        let scheme = ["https://", "http://"].into_iter().find(|p| rest.starts_with(p));
        if let Some(p) = scheme {
            rest = &rest[p.len()..];
        }
        let (first, after) = rest.split_once('/').unwrap_or((rest, ""));
        // A first part with a port is a server of our own; a scheme says so too.
        if scheme.is_some() || first.contains(':') {
            if first.is_empty() {
                return bad("the S3 server's host is empty");
            }
            endpoint = Some(format!("{}{first}", scheme.unwrap_or("http://")));
            rest = after;
        }
    }
    if cloud == Cloud::Azure {
        let (acct, after) = rest.split_once('/').unwrap_or((rest, ""));
        if acct.is_empty() {
            return bad("the storage account is empty (expected as://account/container/path)");
        }
        account = Some(acct.to_string());
        rest = after;
    }
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return bad(if cloud == Cloud::Azure { "the container is empty" } else { "the bucket is empty" });
    }
    let prefix = prefix.trim_matches('/');
    if prefix.split('/').any(|p| p == "." || p == "..") || prefix.contains("//") {
        return bad("the path may not hold '.', '..' or empty parts");
    }
    Ok(CloudUrl { cloud, url: url.clone(), bucket: bucket.to_string(), account, endpoint, prefix: prefix.to_string() })
}

#[cfg(test)]
mod tests;
