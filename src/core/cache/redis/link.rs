//! Opening a connection to Redis: TCP (and TLS through rustls), then the `redis` crate's handshake
//! (AUTH, SELECT) over that stream, all within `connect_timeout`. The crate's multiplexed connection
//! pipelines every request over the one socket; its driver runs as a task of its own.

use super::settings::RedisSettings;
use redis::aio::MultiplexedConnection;
use std::future::Future;
use std::time::Duration;

/// Why a connection could not be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectError {
    /// Nothing answered (refused, unroutable, timed out, closed): Redis is down or not there yet.
    Unreachable(String),
    /// Redis answered but would not take tritonrs (wrong password or user, no such db, a TLS
    /// certificate that is not trusted): a setting is wrong, and waiting will not fix it.
    Refused(String),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Unreachable(m) | ConnectError::Refused(m) => f.write_str(m),
        }
    }
}

/// Runs `f` for at most `limit` (`None`: no limit); `Err(())` when it ran out of time.
pub async fn within<F: Future>(limit: Option<Duration>, f: F) -> Result<F::Output, ()> {
    match limit {
        Some(d) => tokio::time::timeout(d, f).await.map_err(|_| ()),
        None => Ok(f.await),
    }
}

/// Opens a connection and starts its driver on the current runtime.
pub async fn open(s: &RedisSettings) -> Result<MultiplexedConnection, ConnectError> {
    let limit = s.connect_timeout;
    within(limit, open_unbounded(s))
        .await
        .unwrap_or_else(|_| Err(ConnectError::Unreachable(format!("no connection within {limit:?}"))))
}

async fn open_unbounded(s: &RedisSettings) -> Result<MultiplexedConnection, ConnectError> {
    let tcp = tokio::net::TcpStream::connect((s.host.as_str(), s.port))
        .await
        .map_err(|e| ConnectError::Unreachable(e.to_string()))?;
    let _ = tcp.set_nodelay(true);
    let mut info = redis::RedisConnectionInfo::default().set_db(s.db);
    if let Some(user) = &s.user {
        info = info.set_username(user);
    }
    if let Some(password) = &s.password {
        info = info.set_password(password);
    }
    // The bounds are ours (`socket_timeout` around each call), not the crate's.
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None).set_connection_timeout(None);
    match &s.tls {
        None => handshake(MultiplexedConnection::new_with_config(&info, tcp, config).await),
        Some(tls) => {
            let stream = tokio_rustls::TlsConnector::from(tls.config.clone())
                .connect(tls.server_name.clone(), tcp)
                .await
                .map_err(|e| match e.kind() {
                    std::io::ErrorKind::InvalidData => ConnectError::Refused(format!("TLS: {e}")),
                    _ => ConnectError::Unreachable(format!("TLS: {e}")),
                })?;
            handshake(MultiplexedConnection::new_with_config(&info, stream, config).await)
        }
    }
}

/// The handshake's outcome, its connection's driver started: an I/O error is Redis going away; any
/// answer refusing us is a setting.
fn handshake<D: Future<Output = ()> + Send + 'static>(
    r: redis::RedisResult<(MultiplexedConnection, D)>,
) -> Result<MultiplexedConnection, ConnectError> {
    match r {
        Ok((conn, driver)) => {
            tokio::spawn(driver);
            Ok(conn)
        }
        Err(e) if e.is_io_error() => Err(ConnectError::Unreachable(e.to_string())),
        Err(e) => Err(ConnectError::Refused(e.to_string())),
    }
}

/// Connects and PINGs once on a runtime of its own (the server's does not exist yet when the flags are
/// read), within `connect_timeout` (at most 5 s when that has no bound, so a Redis that swallows
/// packets does not hold up the start).
pub fn probe(s: &RedisSettings) -> Result<(), ConnectError> {
    let mut bounded = s.clone();
    bounded.connect_timeout = Some(s.connect_timeout.unwrap_or(Duration::from_secs(5)));
    let run = move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ConnectError::Unreachable(format!("no runtime to connect from: {e}")))?;
        rt.block_on(async {
            let mut conn = open(&bounded).await?;
            let ping = redis::cmd("PING");
            match within(bounded.connect_timeout, ping.query_async::<String>(&mut conn)).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) if !e.is_io_error() => Err(ConnectError::Refused(e.to_string())),
                Ok(Err(e)) => Err(ConnectError::Unreachable(e.to_string())),
                Err(()) => Err(ConnectError::Unreachable("no answer to PING".into())),
            }
        })
    };
    // A thread of its own, so this works whether or not the caller is on a runtime.
    std::thread::scope(|scope| {
        scope
            .spawn(run)
            .join()
            .unwrap_or_else(|_| Err(ConnectError::Unreachable("the connection attempt panicked".into())))
    })
}
