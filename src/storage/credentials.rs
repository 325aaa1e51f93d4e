//! Credentials and clients for cloud repositories, found where tritonserver finds them.
//!
//! - **S3:** `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_DEFAULT_REGION` /
//!   `AWS_REGION`; without a key in the environment, the profile `AWS_PROFILE` (else `default`) of
//!   `~/.aws/credentials` (`AWS_SHARED_CREDENTIALS_FILE`), and the region of `~/.aws/config`
//!   (`AWS_CONFIG_FILE`).
//! - **GCS:** `GOOGLE_APPLICATION_CREDENTIALS` (a service-account or authorized-user file), else the
//!   application default credentials and the metadata server, as object_store resolves them.
//! - **Azure:** `AZURE_STORAGE_KEY` (tritonserver's name) or `AZURE_STORAGE_ACCOUNT_KEY`; the account
//!   is the URL's. `AZURE_STORAGE_USE_EMULATOR=true` talks to Azurite at `AZURITE_BLOB_STORAGE_URL`.
//! - **The credential file** (`--cloud-credential-path` / `TRITON_CLOUD_CREDENTIAL_PATH`), in
//!   tritonserver's JSON layout: per cloud, entries keyed by a URL prefix (`""` matches every
//!   repository); the longest key that begins the repository's URL wins, and its non-empty fields
//!   replace what the environment gave.

use super::listing::{FilteringConnector, Skipped};
use super::url::{Cloud, CloudUrl};
use crate::error::{Error, Result};
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// tritonserver's credential file.
#[derive(Debug, Default, Deserialize)]
pub struct CredentialFile {
    #[serde(default)]
    s3: BTreeMap<String, S3Credential>,
    #[serde(default)]
    gs: BTreeMap<String, String>,
    #[serde(default, rename = "as")]
    azure: BTreeMap<String, AzureCredential>,
}

#[derive(Debug, Default, Clone, Deserialize)]
struct S3Credential {
    #[serde(default)]
    secret_key: String,
    #[serde(default)]
    key_id: String,
    #[serde(default)]
    region: String,
    #[serde(default)]
    session_token: String,
    #[serde(default)]
    profile: String,
}

#[derive(Debug, Default, Clone, Deserialize)]
struct AzureCredential {
    #[serde(default)]
    account_str: String,
    #[serde(default)]
    account_key: String,
}

impl CredentialFile {
    /// Reads the file; a file that cannot be read or parsed is a start-up error (never its contents).
    pub fn load(path: &Path) -> Result<CredentialFile> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::invalid(format!("cannot read the cloud credential file '{}': {e}", path.display())))?;
        serde_json::from_str(&text).map_err(|e| {
            Error::invalid(format!(
                "the cloud credential file '{}' is not in tritonserver's layout (line {}, column {})",
                path.display(),
                e.line(),
                e.column()
            ))
        })
    }
}

/// The entry whose key is the longest prefix of `url`.
fn pick<'a, T>(map: &'a BTreeMap<String, T>, url: &str) -> Option<&'a T> {
    map.iter().filter(|(k, _)| url.starts_with(k.as_str())).max_by_key(|(k, _)| k.len()).map(|(_, v)| v)
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn home() -> Option<PathBuf> {
    env("HOME").map(PathBuf::from)
}

/// What an AWS profile holds, from the shared credentials and config files.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct AwsProfile {
    pub key_id: Option<String>,
    pub secret_key: Option<String>,
    pub session_token: Option<String>,
    pub region: Option<String>,
}

/// Reads profile `name` from `credentials` (section `[name]`) and `config` (section `[profile name]`,
/// or `[default]`); a missing file or section gives nothing.
pub fn aws_profile(name: &str, credentials: Option<&Path>, config: Option<&Path>) -> AwsProfile {
    let mut p = AwsProfile::default();
    let get = |ini: &ini::Ini, section: &str, key: &str| {
        ini.section(Some(section)).and_then(|s| s.get(key)).map(str::to_string)
    };
    if let Some(ini) = credentials.and_then(|f| ini::Ini::load_from_file(f).ok()) {
        p.key_id = get(&ini, name, "aws_access_key_id");
        p.secret_key = get(&ini, name, "aws_secret_access_key");
        p.session_token = get(&ini, name, "aws_session_token");
        p.region = get(&ini, name, "region");
    }
    if let Some(ini) = config.and_then(|f| ini::Ini::load_from_file(f).ok()) {
        let section = if name == "default" { "default".to_string() } else { format!("profile {name}") };
        p.region = p.region.or_else(|| get(&ini, &section, "region"));
    }
    p
}

fn profile_from_files(name: &str) -> AwsProfile {
    let credentials =
        env("AWS_SHARED_CREDENTIALS_FILE").map(PathBuf::from).or_else(|| home().map(|h| h.join(".aws/credentials")));
    let config = env("AWS_CONFIG_FILE").map(PathBuf::from).or_else(|| home().map(|h| h.join(".aws/config")));
    aws_profile(name, credentials.as_deref(), config.as_deref())
}

/// Bounded retries: a store that does not answer costs seconds, not minutes, and the next poll or load
/// tries again.
fn retry() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(5),
            base: 2.0,
        },
        max_retries: 3,
        retry_timeout: Duration::from_secs(30),
    }
}

/// Connecting is bounded tightly; a whole request (a model file's download) gets ten minutes.
fn client_options() -> ClientOptions {
    ClientOptions::new().with_connect_timeout(Duration::from_secs(10)).with_timeout(Duration::from_secs(600))
}

/// Builds the client for a repository. Nothing is contacted yet. Keys its listings leave out (see
/// [`super::listing`]) are added to `skipped`.
pub fn build_store(u: &CloudUrl, file: &CredentialFile, skipped: &Skipped) -> Result<Arc<dyn ObjectStore>> {
    // reqwest's TLS takes the process's rustls provider: ring, as everywhere else in tritonrs. An error
    // only says one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    match u.cloud {
        Cloud::S3 => s3_store(u, file, skipped),
        Cloud::Gcs => gcs_store(u, file, skipped),
        Cloud::Azure => azure_store(u, file, skipped),
    }
}

/// The error of a client that cannot be set up.
fn setup_failed(u: &CloudUrl, e: object_store::Error) -> Error {
    Error::invalid(format!("cannot set up the client for '{}': {e}", u.url))
}

/// The S3 client: keys from the environment, the credential file's entry, or an AWS profile.
fn s3_store(u: &CloudUrl, file: &CredentialFile, skipped: &Skipped) -> Result<Arc<dyn ObjectStore>> {
    let mut b = AmazonS3Builder::from_env()
        .with_client_options(client_options())
        .with_http_connector(FilteringConnector { skipped: skipped.clone() })
        .with_retry(retry())
        .with_bucket_name(&u.bucket);
    let entry = pick(&file.s3, &u.url).cloned().unwrap_or_default();
    // Without a key in the environment or the credential file, the named (or default) profile.
    if env("AWS_ACCESS_KEY_ID").is_none() || !entry.profile.is_empty() {
        let name = Some(entry.profile.clone()).filter(|p| !p.is_empty()).or_else(|| env("AWS_PROFILE"));
        let p = profile_from_files(name.as_deref().unwrap_or("default"));
        if let (Some(k), Some(s)) = (p.key_id, p.secret_key) {
            b = b.with_access_key_id(k).with_secret_access_key(s);
            if let Some(t) = p.session_token {
                b = b.with_token(t);
            }
        }
        if env("AWS_DEFAULT_REGION").is_none() && env("AWS_REGION").is_none() {
            if let Some(r) = p.region {
                b = b.with_region(r);
            }
        }
    }
    if !entry.key_id.is_empty() {
        b = b.with_access_key_id(entry.key_id);
    }
    if !entry.secret_key.is_empty() {
        b = b.with_secret_access_key(entry.secret_key);
    }
    if !entry.session_token.is_empty() {
        b = b.with_token(entry.session_token);
    }
    if !entry.region.is_empty() {
        b = b.with_region(entry.region);
    }
    if let Some(ep) = &u.endpoint {
        // S3-compatible servers (MinIO, Garage, Ceph) are addressed by path, as tritonserver does.
        b = b.with_endpoint(ep).with_allow_http(ep.starts_with("http://")).with_virtual_hosted_style_request(false);
    }
    Ok(Arc::new(b.build().map_err(|e| setup_failed(u, e))?))
}

/// The Google Cloud Storage client: application credentials from the environment or the credential file.
fn gcs_store(u: &CloudUrl, file: &CredentialFile, skipped: &Skipped) -> Result<Arc<dyn ObjectStore>> {
    let mut b = GoogleCloudStorageBuilder::from_env()
        .with_client_options(client_options())
        .with_http_connector(FilteringConnector { skipped: skipped.clone() })
        .with_retry(retry())
        .with_bucket_name(&u.bucket);
    if let Some(path) = pick(&file.gs, &u.url).filter(|p| !p.is_empty()) {
        b = b.with_application_credentials(path);
    }
    Ok(Arc::new(b.build().map_err(|e| setup_failed(u, e))?))
}

/// The Azure Blob Storage client: the account key from the environment or the credential file.
fn azure_store(u: &CloudUrl, file: &CredentialFile, skipped: &Skipped) -> Result<Arc<dyn ObjectStore>> {
    let account = u.account.clone().unwrap_or_default();
    let mut b = MicrosoftAzureBuilder::from_env()
        .with_client_options(client_options())
        .with_http_connector(FilteringConnector { skipped: skipped.clone() })
        .with_retry(retry())
        .with_account(&account)
        .with_container_name(&u.bucket);
    if let Some(k) = env("AZURE_STORAGE_KEY") {
        b = b.with_access_key(k);
    }
    if let Some(c) = pick(&file.azure, &u.url) {
        if !c.account_key.is_empty() && (c.account_str.is_empty() || c.account_str == account) {
            b = b.with_access_key(&c.account_key);
        }
    }
    Ok(Arc::new(b.build().map_err(|e| setup_failed(u, e))?))
}

#[cfg(test)]
mod tests;
