//! The machinery of the multi-replica tests checks itself: the freezable proxy stalls and resumes
//! bytes both ways; the ledger checks find overlaps and pair reconciles as they should; two
//! `host` replicas without any coordination both reconcile every ConfigMap (so the overlap
//! check does fire on them), a kill leaves an interval closed at the exit, a SIGTERM drains;
//! a frozen replica reconciles nothing new while the other goes on, and catches up when thawed.

mod support;

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use support::freeze_proxy::FreezeProxy;
use support::process::WAIT;
use support::replicas::*;

/// A bound for a step that needs no compile.
const STEP: Duration = Duration::from_secs(30);

fn rec(replica: usize, key: &str, rv: &str, start_ns: u64, end_ns: u64) -> LedgerRecord {
    LedgerRecord {
        replica,
        key: key.into(),
        rv: rv.into(),
        start_ns,
        end_ns,
        finished: true,
    }
}

#[test]
fn overlaps_are_same_key_other_replica_intersecting_intervals() {
    let recs = [
        rec(0, "ns/a", "1", 100, 200),
        rec(1, "ns/a", "1", 200, 300), // touches, does not intersect
        rec(0, "ns/a", "2", 250, 260), // inside replica 1's [200, 300): an overlap
        rec(0, "ns/b", "1", 100, 200),
        rec(0, "ns/b", "2", 150, 250), // same replica: not an overlap
        rec(1, "ns/c", "1", 100, 200),
        rec(2, "ns/d", "1", 100, 200), // other key
    ];
    let found = overlaps(&recs);
    assert_eq!(found, vec![(recs[1].clone(), recs[2].clone())]);
    assert_eq!(
        reconciled_pairs(&recs),
        pairs([
            ("ns/a", "1"),
            ("ns/a", "2"),
            ("ns/b", "1"),
            ("ns/b", "2"),
            ("ns/c", "1"),
            ("ns/d", "1")
        ])
    );
}

#[test]
fn the_ledger_parser_pairs_lines_and_closes_open_intervals() {
    let log = [
        "2026-01-01T00:00:00Z  INFO plugin::stdout: LEDGER start ns/a 5 100 plugin=ledger",
        "2026-01-01T00:00:00Z  INFO plugin::stdout: LEDGER start ns/b - 110 plugin=ledger",
        "2026-01-01T00:00:00Z  INFO plugin::stdout: LEDGER end ns/a 5 150 plugin=ledger",
        "2026-01-01T00:00:00Z  WARN kwh_plugin: quoting LEDGER start ns/c 7 120",
        "2026-01-01T00:00:00Z  INFO plugin::stdout: LEDGER start ns/d 9 160 plugin=ledger",
        "2026-01-01T00:00:00Z  INFO plugin::stdout: LEDGER start ns/d 9 170 plugin=ledger",
        r#"{"level":"INFO","fields":{"message":"LEDGER end ns/d 9 180","plugin":"ledger"},"target":"plugin::stdout"}"#,
    ];
    let running = parse_ledger(3, log, None);
    let d1 = LedgerRecord {
        end_ns: 170,
        finished: false,
        ..rec(3, "ns/d", "9", 160, 0)
    };
    let open_b = LedgerRecord {
        end_ns: u64::MAX,
        finished: false,
        ..rec(3, "ns/b", "-", 110, 0)
    };
    assert_eq!(
        running,
        vec![
            rec(3, "ns/a", "5", 100, 150),
            open_b.clone(),
            d1.clone(),
            rec(3, "ns/d", "9", 170, 180),
        ]
    );
    let exited = parse_ledger(3, log, Some(500));
    assert_eq!(
        exited[1],
        LedgerRecord {
            end_ns: 500,
            ..open_b
        }
    );
    assert_eq!(
        reconciled_pairs(&exited),
        pairs([("ns/a", "5"), ("ns/d", "9")])
    );
}

/// An echo server on loopback; its address.
async fn echo_server() -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = c.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// Reads exactly `n` bytes within `within`, or `None`.
async fn read_n(c: &mut TcpStream, n: usize, within: Duration) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; n];
    tokio::time::timeout(within, c.read_exact(&mut buf))
        .await
        .ok()?
        .ok()?;
    Some(buf)
}

#[tokio::test]
async fn the_proxy_stalls_both_ways_and_holds_new_connections_while_frozen() {
    tokio::time::timeout(STEP, async {
        let proxy = FreezeProxy::start(echo_server().await).await;
        let mut a = TcpStream::connect(proxy.addr()).await.expect("connect");
        a.write_all(b"one").await.expect("write");
        assert_eq!(read_n(&mut a, 3, STEP).await.as_deref(), Some(&b"one"[..]));
        assert_eq!(proxy.forwarded(), 6);

        proxy.freeze();
        a.write_all(b"two").await.expect("write while frozen");
        // A new connection is accepted but not connected onward.
        let mut b = TcpStream::connect(proxy.addr()).await.expect("connect");
        b.write_all(b"three").await.expect("write while frozen");
        // Nothing comes back within a window many times the round trip seen above, and the
        // proxy wrote nothing onward (so not even the request went through).
        assert_eq!(read_n(&mut a, 3, Duration::from_millis(500)).await, None);
        assert_eq!(read_n(&mut b, 5, Duration::from_millis(100)).await, None);
        assert_eq!(proxy.forwarded(), 6);
        assert_eq!(proxy.accepted(), 2);

        proxy.thaw();
        assert_eq!(read_n(&mut a, 3, STEP).await.as_deref(), Some(&b"two"[..]));
        assert_eq!(
            read_n(&mut b, 5, STEP).await.as_deref(),
            Some(&b"three"[..])
        );
        assert_eq!(proxy.forwarded(), 6 + 6 + 10);
    })
    .await
    .expect("in time");
}

/// Two replicas without any coordination: each reconciles every ConfigMap (its own pairs are
/// the created set), and with a hold they reconcile one update at overlapping times, which the
/// overlap check reports. Then a kill mid-reconcile leaves that interval closed at the exit,
/// and a SIGTERM lets the other's reconcile finish before the process exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsharded_replicas_all_reconcile_everything_and_overlap() {
    let mut rs = Replicas::start().await;
    rs.emulator.create_namespace("ledger").await;
    let mut created = Vec::new();
    for name in ["a", "b", "c"] {
        let rv = rs
            .emulator
            .create_cm("ledger", name, json!({"v": "0"}))
            .await;
        created.push((format!("ledger/{name}"), rv));
    }
    let created: std::collections::BTreeSet<_> = created.into_iter().collect();
    let hold_ms = 1500;
    let plugins = ledger_plugins_file(&rs.dir, json!({ "holdMs": hold_ms }), 3);
    for _ in 0..2 {
        rs.spawn(["--plugins".as_ref(), plugins.as_os_str()]).await;
    }
    for id in 0..2 {
        if let Err(missing) = rs.wait_reconciled(Some(id), &created, WAIT).await {
            panic!("replica {id} missed {missing:?}:\n{}", rs.log());
        }
    }
    let recs = rs.records();
    for id in 0..2 {
        assert_eq!(reconciled_pairs(&of_replica(&recs, id)), created);
    }
    assert!(rs.replicas[0].wait_ready(STEP).await, "{}", rs.log());
    let (code, statusz) = rs.replicas[1].get("/statusz").await;
    assert_eq!(code, 200);
    assert!(statusz.contains("ledger"), "{statusz}");

    // Both are idle now; one update reaches both within far less than the hold.
    let rv = rs
        .emulator
        .update_cm("ledger", "a", json!({"v": "1"}))
        .await;
    let want = pairs([("ledger/a", rv.as_str())]);
    for id in 0..2 {
        if let Err(missing) = rs.wait_reconciled(Some(id), &want, STEP).await {
            panic!("replica {id} missed {missing:?}:\n{}", rs.ledger_log());
        }
    }
    let found = overlaps(&rs.records());
    assert!(
        found
            .iter()
            .any(|(x, y)| x.key == "ledger/a" && x.rv == rv && y.rv == rv),
        "{found:?}\n{}",
        rs.ledger_log()
    );

    // Another update; both start it; replica 1 is killed mid-hold, replica 0 drains on SIGTERM.
    let rv = rs
        .emulator
        .update_cm("ledger", "a", json!({"v": "2"}))
        .await;
    let started = |recs: &[LedgerRecord], id: usize| {
        recs.iter()
            .any(|r| r.replica == id && r.rv == rv && !r.finished)
    };
    let both = rs
        .wait_for(STEP, |recs| started(recs, 0) && started(recs, 1))
        .await;
    assert!(both.is_ok(), "{}", rs.ledger_log());
    let killed = rs.kill(1).await;
    assert!(!killed.success());
    let terminated = rs.sigterm(0, STEP).await;
    assert!(terminated.success(), "{}", rs.log());
    let recs = rs.records();
    let last = |id: usize| {
        recs.iter()
            .rfind(|r| r.replica == id && r.rv == rv)
            .cloned()
            .expect("started")
    };
    let (drained, cut) = (last(0), last(1));
    assert!(drained.finished, "SIGTERM drains: {drained:?}");
    assert!(drained.end_ns - drained.start_ns >= hold_ms * 1_000_000);
    assert!(!cut.finished, "killed mid-hold: {cut:?}");
    assert_eq!(Some(cut.end_ns), rs.replicas[1].exited_ns());
    assert!(cut.end_ns > cut.start_ns);
}

/// Freezing one replica's proxy (an HTTPS emulator behind it) stops its reconciles while the
/// other reconciles an update; it is not a vacuous pass: the window is several times the other
/// replica's own latency for the same update, and once thawed the frozen one reconciles it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_replica_reconciles_nothing_new_until_thawed() {
    let mut rs = Replicas::on(EmulatorProcess::start(&["--tls"]).await);
    assert!(
        rs.emulator.url.starts_with("https://"),
        "{}",
        rs.emulator.url
    );
    rs.emulator.create_namespace("ledger").await;
    let rv1 = rs
        .emulator
        .create_cm("ledger", "probe", json!({"v": "0"}))
        .await;
    let plugins = ledger_plugins_file(&rs.dir, json!({}), 1);
    for _ in 0..2 {
        rs.spawn(["--plugins".as_ref(), plugins.as_os_str()]).await;
    }
    let first = pairs([("ledger/probe", rv1.as_str())]);
    for id in 0..2 {
        if let Err(missing) = rs.wait_reconciled(Some(id), &first, WAIT).await {
            panic!("replica {id} missed {missing:?}:\n{}", rs.log());
        }
        assert!(rs.replicas[id].wait_ready(STEP).await, "{}", rs.log());
    }

    rs.replicas[1].freeze();
    let frozen_at = now_ns();
    let updated_at = tokio::time::Instant::now();
    let rv2 = rs
        .emulator
        .update_cm("ledger", "probe", json!({"v": "1"}))
        .await;
    let second = pairs([("ledger/probe", rv2.as_str())]);
    if let Err(missing) = rs.wait_reconciled(Some(0), &second, STEP).await {
        panic!("the unfrozen replica missed {missing:?}:\n{}", rs.log());
    }
    let latency = updated_at.elapsed();
    let window = (latency * 10).clamp(Duration::from_secs(2), Duration::from_secs(20));
    let new_in_frozen = |recs: &[LedgerRecord]| {
        recs.iter()
            .any(|r| r.replica == 1 && (r.start_ns >= frozen_at || r.rv == rv2))
    };
    if let Ok(recs) = rs.wait_for(window, new_in_frozen).await {
        panic!(
            "the frozen replica reconciled within {window:?}: {:?}",
            of_replica(&recs, 1)
        );
    }
    // Its ops server is its own, not behind the proxy: still served while partitioned.
    assert_eq!(rs.replicas[1].get("/healthz").await.0, 200);

    rs.replicas[1].thaw();
    if let Err(missing) = rs.wait_reconciled(Some(1), &second, STEP).await {
        panic!("the thawed replica missed {missing:?}:\n{}", rs.log());
    }
}
