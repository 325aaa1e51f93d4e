//! The Redis cache's `--cache-config redis,<setting>=<value>` settings: tritonserver's redis cache's
//! names (`host`, `port`, `user`, `password`, `db`, `connect_timeout`, `socket_timeout`, `pool_size`,
//! `wait_timeout`, `tls_enabled`, `cert`, `key`, `cacert`, `cacert_dir`, `sni`) and tritonrs's two
//! additions (`max_entry_bytes`, `ttl_seconds`). An unknown setting or a bad value stops the start.

use crate::error::{Error, Result};
use rustls_pki_types::ServerName;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio_rustls::rustls;

/// tritonserver's environment variables for the credentials; a setting given on the command line wins.
pub const USERNAME_ENV: &str = "TRITONCACHE_REDIS_USERNAME";
pub const PASSWORD_ENV: &str = "TRITONCACHE_REDIS_PASSWORD";

/// How long a look-up or insert waits for Redis unless `socket_timeout` says: short, because a request
/// waits for its look-up, and a slow Redis must cost a request little more than a miss.
pub const DEFAULT_SOCKET_TIMEOUT: Duration = Duration::from_millis(50);
/// How long opening a connection (TCP, TLS, AUTH, SELECT) may take unless `connect_timeout` says.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// The largest entry stored unless `max_entry_bytes` says; larger results are not cached.
pub const DEFAULT_MAX_ENTRY_BYTES: usize = 1 << 20;

/// The settings tritonrs accepts, for the message that refuses another one.
const KNOWN: &[&str] = &[
    "host",
    "port",
    "user",
    "password",
    "db",
    "connect_timeout",
    "socket_timeout",
    "pool_size",
    "wait_timeout",
    "tls_enabled",
    "cert",
    "key",
    "cacert",
    "cacert_dir",
    "sni",
    "max_entry_bytes",
    "ttl_seconds",
];

/// Where the Redis cache is and how to talk to it.
#[derive(Clone)]
pub struct RedisSettings {
    pub host: String,
    pub port: u16,
    /// The ACL user (`user`, else `$TRITONCACHE_REDIS_USERNAME`); `None`: Redis's `default`.
    pub user: Option<String>,
    /// `password`, else `$TRITONCACHE_REDIS_PASSWORD`; `None`: no AUTH.
    pub password: Option<String>,
    pub db: i64,
    /// Bound on opening a connection; `None` (`connect_timeout=0`) waits as long as the system does.
    pub connect_timeout: Option<Duration>,
    /// Bound on each look-up and insert; `None` (`socket_timeout=0`) waits for Redis however long.
    pub socket_timeout: Option<Duration>,
    /// TLS towards Redis (`tls_enabled=true`), its client configuration built from the files at start.
    pub tls: Option<RedisTls>,
    /// Results packed larger than this are not stored.
    pub max_entry_bytes: usize,
    /// Entries expire after this long (`ttl_seconds`); `None`: Redis keeps them until it evicts them.
    pub ttl: Option<Duration>,
}

/// TLS towards Redis: the client configuration and the name the certificate must carry (`sni`, else
/// `host`).
#[derive(Clone, Debug)]
pub struct RedisTls {
    pub config: Arc<rustls::ClientConfig>,
    pub server_name: ServerName<'static>,
}

impl std::fmt::Debug for RedisSettings {
    /// Everything but the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSettings")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<set>"))
            .field("db", &self.db)
            .field("connect_timeout", &self.connect_timeout)
            .field("socket_timeout", &self.socket_timeout)
            .field("tls", &self.tls.as_ref().map(|t| &t.server_name))
            .field("max_entry_bytes", &self.max_entry_bytes)
            .field("ttl", &self.ttl)
            .finish()
    }
}

impl RedisSettings {
    /// `host:port`, for messages.
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// Reads the settings in the order given (a setting given twice: the last one counts), the
    /// credentials' environment variables through `env`, and the TLS files.
    pub fn parse(settings: &[(String, String)], env: impl Fn(&str) -> Option<String>) -> Result<RedisSettings> {
        let get = |name: &str| settings.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
        if let Some((k, _)) = settings.iter().find(|(k, _)| !KNOWN.contains(&k.as_str())) {
            return Err(Error::invalid(format!(
                "--cache-config: unknown setting '{k}' for the redis cache; it takes {}",
                KNOWN.join(", ")
            )));
        }
        let (Some(host), Some(port)) = (get("host"), get("port")) else {
            return Err(Error::invalid(
                "--cache-config: the redis cache needs at least 'host' and 'port', e.g. \
                 --cache-config redis,host=redis --cache-config redis,port=6379",
            ));
        };
        if host.trim().is_empty() {
            return Err(Error::invalid("--cache-config: redis 'host' is empty"));
        }
        let nonempty = |v: Option<String>| v.filter(|s| !s.is_empty());
        let tls_enabled = match get("tls_enabled") {
            None | Some("false") => false,
            Some("true") => true,
            Some(v) => {
                return Err(Error::invalid(format!("--cache-config: redis tls_enabled '{v}' must be true or false")))
            }
        };
        if let Some(pool) = get("pool_size") {
            number::<usize>("pool_size", pool).and_then(|n| match n {
                0 => Err(Error::invalid("--cache-config: redis pool_size must be at least 1")),
                _ => Ok(n),
            })?;
        }
        if let Some(wait) = get("wait_timeout") {
            number::<u64>("wait_timeout", wait)?;
        }
        let max_entry_bytes = match get("max_entry_bytes") {
            Some(v) => number::<usize>("max_entry_bytes", v)?,
            None => DEFAULT_MAX_ENTRY_BYTES,
        };
        let tls = match tls_enabled {
            true => Some(tls(host, &get)?),
            false => {
                if let Some(k) = ["cert", "key", "cacert", "cacert_dir", "sni"].into_iter().find(|k| get(k).is_some()) {
                    tracing::warn!("--cache-config: redis '{k}' is ignored: tls_enabled is not true.");
                }
                None
            }
        };
        Ok(RedisSettings {
            host: host.trim().to_string(),
            port: number("port", port)?,
            user: nonempty(get("user").map(str::to_string).or_else(|| env(USERNAME_ENV))),
            password: nonempty(get("password").map(str::to_string).or_else(|| env(PASSWORD_ENV))),
            db: get("db").map(|v| number::<u32>("db", v)).transpose()?.unwrap_or(0).into(),
            connect_timeout: millis("connect_timeout", get("connect_timeout"), DEFAULT_CONNECT_TIMEOUT)?,
            socket_timeout: millis("socket_timeout", get("socket_timeout"), DEFAULT_SOCKET_TIMEOUT)?,
            tls,
            max_entry_bytes,
            ttl: get("ttl_seconds")
                .map(|v| number::<u64>("ttl_seconds", v))
                .transpose()?
                .filter(|&s| s > 0)
                .map(Duration::from_secs),
        })
    }
}

fn number<T: std::str::FromStr>(name: &str, v: &str) -> Result<T> {
    v.trim().parse().map_err(|_| Error::invalid(format!("--cache-config: redis {name} '{v}' is not a valid number")))
}

/// A duration in milliseconds; 0 means no bound, as in tritonserver.
fn millis(name: &str, v: Option<&str>, default: Duration) -> Result<Option<Duration>> {
    match v {
        None => Ok(Some(default)),
        Some(v) => Ok(Some(number::<u64>(name, v)?).filter(|&ms| ms > 0).map(Duration::from_millis)),
    }
}

/// The TLS client configuration: the server's certificate must chain to `cacert` and the certificates
/// in `cacert_dir` (default: the system's bundle) and name `sni` (default: `host`); `cert` and `key`
/// are a client certificate for a Redis that asks for one (`tls-auth-clients`).
fn tls<'a>(host: &str, get: &impl Fn(&str) -> Option<&'a str>) -> Result<RedisTls> {
    let name = get("sni").unwrap_or(host).trim().to_string();
    let server_name = ServerName::try_from(name.clone()).map_err(|_| {
        Error::invalid(format!("--cache-config: redis TLS name '{name}' is not a host name or address"))
    })?;
    let roots = roots(get("cacert").map(Path::new), get("cacert_dir").map(Path::new))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::invalid(format!("redis cache: TLS setup failed: {e}")))?
        .with_root_certificates(roots);
    let config = match (get("cert"), get("key")) {
        (None, None) => builder.with_no_client_auth(),
        (Some(cert), Some(key)) => {
            use rustls_pki_types::pem::PemObject;
            use rustls_pki_types::{CertificateDer, PrivateKeyDer};
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read(Path::new(cert))?)
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| Error::invalid(format!("redis cache: '{cert}' is not a PEM certificate: {e}")))?;
            let key_der = PrivateKeyDer::from_pem_slice(&read(Path::new(key))?)
                .map_err(|e| Error::invalid(format!("redis cache: '{key}' is not a PEM private key: {e}")))?;
            builder
                .with_client_auth_cert(certs, key_der)
                .map_err(|e| Error::invalid(format!("redis cache: the client certificate and key do not fit: {e}")))?
        }
        _ => return Err(Error::invalid("--cache-config: redis 'cert' and 'key' go together")),
    };
    Ok(RedisTls { config: Arc::new(config), server_name })
}

/// CA bundles tried, in order, when neither `cacert` nor `cacert_dir` is given (Debian/Ubuntu, Fedora).
const SYSTEM_CA_BUNDLES: &[&str] = &["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"];

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::invalid(format!("redis cache: cannot read '{}': {e}", path.display())))
}

/// The trusted certificates: those in `cacert` and in every file of `cacert_dir` that holds PEM
/// certificates, else the system's bundle.
fn roots(cacert: Option<&Path>, cacert_dir: Option<&Path>) -> Result<rustls::RootCertStore> {
    let mut files: Vec<PathBuf> = cacert.map(Path::to_path_buf).into_iter().collect();
    if let Some(dir) = cacert_dir {
        let entries = std::fs::read_dir(dir)
            .map_err(|e| Error::invalid(format!("redis cache: cannot read cacert_dir '{}': {e}", dir.display())))?;
        let mut in_dir: Vec<PathBuf> =
            entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_file()).collect();
        in_dir.sort();
        files.extend(in_dir);
    }
    let explicit = !files.is_empty();
    if !explicit {
        files.extend(SYSTEM_CA_BUNDLES.iter().map(PathBuf::from).filter(|p| p.is_file()).take(1));
    }
    let mut roots = rustls::RootCertStore::empty();
    for f in &files {
        use rustls_pki_types::pem::PemObject;
        // A bundle or folder may hold files or certificates webpki cannot use; the usable ones are enough.
        for c in rustls_pki_types::CertificateDer::pem_slice_iter(&read(f)?).flatten() {
            let _ = roots.add(c);
        }
    }
    if roots.is_empty() {
        let what = match explicit {
            true => "cacert/cacert_dir hold no usable CA certificate".to_string(),
            false => {
                format!("no CA certificates: give cacert or cacert_dir (no system bundle in {SYSTEM_CA_BUNDLES:?})")
            }
        };
        return Err(Error::invalid(format!("redis cache: {what}")));
    }
    Ok(roots)
}
