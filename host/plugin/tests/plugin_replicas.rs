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
use std::time::Duration;
use tokio::time::Instant;

use serde_json::json;

use kwh_coordination::leader_election::{Fence, Role, Timings};
use kwh_coordination::membership::{MemberState, Membership};
use kwh_coordination::ownership::{ElectionStatus, Ownership, Shards};
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
    own.gained(kwh_coordination::ownership::Gain::Leadership);
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

/// One line of the `journal` guest: (what, key, resourceVersion of the object delivered).
fn journal(replica: &str) -> Vec<(String, String, u64)> {
    let prefix = format!("JOURNAL {replica} ");
    support::logs::capture_global()
        .lines()
        .into_iter()
        .filter(|l| l.target == "plugin::stdout")
        .filter_map(|l| {
            let rest = l.message.strip_prefix(&prefix)?;
            let f: Vec<&str> = rest.split(' ').collect();
            let rv = f.last()?.parse().ok()?;
            Some((f[0].to_string(), f[1].to_string(), rv))
        })
        .collect()
}

/// Per key: versions never go back, and after a delete only an add of a later version.
fn check_journal_order(log: &[(String, String, u64)]) -> Result<(), String> {
    let mut last: std::collections::HashMap<&str, (&str, u64)> = Default::default();
    for (i, (what, key, rv)) in log.iter().enumerate() {
        if let Some(&(prev, prv)) = last.get(key.as_str()) {
            let bad = match (prev, what.as_str()) {
                ("delete", "add") => *rv <= prv,
                ("delete", _) => true,
                _ => *rv < prv,
            };
            if bad {
                return Err(format!("#{i} {key}: {what}@{rv} after {prev}@{prv}"));
            }
        }
        last.insert(key, (what, *rv));
    }
    Ok(())
}

fn journal_spec(replica: &str, namespace: &str) -> kwh_plugin::PluginSpec {
    let mut spec = kwh_plugin::PluginSpec::with_defaults(
        support::guests::guest("journal"),
        &RuntimeOptions::default(),
    );
    spec.config = Arc::new(json!({"replica": replica, "namespace": namespace}));
    // Its lines are the journal read back: every one of them, no log budget.
    spec.limits.log_lines_per_second = 0;
    spec
}

fn ns_cm(namespace: &str, name: &str, v: u64) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace}, "data": {"v": v.to_string()}})
}

/// Issue "Safe under faults" 1.2: taking over while updates and deletes stream in, the guest
/// sees every object's versions in order and never an add after its delete, however the
/// replays of its cache and the live notifications meet (spec 4.1's order, kept by replaying
/// through each handler's own queue).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeovers_during_a_stream_of_updates_and_deletes_keep_each_objects_order() {
    const NS: &str = "takeover";
    const KEYS: u64 = 30;
    // The guest's lines are captured from now on.
    support::logs::capture_global();
    let em = emulator().await;
    em.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}))
        .expect("namespace");
    for i in 0..KEYS {
        em.create(ns_cm(NS, &format!("cm-{i}"), 0)).expect("seed");
    }
    let fence = Fence::closed();
    let own = Ownership::new(fence.clone(), None, None);
    let mut rt = runtime_with(
        &em,
        RuntimeOptions {
            ownership: own.clone(),
            ..RuntimeOptions::default()
        },
    );
    let started = tokio::time::timeout(T, rt.start_spec(journal_spec("takeover", NS)))
        .await
        .expect("in time")
        .expect("starts");
    assert_eq!(started, kwh_plugin::Started::Running);
    assert!(eventually(T, || rt.plugins()[0].has_synced()).await);

    // The stream: each round updates every object, deleting and re-creating every fifth.
    let writer = {
        let em = em.clone();
        tokio::task::spawn_blocking(move || {
            for round in 1..=40u64 {
                for i in 0..KEYS {
                    let name = format!("cm-{i}");
                    if (round + i) % 5 == 0 {
                        em.delete("v1", "ConfigMap", Some(NS), &name)
                            .expect("delete");
                        em.create(ns_cm(NS, &name, round)).expect("re-create");
                    } else {
                        em.update(ns_cm(NS, &name, round)).expect("update");
                    }
                }
                // Paced, so that the stream spans many takeovers.
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    // Taking over while it runs, again and again: each gain replays the whole cache while
    // live notifications keep arriving.
    fence.open_until(Instant::now() + Duration::from_secs(3600));
    let mut takeovers = 0;
    while !writer.is_finished() {
        own.gained(kwh_coordination::ownership::Gain::Leadership);
        takeovers += 1;
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    writer.await.expect("writer");
    // Every object's last version reaches the guest.
    let last: Vec<(String, u64)> = em
        .list("v1", "ConfigMap", Some(NS))
        .iter()
        .map(|o| {
            let key = format!("{NS}/{}", o["metadata"]["name"].as_str().unwrap());
            let rv = o["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap();
            (key, rv)
        })
        .collect();
    assert_eq!(last.len() as u64, KEYS);
    assert!(
        eventually(T, || {
            let log = journal("takeover");
            last.iter()
                .all(|(k, rv)| log.iter().any(|(_, lk, lrv)| lk == k && lrv == rv))
        })
        .await,
        "the last versions reach the guest"
    );
    let log = journal("takeover");
    assert!(takeovers >= 3, "{takeovers} takeovers");
    assert!(
        log.iter().filter(|(w, ..)| w == "delete").count() > 0,
        "deletes were delivered"
    );
    if let Err(e) = check_journal_order(&log) {
        panic!("{e} (of {} lines, {takeovers} takeovers)", log.len());
    }
    rt.shutdown(Duration::from_secs(5)).await;
}

/// Issue "Safe under faults" 1.3: only a replica that gains keys replays, and only the
/// objects of the keys it gained. A joins alone, B joins (A only loses keys: no replay), B
/// leaves (A replays B's keys, nothing else): on A each object was added once, B's twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_replays_nothing_and_a_leave_replays_only_the_keys_that_moved() {
    const NS: &str = "moves";
    const N: usize = 120;
    support::logs::capture_global();
    let em = emulator().await;
    em.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}))
        .expect("namespace");
    for i in 0..N {
        em.create(ns_cm(NS, &format!("cm-{i}"), 0)).expect("seed");
    }
    let open = || {
        let f = Fence::closed();
        f.open_until(Instant::now() + Duration::from_secs(3600));
        f
    };
    let sharded = |me: &str| {
        let s = Arc::new(Shards::new(me, open(), Duration::ZERO));
        (s.clone(), Ownership::new(Fence::closed(), Some(s), None))
    };
    let (shards_a, own_a) = sharded("a");
    own_a.gained(
        shards_a
            .update(&["a".to_string()], Instant::now())
            .expect("first view"),
    );
    let mut rt_a = runtime_with(
        &em,
        RuntimeOptions {
            ownership: own_a.clone(),
            ..RuntimeOptions::default()
        },
    );
    tokio::time::timeout(T, rt_a.start_spec(journal_spec("a", NS)))
        .await
        .expect("in time")
        .expect("starts");
    let adds = |r: &str| {
        let mut m = std::collections::BTreeMap::<String, usize>::new();
        for (what, key, _) in journal(r) {
            if what == "add" {
                *m.entry(key).or_default() += 1;
            }
        }
        m
    };
    assert!(
        eventually(T, || adds("a").len() == N).await,
        "A's initial list"
    );

    // B joins: B starts with its own first view; A sees the join and gains nothing.
    let (shards_b, own_b) = sharded("b");
    let both = ["a".to_string(), "b".to_string()];
    own_b.gained(shards_b.update(&both, Instant::now()).expect("first view"));
    let mut rt_b = runtime_with(
        &em,
        RuntimeOptions {
            ownership: own_b.clone(),
            ..RuntimeOptions::default()
        },
    );
    tokio::time::timeout(T, rt_b.start_spec(journal_spec("b", NS)))
        .await
        .expect("in time")
        .expect("starts");
    let join = shards_a.update(&both, Instant::now()).expect("a change");
    own_a.gained(join);
    assert!(
        eventually(T, || adds("b").len() == N).await,
        "B's initial list"
    );

    // B leaves: A gains B's keys.
    own_a.gained(
        shards_a
            .update(&["a".to_string()], Instant::now())
            .expect("a change"),
    );
    // B's keys: those B admits under the two-member view it still holds.
    let b_keys: std::collections::BTreeSet<String> = (0..N)
        .map(|i| format!("{NS}/cm-{i}"))
        .filter(|k| shards_b.admit("journal", k) != kwh_coordination::ownership::Admit::No)
        .collect();
    assert!(
        (30..90).contains(&b_keys.len()),
        "B owned {} keys",
        b_keys.len()
    );
    let expected = N + b_keys.len();
    assert!(
        eventually(T, || adds("a").values().sum::<usize>() >= expected).await,
        "A replays B's keys: {} adds, {expected} expected",
        adds("a").values().sum::<usize>()
    );
    // A sentinel created now reaches A behind anything replayed before it.
    em.create(ns_cm(NS, "sentinel", 0)).expect("sentinel");
    assert!(eventually(T, || adds("a").contains_key(&format!("{NS}/sentinel"))).await);
    let a = adds("a");
    for i in 0..N {
        let k = format!("{NS}/cm-{i}");
        let want = if b_keys.contains(&k) { 2 } else { 1 };
        assert_eq!(a.get(&k), Some(&want), "{k} on A: {a:?}");
    }
    let b = adds("b");
    assert!(
        b.iter()
            .filter(|(k, _)| k.contains("cm-"))
            .all(|(_, n)| *n == 1),
        "B: each object once: {b:?}"
    );
    rt_b.shutdown(Duration::from_secs(5)).await;
    rt_a.shutdown(Duration::from_secs(5)).await;
}

thread_local! {
    /// How many replay tasks polled on this thread the perturbation hook still holds back.
    static HOLD_REPLAYS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Holds back the next `n` replay tasks started on this thread (a current-thread runtime's
/// test) for an hour: as a busy runtime may leave a spawned task unpolled. Other tests' runtimes
/// run on their own threads, which the hook leaves alone.
fn hold_replays(n: u32) {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        kwh_plugin::perturb::install(|p| {
            (p == kwh_plugin::perturb::Point::ReplayStarts
                && HOLD_REPLAYS.with(|h| {
                    let left = h.get();
                    h.set(left.saturating_sub(1));
                    left > 0
                }))
            .then_some(Duration::from_secs(3600))
        });
    });
    HOLD_REPLAYS.with(|h| h.set(n));
}

/// Issue "Revisions change hands exactly" 3 (found by the simulation, seed 37 of 0..48): a
/// gain published while a revision's replay task had not read it yet, then an upgrade. The
/// upgrade used to abort that task, and the gain went with it: the keys moved to this replica
/// were replayed by nobody, each waiting for its next event. The new revision now reads the
/// old one's subscription, with what it had not read.
#[tokio::test]
async fn a_gain_not_yet_read_when_an_upgrade_lands_is_replayed_by_the_new_revision() {
    const NS: &str = "handover";
    const N: usize = 40;
    support::logs::capture_global();
    let em = emulator().await;
    em.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}))
        .expect("namespace");
    for i in 0..N {
        em.create(ns_cm(NS, &format!("cm-{i}"), 0)).expect("seed");
    }
    let open = Fence::closed();
    open.open_until(Instant::now() + Duration::from_secs(3600));
    let shards = Arc::new(Shards::new("a", open, Duration::ZERO));
    let own = Ownership::new(Fence::closed(), Some(shards.clone()), None);
    let both = ["a".to_string(), "b".to_string()];
    own.gained(shards.update(&both, Instant::now()).expect("first view"));
    let mut rt = runtime_with(
        &em,
        RuntimeOptions {
            ownership: own.clone(),
            ..RuntimeOptions::default()
        },
    );
    // The first revision's replay task is not polled until it is stopped.
    hold_replays(1);
    tokio::time::timeout(T, rt.start_spec(journal_spec("handover", NS)))
        .await
        .expect("in time")
        .expect("starts");
    let adds = || {
        let mut m = std::collections::BTreeMap::<String, usize>::new();
        for (what, key, _) in journal("handover") {
            if what == "add" {
                *m.entry(key).or_default() += 1;
            }
        }
        m
    };
    assert!(
        eventually(T, || adds().len() == N).await,
        "the initial list"
    );
    // B's keys: those this replica does not own with B a member.
    let b_keys: std::collections::BTreeSet<String> = (0..N)
        .map(|i| format!("{NS}/cm-{i}"))
        .filter(|k| shards.admit("journal", k) == kwh_coordination::ownership::Admit::No)
        .collect();
    assert!(!b_keys.is_empty() && b_keys.len() < N, "B owns {b_keys:?}");
    // B leaves: the gain waits in the first revision's subscription, unread.
    own.gained(
        shards
            .update(&["a".to_string()], Instant::now())
            .expect("a change"),
    );
    tokio::time::timeout(
        T,
        rt.upgrade(
            "journal",
            journal_spec("handover", NS),
            Duration::from_secs(5),
        ),
    )
    .await
    .expect("in time")
    .expect("upgrades");
    assert!(
        eventually(T, || b_keys.iter().all(|k| adds().get(k) == Some(&2))).await,
        "B's keys replayed once by the new revision: {:?}",
        adds()
    );
    let a = adds();
    for i in 0..N {
        let k = format!("{NS}/cm-{i}");
        let want = if b_keys.contains(&k) { 2 } else { 1 };
        assert_eq!(a.get(&k), Some(&want), "{k}: {a:?}");
    }
    rt.shutdown(Duration::from_secs(5)).await;
}

/// Issue "Safe under faults" 1.4: a write is bounded by the fence, not by the client's 30 s
/// timeout. Behind a partition (a frozen proxy), a plugin's write and an Event write issued
/// while the fence is open are abandoned when it closes (its renew deadline, 2 s here),
/// before another replica could count the lease as expired (4 s here), and say why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_held_across_the_fence_closing_is_abandoned_before_the_lease_runs_out() {
    use kwh_client::{ApiResource, Config};
    use kwh_plugin::backend::kube::KubeClientBackend;
    use kwh_plugin::backend::{ClientBackend, PatchKind, WriteOp, WriteRequest};
    use kwh_plugin::events::{EventRecorder, EventType, NewEvent, ObjectRef, RecorderConfig};
    use support::freeze_proxy::FreezeProxy;

    const RENEW_DEADLINE: Duration = Duration::from_secs(2);
    const LEASE: Duration = Duration::from_secs(4);
    let em = emulator().await;
    em.create(cm("held", json!({"k": "v"}))).expect("seed");
    let proxy = FreezeProxy::start(em.addr()).await;
    let kubeconfig = em
        .kubeconfig()
        .replace(&em.addr().to_string(), &proxy.addr().to_string());
    let client = kwh_client::Client::new(
        Config::from_kubeconfig_str(
            &kubeconfig,
            &std::env::temp_dir(),
            &kwh_client::config::KubeconfigOptions::default(),
        )
        .expect("kubeconfig"),
    )
    .expect("client");
    let fence = Fence::closed();
    let own = Ownership::new(fence.clone(), None, None).for_plugin("writer", false);
    let resources = std::collections::HashMap::from([(
        ("v1".to_string(), "ConfigMap".to_string()),
        ApiResource::new("v1", "ConfigMap", "configmaps", true),
    )]);
    let backend = KubeClientBackend::new(client.clone(), "writer", resources).owned_by(own);
    let (events, writer) = EventRecorder::new(
        client,
        RecorderConfig {
            fence: Some(fence.clone()),
            ..RecorderConfig::new("writer-host")
        },
    );
    let writer = tokio::spawn(writer.run(std::future::pending()));
    let patch = || WriteRequest {
        op: WriteOp::Patch(PatchKind::Merge),
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("default".into()),
        name: Some("held".into()),
        body: br#"{"data":{"k":"late"}}"#.to_vec(),
        reconciling: None,
    };

    // The last renewal started now: the fence is open for the renew deadline.
    let renewed = Instant::now();
    fence.open_until(renewed + RENEW_DEADLINE);
    // The connection is warm, then the partition.
    backend
        .write(patch())
        .await
        .expect("a write before the partition");
    proxy.freeze();
    events.record(
        "writer",
        NewEvent {
            regarding: ObjectRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: Some("default".into()),
                name: "held".into(),
                uid: None,
            },
            event_type: EventType::Normal,
            reason: "Held".into(),
            action: "Patch".into(),
            note: None,
        },
    );
    let r = tokio::time::timeout(Duration::from_secs(60), backend.write(patch()))
        .await
        .expect("the write ends");
    let abandoned = renewed.elapsed();
    let err = r.expect_err("no answer can come through the partition");
    assert_eq!(err.code, 503, "{err:?}");
    assert!(err.message.contains("abandoned"), "{err:?}");
    assert!(
        abandoned >= RENEW_DEADLINE && abandoned < LEASE,
        "abandoned after {abandoned:?}: the fence closes at {RENEW_DEADLINE:?}, another replica may act at {LEASE:?}"
    );
    // The Event writer gave its write up as well, within the lease.
    assert!(
        eventually(LEASE.saturating_sub(renewed.elapsed()), || events
            .stats()
            .write_failures
            >= 1)
        .await,
        "the Event write was not abandoned within the lease: {:?}",
        events.stats()
    );
    proxy.thaw();
    writer.abort();
}

/// Issue "Safe under faults" 1.6: a sharded replica that is ready but holds back the keys that
/// moved to it from members still running (the hand-over wait) says so in `/readyz` and
/// `/statusz`, with the time left; once nobody is left to wait for, it says nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_and_statusz_say_when_moved_keys_wait_for_the_hand_over() {
    let em = emulator().await;
    let fence = Fence::closed();
    fence.open_until(Instant::now() + Duration::from_secs(3600));
    let lease = Duration::from_secs(30);
    let shards = Arc::new(Shards::new("a", fence, lease));
    let own = Ownership::new(Fence::closed(), Some(shards.clone()), None);
    let mut rt = runtime_with(
        &em,
        RuntimeOptions {
            ownership: own,
            ..RuntimeOptions::default()
        },
    );
    // B was there first: its keys that are A's now wait for B's lease to run out.
    shards.update(&["a".to_string(), "b".to_string()], Instant::now());
    start(&mut rt, &["bench-sdk"]).await;
    let status = rt.status();
    let (ready, why) = status.readiness();
    assert!(ready, "{why}");
    assert!(
        why.contains("shard member of 2; keys moved from live members are reconciled here in"),
        "{why}"
    );
    let statusz: serde_json::Value = serde_json::from_str(&status.render_status()).unwrap();
    let wait = statusz["replica"]["handOverWaitSeconds"]
        .as_f64()
        .expect("a wait");
    assert!(wait > 20.0 && wait <= 30.0, "{wait}");
    // B leaves: nothing to wait for.
    shards.update(&["a".to_string()], Instant::now());
    assert_eq!(
        status.readiness(),
        (true, "ok\nshard member of 1\n".to_string())
    );
    let statusz: serde_json::Value = serde_json::from_str(&status.render_status()).unwrap();
    assert!(statusz["replica"]["handOverWaitSeconds"].is_null());
    rt.shutdown(Duration::from_secs(5)).await;
}
