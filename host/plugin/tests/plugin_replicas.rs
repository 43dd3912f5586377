//! A plugin runtime as one of several replicas, over HTTP to the emulator: behind a closed
//! leader fence it keeps its caches but calls no guest, queues nothing and writes nothing; when
//! it becomes the leader it catches up from its cache (no relist) and reconciles every object;
//! when the fence closes again it stops at once. Sharded, two runtimes divide the keys between
//! them: each key is reconciled by exactly one. Membership Leases make the members find each
//! other and notice a member that leaves.

#[path = "../../../tests/support/mod.rs"]
mod support;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use kwh_client::leader_election::{Fence, Role, Timings};
use kwh_plugin::membership::{MemberState, Membership};
use kwh_plugin::ownership::{ElectionStatus, Ownership, Shards};
use kwh_plugin::RuntimeOptions;
use support::cluster::{client, cm, emulator, eventually, get_cm, runtime_with, start};

const T: Duration = Duration::from_secs(30);

fn copies(em: &kwh_emulator::EmulatorHandle) -> usize {
    em.list("v1", "ConfigMap", Some("default"))
        .iter()
        .filter(|o| {
            o["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("-copy"))
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_acts_on_nothing_and_a_new_leader_catches_up_from_its_cache() {
    let em = emulator().await;
    for i in 0..20 {
        em.create(cm(&format!("cm-{i}"), json!({"k": "v"})))
            .expect("seed");
    }
    let fence = Fence::closed();
    let (role, role_rx) = tokio::sync::watch::channel(Role::Standby {
        leader: Some("other".into()),
    });
    let own = Ownership::new(
        fence.clone(),
        None,
        Some(ElectionStatus {
            lease: "default/host".into(),
            identity: "me".into(),
            role: role_rx,
        }),
    );
    let mut rt = runtime_with(
        &em,
        RuntimeOptions {
            ownership: own.clone(),
            ..RuntimeOptions::default()
        },
    );
    start(&mut rt, &["copier"]).await;
    let p = rt.plugins()[0].clone();
    assert!(
        eventually(T, || p.has_synced()).await,
        "a standby's caches sync"
    );
    assert!(
        eventually(T, || p.dispatcher().skipped.load(Ordering::Relaxed) >= 20).await,
        "the initial list reached the dispatcher"
    );
    let lists = em.stats().requests("list");
    assert_eq!(p.queue().len(), 0, "a standby's queue stays empty");
    assert_eq!(p.reconcile_stats().total.load(Ordering::Relaxed), 0);
    assert_eq!(copies(&em), 0, "a standby writes nothing");
    let status = rt.status();
    assert_eq!(
        status.readiness(),
        (true, "ok\nrole: standby (leader: other)\n".to_string()),
        "a synced standby is ready, and says so"
    );
    let metric = "leader_election_master_status{name=\"host\"}";
    assert!(status
        .render_metrics()
        .unwrap()
        .contains(&format!("{metric} 0")));
    let statusz: serde_json::Value = serde_json::from_str(&status.render_status()).unwrap();
    assert_eq!(statusz["replica"]["role"], "standby");
    assert_eq!(statusz["replica"]["leader"], false);

    // Leading: the cache is replayed to the handlers, every object is reconciled.
    fence.open_until(Instant::now() + Duration::from_secs(3600));
    role.send_replace(Role::Leader);
    own.gained(kwh_plugin::ownership::Gain::Leadership);
    assert!(
        eventually(T, || copies(&em) == 20).await,
        "the new leader made {} of 20 copies",
        copies(&em)
    );
    assert_eq!(
        em.stats().requests("list"),
        lists,
        "taking over needs no relist"
    );
    assert_eq!(status.readiness(), (true, "ok\nrole: leader\n".to_string()));
    assert!(status
        .render_metrics()
        .unwrap()
        .contains(&format!("{metric} 1")));

    // The fence closes (the lease could not be renewed): the next notification is skipped
    // and nothing is written for it.
    fence.close();
    let skipped = p.dispatcher().skipped.load(Ordering::Relaxed);
    em.create(cm("late", json!({"k": "v"}))).expect("create");
    assert!(
        eventually(T, || p.dispatcher().skipped.load(Ordering::Relaxed)
            > skipped)
        .await,
        "the notification reached the fenced dispatcher"
    );
    assert!(
        get_cm(&em, "late-copy").is_none(),
        "a fenced leader writes nothing"
    );
    role.send_replace(Role::Lost);
    let (ready, why) = status.readiness();
    assert!(!ready && why.contains("lost its lease"), "{why}");
    rt.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sharded_runtimes_reconcile_each_key_exactly_once_between_them() {
    let em = emulator().await;
    let n = 200;
    for i in 0..n {
        em.create(cm(&format!("cm-{i}"), json!({"k": "v"})))
            .expect("seed");
    }
    let members = vec!["replica-a".to_string(), "replica-b".to_string()];
    let mut runtimes = Vec::new();
    for me in &members {
        let fence = Fence::closed();
        fence.open_until(Instant::now() + Duration::from_secs(3600));
        // No previous owners to wait for: a zero lease.
        let shards = Arc::new(Shards::new(me, fence, Duration::ZERO));
        shards.update(&members, Instant::now());
        let own = Ownership::new(Fence::closed(), Some(shards), None);
        let mut rt = runtime_with(
            &em,
            RuntimeOptions {
                ownership: own,
                ..RuntimeOptions::default()
            },
        );
        start(&mut rt, &["bench-sdk"]).await;
        runtimes.push(rt);
    }
    let totals = || {
        runtimes
            .iter()
            .map(|rt| {
                rt.plugins()[0]
                    .reconcile_stats()
                    .total
                    .load(Ordering::Relaxed)
            })
            .collect::<Vec<_>>()
    };
    assert!(
        eventually(T, || totals().iter().sum::<u64>() >= n).await,
        "{:?}",
        totals()
    );
    // Settle: no reconcile beyond one per key arrives later.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = totals();
    assert_eq!(t.iter().sum::<u64>(), n, "each key exactly once: {t:?}");
    for c in &t {
        assert!((60..=140).contains(c), "uneven split {t:?}");
    }
    for rt in runtimes {
        rt.shutdown(Duration::from_secs(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_find_each_other_through_their_leases_and_a_leaver_is_gone_at_once() {
    let em = emulator().await;
    let timings = Timings {
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(200),
    };
    let mut shards = Vec::new();
    let mut members = Vec::new();
    for me in ["a", "b"] {
        let s = Arc::new(Shards::new(me, Fence::closed(), timings.lease_duration));
        let own = Ownership::new(Fence::closed(), Some(s.clone()), None);
        members.push(Membership::spawn(
            client(&em),
            "default",
            "group",
            timings.clone(),
            s.clone(),
            own,
            None,
        ));
        shards.push(s);
    }
    assert!(
        eventually(T, || shards.iter().all(|s| s.members() == ["a", "b"])).await,
        "{:?}",
        shards.iter().map(|s| s.members()).collect::<Vec<_>>()
    );
    let leases = em.list("coordination.k8s.io/v1", "Lease", Some("default"));
    assert_eq!(leases.len(), 2);
    for l in &leases {
        assert_eq!(
            l["metadata"]["labels"]["kube-wasm-host.io/shard-group"], "group",
            "{l}"
        );
    }
    assert!(shards.iter().all(|s| s.fence.is_open()));
    let b = members.pop().expect("b");
    let state = b.state();
    assert_eq!(*state.borrow(), MemberState::Member);
    let left = Instant::now();
    b.leave().await;
    assert!(!shards[1].fence.is_open(), "a leaver's fence is closed");
    assert!(
        eventually(T, || shards[0].members() == ["a"]).await,
        "a still sees {:?}",
        shards[0].members()
    );
    // Deleted, not expired: seen within a few retry periods, before the lease could run out.
    assert!(
        left.elapsed() < timings.lease_duration,
        "{:?}",
        left.elapsed()
    );
    members.pop().expect("a").leave().await;
    assert!(em
        .list("coordination.k8s.io/v1", "Lease", Some("default"))
        .is_empty());
}
