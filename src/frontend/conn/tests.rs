use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn limits(max: usize, header_ms: u64, idle_ms: u64, http2: bool) -> ConnLimits {
    ConnLimits {
        name: "test",
        cap_flag: "--test-max-connections",
        max_connections: max,
        header_timeout: (header_ms > 0).then(|| Duration::from_millis(header_ms)),
        idle_timeout: (idle_ms > 0).then(|| Duration::from_millis(idle_ms)),
        max_lifetime: None,
        http2,
    }
}

fn snap(accepted: u64, head_since: u64, active: u32, served: u64, last_io: u64, last_done: u64) -> Snapshot {
    Snapshot { accepted, head_since, active, served, last_io, last_done }
}

#[test]
fn header_timeout_runs_from_the_head_start_and_stops_while_a_request_runs() {
    let l = limits(10, 1000, 5000, false);
    assert_eq!(verdict(&snap(1, 1, 0, 0, 1, 0), 1000, &l), Verdict::Keep);
    assert_eq!(verdict(&snap(1, 1, 0, 0, 900, 0), 1002, &l), Verdict::HeaderTimeout, "bytes do not reset it");
    assert_eq!(verdict(&snap(1, 0, 1, 1, 1, 0), 100_000, &l), Verdict::Keep, "a request in flight");
    // A later request's head started at 7000.
    assert_eq!(verdict(&snap(1, 7000, 0, 3, 7500, 6000), 8001, &l), Verdict::HeaderTimeout);
    assert_eq!(verdict(&snap(1, 7000, 0, 3, 7500, 6000), 7999, &l), Verdict::Keep);
    // No header timeout configured.
    assert_eq!(verdict(&snap(1, 1, 0, 0, 1, 0), 1_000_000, &limits(10, 0, 0, false)), Verdict::Keep);
}

#[test]
fn idle_timeout_counts_from_the_last_request_or_byte() {
    let l = limits(10, 1000, 5000, false);
    assert_eq!(verdict(&snap(1, 0, 0, 1, 100, 200), 5200, &l), Verdict::Keep);
    assert_eq!(verdict(&snap(1, 0, 0, 1, 100, 200), 5201, &l), Verdict::Idle);
    assert_eq!(verdict(&snap(1, 0, 0, 1, 4000, 200), 8000, &l), Verdict::Keep, "a response still being written");
    // HTTP/2 connections are not closed for idleness, nor for a slow head after their first request.
    let h2 = limits(10, 1000, 5000, true);
    assert_eq!(verdict(&snap(1, 0, 0, 1, 100, 200), 1_000_000, &h2), Verdict::Keep);
    assert_eq!(verdict(&snap(1, 1, 0, 0, 1, 0), 1002, &h2), Verdict::HeaderTimeout);
}

#[test]
fn a_connection_past_its_lifetime_goes_even_with_requests_in_flight() {
    let l = ConnLimits { max_lifetime: Some(Duration::from_millis(1000)), ..limits(10, 0, 0, true) };
    assert_eq!(verdict(&snap(1, 0, 3, 9, 900, 900), 1001, &l), Verdict::Keep);
    assert_eq!(verdict(&snap(1, 0, 3, 9, 900, 900), 1002, &l), Verdict::TooOld);
}

#[test]
fn the_victim_is_the_oldest_connection_without_a_request_then_the_longest_idle() {
    let conns = [
        (1, snap(10, 0, 0, 5, 500, 400)),
        (2, snap(20, 20, 0, 0, 30, 0)),
        (3, snap(5, 0, 2, 1, 900, 0)),
        (4, snap(15, 15, 0, 0, 40, 0)),
    ];
    assert_eq!(victim(&conns), Some(4), "never served, accepted first");
    assert_eq!(victim(&conns[..1]), Some(1));
    let served = [(1, snap(10, 0, 0, 5, 500, 400)), (2, snap(1, 0, 0, 1, 100, 300)), (3, snap(1, 0, 1, 1, 1, 1))];
    assert_eq!(victim(&served), Some(2), "idle longest");
    assert_eq!(victim(&[(3, snap(1, 0, 1, 1, 1, 1))]), None, "busy connections stay");
    assert_eq!(victim(&[]), None);
}

#[test]
fn automatic_caps_leave_room_for_the_rest_of_the_server() {
    assert_eq!(auto_max_connections(Some(1024), 2), (1024 - 256 - 64) / 2);
    assert_eq!(auto_max_connections(Some(1024), 1), 1024 - 256 - 64);
    assert_eq!(auto_max_connections(Some(100), 2), 16);
    assert_eq!(auto_max_connections(None, 2), 1 << 16);
}

async fn listener(l: ConnLimits) -> (GuardedListener, std::net::SocketAddr) {
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    (GuardedListener::new(tcp, l), addr)
}

/// Accepts for ever, reading each connection until it fails.
fn serve_reads(mut l: GuardedListener) {
    tokio::spawn(async move {
        loop {
            let mut s = l.accept_guarded().await;
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
            });
        }
    });
}

/// Whether the server end closed `s` within `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 8];
    matches!(tokio::time::timeout(within, s.read(&mut buf)).await, Ok(Ok(0)) | Ok(Err(_)))
}

#[tokio::test]
async fn a_new_connection_at_the_cap_closes_the_oldest_one_without_a_request() {
    let (l, addr) = listener(limits(2, 0, 0, false)).await;
    serve_reads(l);
    let mut a = TcpStream::connect(addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut b = TcpStream::connect(addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    assert!(closed_within(&mut a, Duration::from_secs(5)).await, "the oldest connection is closed for room");
    assert!(!closed_within(&mut b, Duration::from_millis(300)).await);
    assert!(!closed_within(&mut c, Duration::from_millis(300)).await);
}

#[tokio::test]
async fn a_busy_connection_is_never_closed_for_room_and_the_newcomer_waits() {
    let (mut l, addr) = listener(limits(1, 0, 0, false)).await;
    let mut a = TcpStream::connect(addr).await.unwrap();
    let held = l.accept_guarded().await;
    let active = Active::start(held.conn());
    let mut b = TcpStream::connect(addr).await.unwrap();
    let waiting = tokio::spawn(async move {
        let s = l.accept_guarded().await;
        (l, s)
    });
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!waiting.is_finished(), "no room while the only connection is busy");
    assert!(!closed_within(&mut a, Duration::from_millis(100)).await);
    drop(active);
    // Now idle, it is the victim; the newcomer gets in.
    let (_l, _s) = tokio::time::timeout(Duration::from_secs(5), waiting).await.unwrap().unwrap();
    drop(held);
    assert!(closed_within(&mut a, Duration::from_secs(5)).await);
    b.write_all(b"x").await.unwrap();
}

#[tokio::test]
async fn a_slow_head_is_closed_after_the_header_timeout_and_an_idle_one_after_the_idle_timeout() {
    let (l, addr) = listener(limits(10, 300, 0, false)).await;
    serve_reads(l);
    let mut s = TcpStream::connect(addr).await.unwrap();
    let start = Instant::now();
    // Trickling bytes does not keep it open.
    for _ in 0..3 {
        let _ = s.write_all(b"G").await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(closed_within(&mut s, Duration::from_secs(5)).await);
    assert!(start.elapsed() >= Duration::from_millis(300));

    let (mut l, addr) = listener(limits(10, 0, 300, false)).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut server = l.accept_guarded().await;
    drop(Active::start(server.conn()));
    let reading = tokio::spawn(async move {
        let mut buf = [0u8; 8];
        server.read(&mut buf).await
    });
    assert!(closed_within(&mut s, Duration::from_secs(5)).await);
    assert!(reading.await.unwrap().is_err(), "the server side's read fails once the connection is closed");
}

/// One poll of a write of `bytes` to `s`: `None` while held back.
fn try_write(s: &mut GuardedStream, bytes: &[u8], cx: &mut Context<'_>) -> Option<usize> {
    match Pin::new(s).poll_write(cx, bytes) {
        Poll::Ready(r) => Some(r.unwrap()),
        Poll::Pending => None,
    }
}

#[tokio::test]
async fn an_http2_write_waits_for_the_tasks_ready_before_it_while_replies_are_on_their_way() {
    for http2 in [false, true] {
        let (mut l, addr) = listener(limits(10, 0, 0, http2)).await;
        let mut client = TcpStream::connect(addr).await.unwrap();
        let mut s = l.accept_guarded().await;
        // A reply sent and not yet taken by its request (other tests may add their own).
        let (reply, answer) = crate::core::scheduler::Reply::channel();
        reply.send(Ok(Default::default())).unwrap();
        assert!(crate::core::scheduler::replies_on_the_way() >= 1);
        let first = std::future::poll_fn(|cx| Poll::Ready(try_write(&mut s, b"ab", cx))).await;
        if !http2 {
            // HTTP/1: one request at a time on a connection, nothing to wait for.
            assert_eq!(first, Some(2));
            continue;
        }
        assert_eq!(first, None, "held back while a reply is on its way");
        // The runtime runs the ready tasks, then wakes the held write, which goes, even though the
        // reply is still on its way (the task that would take it may be anywhere).
        let wrote = tokio::time::timeout(
            Duration::from_secs(5),
            std::future::poll_fn(|cx| match try_write(&mut s, b"ab", cx) {
                Some(n) => Poll::Ready(n),
                None => Poll::Pending,
            }),
        )
        .await
        .expect("the held write went once the runtime had run the ready tasks");
        assert_eq!(wrote, 2);
        let mut buf = [0u8; 2];
        client.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ab");
        drop(answer);
    }
}
