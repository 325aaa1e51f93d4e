//! Unit tests of `model_api/signals.rs`.

use super::Signals;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

#[test]
fn hooks_run_once_on_cancel_and_forgotten_ones_never() {
    let s = Signals::default();
    let ran = Arc::new(AtomicUsize::new(0));
    let (a, b) = (ran.clone(), ran.clone());
    let _ = s.on_cancel(move || {
        a.fetch_add(1, Ordering::SeqCst);
    });
    let key = s.on_cancel(move || {
        b.fetch_add(10, Ordering::SeqCst);
    });
    s.forget(key.unwrap());
    assert!(!s.is_cancelled());
    s.clone().cancel();
    s.cancel();
    assert!(s.is_cancelled());
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert!(s.on_cancel(|| panic!("a hook added after the cancellation must not run")).is_none());
}

#[test]
fn reschedule_is_taken_once() {
    let s = Signals::default();
    assert!(!s.take_reschedule());
    s.clone().reschedule();
    assert!(s.take_reschedule());
    assert!(!s.take_reschedule());
}

#[tokio::test]
async fn cancelled_completes_when_cancelled_and_cleans_up_when_dropped() {
    let s = Signals::default();
    {
        let wait = s.cancelled();
        let none = tokio::time::timeout(std::time::Duration::from_millis(10), wait).await;
        assert!(none.is_err());
    }
    assert!(s.0.hooks.lock().is_empty(), "a dropped wait leaves no hook behind");
    let waiter = tokio::spawn({
        let s = s.clone();
        async move { s.cancelled().await }
    });
    tokio::task::yield_now().await;
    s.cancel();
    waiter.await.unwrap();
    s.cancelled().await;
}
