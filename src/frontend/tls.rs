//! TLS for the HTTP and gRPC listeners (rustls): tritonserver's `--grpc-use-ssl`,
//! `--grpc-use-ssl-mutual`, `--grpc-server-cert`, `--grpc-server-key`, `--grpc-root-cert`, and the same
//! for HTTP (`--http-use-ssl`, ...), which tritonserver lacks. With mutual TLS a client must present a
//! certificate signed by the root certificate.

use crate::error::{Error, Result};
use crate::frontend::conn::{Conn, GuardedListener, GuardedStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio_rustls::rustls;

/// The files of one listener's TLS setting.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub root: Option<PathBuf>,
    pub mutual: bool,
}

impl TlsFiles {
    /// The setting from the flags, or `None` without `use_ssl`/`mutual`; `prefix` is `http` or `grpc`.
    pub fn from_flags(
        prefix: &str,
        use_ssl: bool,
        mutual: bool,
        cert: Option<&Path>,
        key: Option<&Path>,
        root: Option<&Path>,
    ) -> Result<Option<Self>> {
        if !use_ssl && !mutual {
            return Ok(None);
        }
        let need = |p: Option<&Path>, flag: &str| {
            p.map(Path::to_path_buf)
                .ok_or_else(|| Error::invalid(format!("--{prefix}-use-ssl needs --{prefix}-{flag}")))
        };
        let root = if mutual { Some(need(root, "root-cert")?) } else { root.map(Path::to_path_buf) };
        Ok(Some(TlsFiles { cert: need(cert, "server-cert")?, key: need(key, "server-key")?, root, mutual }))
    }

    fn read(path: &Path, what: &str) -> Result<Vec<u8>> {
        std::fs::read(path).map_err(|e| Error::invalid(format!("cannot read the {what} '{}': {e}", path.display())))
    }

    /// The files' PEM contents.
    pub fn pem(&self) -> Result<Pem> {
        let client_root = match (&self.root, self.mutual) {
            (Some(r), true) => Some(Self::read(r, "root certificate")?),
            _ => None,
        };
        Ok(Pem {
            cert: Self::read(&self.cert, "server certificate")?,
            key: Self::read(&self.key, "server key")?,
            client_root,
        })
    }

    /// A rustls server configuration (HTTP/1.1 only, as the HTTP port speaks).
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>> {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        let Pem { cert, key, client_root: root } = self.pem()?;
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert)
            .collect::<Result<_, _>>()
            .map_err(|e| Error::invalid(format!("'{}' is not a PEM certificate: {e}", self.cert.display())))?;
        let key = PrivateKeyDer::from_pem_slice(&key)
            .map_err(|e| Error::invalid(format!("'{}' is not a PEM private key: {e}", self.key.display())))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::invalid(format!("TLS setup failed: {e}")))?;
        let builder = match root {
            Some(root) => {
                let mut roots = rustls::RootCertStore::empty();
                for c in CertificateDer::pem_slice_iter(&root) {
                    let c = c.map_err(|e| Error::invalid(format!("the root certificate is not PEM: {e}")))?;
                    roots.add(c).map_err(|e| Error::invalid(format!("the root certificate is not usable: {e}")))?;
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                    .build()
                    .map_err(|e| Error::invalid(format!("cannot verify clients with the root certificate: {e}")))?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut config = builder
            .with_single_cert(certs, key)
            .map_err(|e| Error::invalid(format!("the server certificate and key do not fit: {e}")))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// The PEM texts of a [`TlsFiles`]; `client_root` only with mutual TLS.
pub struct Pem {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
    pub client_root: Option<Vec<u8>>,
}

/// A guarded listener whose connections are TLS: handshakes run on their own tasks (a slow one
/// holds no other back) within the header timeout, and only finished ones are handed to axum.
pub struct TlsListener {
    inner: GuardedListener,
    acceptor: tokio_rustls::TlsAcceptor,
    done_tx: tokio::sync::mpsc::Sender<(tokio_rustls::server::TlsStream<GuardedStream>, Conn)>,
    done_rx: tokio::sync::mpsc::Receiver<(tokio_rustls::server::TlsStream<GuardedStream>, Conn)>,
    timeout: Duration,
}

impl TlsListener {
    pub fn new(inner: GuardedListener, config: Arc<rustls::ServerConfig>) -> Self {
        let (done_tx, done_rx) = tokio::sync::mpsc::channel(64);
        let timeout = inner.limits().header_timeout.unwrap_or(Duration::from_secs(30));
        TlsListener { inner, acceptor: tokio_rustls::TlsAcceptor::from(config), done_tx, done_rx, timeout }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<GuardedStream>;
    type Addr = Conn;

    async fn accept(&mut self) -> (Self::Io, Conn) {
        loop {
            tokio::select! {
                stream = self.inner.accept_guarded() => {
                    let (acceptor, done, timeout) = (self.acceptor.clone(), self.done_tx.clone(), self.timeout);
                    tokio::spawn(async move {
                        let conn = stream.conn().clone();
                        match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
                            Ok(Ok(tls)) => {
                                let _ = done.send((tls, conn)).await;
                            }
                            Ok(Err(e)) => tracing::debug!("TLS handshake failed: {e}"),
                            Err(_) => tracing::debug!("TLS handshake timed out"),
                        }
                    });
                }
                Some(done) = self.done_rx.recv() => return done,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Conn> {
        Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "a guarded listener has no single address"))
    }
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, TlsListener>> for Conn {
    fn connect_info(stream: axum::serve::IncomingStream<'_, TlsListener>) -> Self {
        stream.remote_addr().clone()
    }
}

/// CA bundles tried, in order, when a TLS client is given no CA file (Debian/Ubuntu, then Fedora).
const SYSTEM_CA_BUNDLES: &[&str] = &["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"];

/// A rustls client configuration (for the MQTT bridge): the broker's certificate must chain to `ca`
/// (PEM, default: the system's bundle); `client` is a PEM certificate and key for brokers that ask.
pub fn client_config(
    ca: Option<&std::path::Path>,
    client: Option<(&std::path::Path, &std::path::Path)>,
) -> Result<Arc<rustls::ClientConfig>> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let read = |p: &std::path::Path| {
        std::fs::read(p).map_err(|e| Error::invalid(format!("cannot read '{}': {e}", p.display())))
    };
    let (ca_path, ca_pem) = match ca {
        Some(p) => (p.to_path_buf(), read(p)?),
        None => SYSTEM_CA_BUNDLES
            .iter()
            .find_map(|p| std::fs::read(p).ok().map(|b| (std::path::PathBuf::from(p), b)))
            .ok_or_else(|| Error::invalid("no CA certificates: give --mqtt-ca-file (no system bundle found)"))?,
    };
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(&ca_pem) {
        let c = c.map_err(|e| Error::invalid(format!("'{}' is not a PEM certificate file: {e}", ca_path.display())))?;
        // A bundle may hold certificates webpki cannot use; the usable ones are enough.
        let _ = roots.add(c);
    }
    if roots.is_empty() {
        return Err(Error::invalid(format!("'{}' holds no usable CA certificate", ca_path.display())));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::invalid(format!("TLS setup failed: {e}")))?
        .with_root_certificates(roots);
    let config = match client {
        Some((cert, key)) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read(cert)?)
                .collect::<Result<_, _>>()
                .map_err(|e| Error::invalid(format!("'{}' is not a PEM certificate: {e}", cert.display())))?;
            let k = PrivateKeyDer::from_pem_slice(&read(key)?)
                .map_err(|e| Error::invalid(format!("'{}' is not a PEM private key: {e}", key.display())))?;
            builder
                .with_client_auth_cert(certs, k)
                .map_err(|e| Error::invalid(format!("the client certificate and key do not fit: {e}")))?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}
