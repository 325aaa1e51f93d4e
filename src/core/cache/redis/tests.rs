use super::*;
use crate::model_api::types::DataType;
use std::time::Duration;

fn parse(pairs: &[(&str, &str)]) -> crate::error::Result<RedisSettings> {
    parse_env(pairs, &[])
}

fn parse_env(pairs: &[(&str, &str)], env: &[(&str, &str)]) -> crate::error::Result<RedisSettings> {
    let settings: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    RedisSettings::parse(&settings, |name| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
}

fn message(r: crate::error::Result<RedisSettings>) -> String {
    r.err().map(|e| e.message).unwrap_or_default()
}

#[test]
fn settings_take_tritonservers_names_and_defaults() {
    let s = parse(&[("host", "cache.local"), ("port", "6380")]).unwrap();
    assert_eq!((s.host.as_str(), s.port, s.db), ("cache.local", 6380, 0));
    assert_eq!((s.user.as_deref(), s.password.as_deref()), (None, None));
    assert_eq!(s.socket_timeout, Some(settings::DEFAULT_SOCKET_TIMEOUT));
    assert_eq!(s.connect_timeout, Some(settings::DEFAULT_CONNECT_TIMEOUT));
    assert_eq!((s.max_entry_bytes, s.ttl), (settings::DEFAULT_MAX_ENTRY_BYTES, None));
    assert!(s.tls.is_none());
    assert_eq!(s.address(), "cache.local:6380");

    let s = parse(&[
        ("host", "::1"),
        ("port", "1"),
        ("user", "triton"),
        ("password", "secret"),
        ("db", "3"),
        ("connect_timeout", "0"),
        ("socket_timeout", "20"),
        ("pool_size", "4"),
        ("wait_timeout", "100"),
        ("max_entry_bytes", "4096"),
        ("ttl_seconds", "60"),
        ("tls_enabled", "false"),
    ])
    .unwrap();
    assert_eq!((s.user.as_deref(), s.password.as_deref(), s.db), (Some("triton"), Some("secret"), 3));
    // 0 is "no bound", as in tritonserver.
    assert_eq!((s.connect_timeout, s.socket_timeout), (None, Some(Duration::from_millis(20))));
    assert_eq!((s.max_entry_bytes, s.ttl), (4096, Some(Duration::from_secs(60))));
    assert_eq!(s.address(), "[::1]:1");
    // The password never shows in the settings' debug form.
    assert!(!format!("{s:?}").contains("secret"));
    // The last of a setting given twice counts.
    assert_eq!(parse(&[("host", "a"), ("port", "1"), ("port", "2")]).unwrap().port, 2);
    assert_eq!(parse(&[("host", "a"), ("port", "1"), ("ttl_seconds", "0")]).unwrap().ttl, None);
}

#[test]
fn credentials_come_from_tritonservers_environment_variables_unless_given() {
    let env = [(settings::USERNAME_ENV, "envuser"), (settings::PASSWORD_ENV, "envpass")];
    let s = parse_env(&[("host", "h"), ("port", "1")], &env).unwrap();
    assert_eq!((s.user.as_deref(), s.password.as_deref()), (Some("envuser"), Some("envpass")));
    let s = parse_env(&[("host", "h"), ("port", "1"), ("password", "flag")], &env).unwrap();
    assert_eq!(s.password.as_deref(), Some("flag"));
    let s = parse_env(&[("host", "h"), ("port", "1")], &[(settings::PASSWORD_ENV, "")]).unwrap();
    assert_eq!(s.password, None);
}

#[test]
fn bad_settings_are_refused_with_what_is_wrong() {
    assert!(message(parse(&[("host", "h")])).contains("needs at least 'host' and 'port'"));
    assert!(message(parse(&[("port", "1")])).contains("needs at least 'host' and 'port'"));
    assert!(message(parse(&[("host", " "), ("port", "1")])).contains("'host' is empty"));
    let unknown = message(parse(&[("host", "h"), ("port", "1"), ("colour", "red")]));
    assert!(unknown.contains("unknown setting 'colour' for the redis cache") && unknown.contains("cacert_dir"));
    for (k, v) in [
        ("port", "70000"),
        ("port", "x"),
        ("db", "-1"),
        ("socket_timeout", "fast"),
        ("connect_timeout", "-5"),
        ("pool_size", "0"),
        ("wait_timeout", "soon"),
        ("max_entry_bytes", "big"),
        ("ttl_seconds", "-1"),
    ] {
        assert!(parse(&[("host", "h"), ("port", "1"), (k, v)]).is_err(), "{k}={v}");
    }
    let tls = |extra: &[(&'static str, &'static str)]| {
        let mut all = vec![("host", "h"), ("port", "1"), ("tls_enabled", "true")];
        all.extend_from_slice(extra);
        message(parse(&all))
    };
    assert!(message(parse(&[("host", "h"), ("port", "1"), ("tls_enabled", "yes")])).contains("true or false"));
    assert!(tls(&[("cacert", "/nonexistent/ca.pem")]).contains("cannot read '/nonexistent/ca.pem'"));
    assert!(tls(&[("cacert_dir", "/nonexistent")]).contains("cannot read cacert_dir '/nonexistent'"));
    assert!(tls(&[("cert", "/x.pem")]).contains("'cert' and 'key' go together"));
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate").unwrap();
    let junk: &'static str = Box::leak(junk.to_string_lossy().into_owned().into_boxed_str());
    assert!(tls(&[("cacert", junk)]).contains("no usable CA certificate"));
    // TLS files are ignored (with a warning) while TLS is off, as tritonserver ignores them.
    assert!(parse(&[("host", "h"), ("port", "1"), ("cacert", "/nonexistent")]).is_ok());
}

fn tensor(name: &str, dt: DataType, shape: Vec<i64>, data: Vec<u8>) -> Tensor {
    Tensor::new(name, dt, shape, data)
}

fn sample() -> Vec<Tensor> {
    let floats: Vec<u8> = [1.5f32, -2.0, 3.25, 0.0, 8.0, 9.5].iter().flat_map(|f| f.to_le_bytes()).collect();
    vec![
        tensor("OUTPUT0", DataType::Fp32, vec![2, 3], floats),
        tensor("TEXT", DataType::Bytes, vec![2], vec![2, 0, 0, 0, b'h', b'i', 0, 0, 0, 0]),
        tensor("EMPTY", DataType::Int64, vec![0, 4], vec![]),
    ]
}

#[test]
fn values_round_trip_with_a_version_byte() {
    let stored = value::encode(&sample()).unwrap();
    assert_eq!(stored[0], value::VERSION);
    let back = value::decode(&stored).unwrap();
    assert_eq!(back.len(), 3);
    for (a, b) in sample().iter().zip(&back) {
        assert_eq!((&a.name, a.datatype, &a.shape), (&b.name, b.datatype, &b.shape));
        assert_eq!(a.data.to_host().unwrap(), b.data.to_host().unwrap());
    }
    assert_eq!(value::key(&(0xab, 1)), "tritonrs:cache:00000000000000ab0000000000000001");
}

#[test]
fn damaged_or_foreign_values_are_misses_not_panics() {
    let stored = value::encode(&sample()).unwrap();
    for cut in 0..stored.len() {
        assert!(value::decode(&stored[..cut]).is_err(), "cut at {cut}");
    }
    let mut other_version = stored.clone();
    other_version[0] = value::VERSION + 1;
    assert!(value::decode(&other_version).is_err());
    let mut longer = stored.clone();
    longer.push(0);
    assert!(value::decode(&longer).is_err());
    // Well-formed packing whose bytes do not fit the shape, or BYTES with too few elements.
    let short = value::encode(&[tensor("O", DataType::Fp32, vec![4], vec![0; 12])]).unwrap();
    assert!(value::decode(&short).is_err());
    let negative = value::encode(&[tensor("O", DataType::Uint8, vec![-1], vec![])]).unwrap();
    assert!(value::decode(&negative).is_err());
    let strings = value::encode(&[tensor("S", DataType::Bytes, vec![2], vec![1, 0, 0, 0, b'x'])]).unwrap();
    assert!(value::decode(&strings).is_err());
    // Flipped bytes anywhere: an error or a checked result, never a panic.
    let mut rng = fastrand::Rng::with_seed(37);
    for _ in 0..2000 {
        let mut v = stored.clone();
        for _ in 0..rng.usize(1..4) {
            let i = rng.usize(..v.len());
            v[i] = rng.u8(..);
        }
        let _ = value::decode(&v);
    }
    let _ = value::decode(&[value::VERSION, 0xff, 0xff, 0xff, 0xff]);
}

fn local(port: u16, socket_ms: &str) -> RedisSettings {
    parse(&[("host", "127.0.0.1"), ("port", &port.to_string()), ("socket_timeout", socket_ms)]).unwrap()
}

#[tokio::test]
async fn a_redis_that_is_not_there_is_a_quick_miss_and_calls_pause() {
    // A port nothing listens on: refused at once.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    assert!(matches!(link::probe(&local(port, "50")), Err(ConnectError::Unreachable(_))));
    let cache = RedisCache::new(local(port, "50"), false);
    let t = Instant::now();
    assert!(cache.lookup(&(1, 2)).await.is_none());
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    // The failed attempt pauses the next ones: look-ups are misses without trying, inserts are dropped.
    assert!(cache.backing_off());
    let t = Instant::now();
    assert!(cache.lookup(&(1, 2)).await.is_none());
    assert!(t.elapsed() < Duration::from_millis(20), "{:?}", t.elapsed());
    cache.insert((1, 2), sample());
    assert_eq!(cache.inserts.load(Ordering::Acquire), 0);
}

#[tokio::test]
async fn a_redis_that_does_not_answer_costs_a_call_at_most_its_socket_timeout() {
    // Accepts connections and never answers (a hung Redis).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            open.push(s);
        }
    });
    let cache = RedisCache::new(local(port, "40"), true);
    for _ in 0..TIMEOUTS_TO_DOWN {
        let t = Instant::now();
        assert!(cache.lookup(&(3, 4)).await.is_none());
        assert!(t.elapsed() < Duration::from_millis(500), "{:?}", t.elapsed());
    }
    // After that many in a row, Redis counts as down: the next calls do not wait at all.
    assert!(cache.backing_off() && !cache.health.lock().up);
    held.abort();
}
