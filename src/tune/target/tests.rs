//! Unit tests of `tune/target.rs`.

use super::Target;

#[test]
fn loopback_addresses_are_this_machine() {
    for url in ["grpc://localhost:8001", "grpc://127.0.0.1:8001", "grpc://127.1.2.3:1", "grpc://[::1]:8001"] {
        assert!(Target::via(url).unwrap().same_machine(), "{url}");
    }
    for url in ["grpc://10.0.0.5:8001", "grpc://jetson.local:8001", "grpc://[fe80::1]:8001"] {
        assert!(!Target::via(url).unwrap().same_machine(), "{url}");
    }
    assert!(Target::via("not a url").is_err());
}
