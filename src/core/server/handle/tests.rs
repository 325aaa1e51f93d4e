//! Unit tests of `core/server/handle.rs`.

use super::*;
use crate::model_api::LoadOptions;
use std::time::Duration;

#[tokio::test]
async fn readiness_streams_each_change_and_ends_with_the_server() {
    let repo = tempfile::tempdir().unwrap();
    let broken = repo.path().join("broken");
    std::fs::create_dir_all(broken.join("1")).unwrap();
    std::fs::write(broken.join("config.pbtxt"), "max_batch_sizee: 8\n").unwrap();
    let server = Server::new(ServerOptions::explicit(vec![repo.path().to_path_buf()]));
    let mut readiness = server.readiness();
    let mut next = async || tokio::time::timeout(Duration::from_secs(10), readiness.next()).await.unwrap();
    assert_eq!(next().await, Some(false), "before start-up");
    server.startup().await.unwrap();
    assert_eq!(next().await, Some(true));
    // Strict readiness: a model that failed to load counts until it is unloaded.
    assert!(server.load_model("broken", LoadOptions::default()).await.is_err());
    assert_eq!(next().await, Some(false));
    server.unload_model("broken").await.unwrap();
    assert_eq!(next().await, Some(true));
    server.stop_accepting();
    assert_eq!(next().await, Some(false), "shutdown began");
    drop(server);
    assert_eq!(next().await, None, "the server is gone");
}
