//! Leader election and sharding across three `host` processes against one `host emulator`
//! process, each replica behind its own freezable proxy, running the `ledger` guest (one line
//! per reconcile start and end). What the tests hold the replicas to:
//! (a) no key is reconciled by two replicas at overlapping times; (b) after kill -9 of the
//! leader, or of a shard owner, every object changed after the kill is reconciled; (c) a
//! SIGTERM hands the lease over at once (release, not expiry); (d) a replica cut off from the
//! API server stops calling its guest within its renew deadline, before its lease can expire,
//! and another takes its work; (e) one replica and three sharded replicas reconcile the same
//! set of (key, version) pairs.
//!
//! Timings are short (lease 2 s, renew deadline 1.5 s, retry 300 ms) so each test takes
//! seconds; the failover and handover floors are measured by the `replicas` benchmark.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::time::Duration;

use serde_json::json;

use support::process::WAIT;
use support::replicas::*;

const NS: &str = "ledger";
const LEASE: Duration = Duration::from_secs(2);
const RENEW: Duration = Duration::from_millis(1500);

/// The run flags of every replica: the ledger plugin, short election timings, and `extra`.
fn args(plugins: &std::path::Path, extra: &[&str]) -> Vec<OsString> {
    timed(plugins, "2s", "1500ms", extra)
}

/// [`args`] with another lease duration and renew deadline.
fn timed(plugins: &std::path::Path, lease: &str, renew: &str, extra: &[&str]) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec![
        "--plugins".into(),
        plugins.into(),
        "--leader-elect-lease-duration".into(),
        lease.into(),
        "--leader-elect-renew-deadline".into(),
        renew.into(),
        "--leader-elect-retry-period".into(),
        "300ms".into(),
    ];
    a.extend(extra.iter().map(OsString::from));
    a
}

/// Creates `n` ConfigMaps `cm-NN`; their (key, rv) pairs.
async fn seed(rs: &Replicas, n: usize) -> BTreeSet<(String, String)> {
    rs.emulator.create_namespace(NS).await;
    let mut want = BTreeSet::new();
    for i in 0..n {
        let name = format!("cm-{i:02}");
        let rv = rs.emulator.create_cm(NS, &name, json!({"v": "0"})).await;
        want.insert((format!("{NS}/{name}"), rv));
    }
    want
}

/// Updates every key of `keys`; the new (key, rv) pairs.
async fn update_all(
    rs: &Replicas,
    keys: impl IntoIterator<Item = String>,
    v: &str,
) -> BTreeSet<(String, String)> {
    let mut want = BTreeSet::new();
    for key in keys {
        let name = key.trim_start_matches(&format!("{NS}/")).to_string();
        let rv = rs.emulator.update_cm(NS, &name, json!({ "v": v })).await;
        want.insert((key, rv));
    }
    want
}

fn keys(pairs: &BTreeSet<(String, String)>) -> Vec<String> {
    pairs.iter().map(|(k, _)| k.clone()).collect()
}

/// Which replica leads, by its `/statusz`; waits up to `within`.
async fn leader(rs: &mut Replicas, alive: &[usize], within: Duration) -> usize {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        for &id in alive {
            let (code, body) = rs.replicas[id].get("/statusz").await;
            if code == 200 {
                let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                if v["replica"]["role"] == "leader" {
                    return id;
                }
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no leader among {alive:?}:\n{}",
            rs.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn assert_no_overlap(rs: &mut Replicas) -> Vec<LedgerRecord> {
    let recs = rs.records();
    let found = overlaps(&recs);
    assert!(
        found.is_empty(),
        "reconciled by two replicas at once: {found:#?}\n{}",
        rs.ledger_log()
    );
    recs
}

/// Replicas that reconciled anything of `pairs` (finished reconciles).
fn reconcilers(recs: &[LedgerRecord], pairs: &BTreeSet<(String, String)>) -> BTreeSet<usize> {
    recs.iter()
        .filter(|r| r.finished && pairs.contains(&(r.key.clone(), r.rv.clone())))
        .map(|r| r.replica)
        .collect()
}

/// Three phases against `n` sharded replicas (created, all updated, some deleted), each waited
/// for; returns every reconciled pair, each version named by its phase (the emulators of two
/// runs number versions differently), and checks (a) on the way.
async fn sharded_run(n: usize) -> BTreeSet<(String, String)> {
    let mut rs = Replicas::start().await;
    let created = seed(&rs, 24).await;
    let plugins = ledger_plugins_file(&rs.dir, json!({"holdMs": 20, "namespace": NS}), 2);
    for _ in 0..n {
        rs.spawn(args(&plugins, &["--shards"])).await;
    }
    rs.expect_reconciled(&created, WAIT).await;
    let updated = update_all(&rs, keys(&created), "1").await;
    rs.expect_reconciled(&updated, WAIT).await;
    let gone: Vec<String> = keys(&created).into_iter().take(6).collect();
    for key in &gone {
        rs.emulator
            .delete_cm(NS, key.trim_start_matches("ledger/"))
            .await;
    }
    let deleted: BTreeSet<_> = gone.iter().map(|k| (k.clone(), "-".to_string())).collect();
    rs.expect_reconciled(&deleted, WAIT).await;
    let recs = assert_no_overlap(&mut rs);
    if n > 1 {
        let by = reconcilers(&recs, &updated);
        assert_eq!(by.len(), n, "every replica took a share: {by:?}");
    }
    let phase: BTreeMap<(String, String), &str> = created
        .iter()
        .map(|p| (p.clone(), "created"))
        .chain(updated.iter().map(|p| (p.clone(), "updated")))
        .chain(deleted.iter().map(|p| (p.clone(), "deleted")))
        .collect();
    reconciled_pairs(&recs)
        .into_iter()
        .map(|p| {
            let name = phase.get(&p).copied().unwrap_or("unknown version");
            (p.0, name.to_string())
        })
        .collect()
}

/// (a) and (e).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_sharded_replicas_never_overlap_and_reconcile_what_one_replica_does() {
    let one = sharded_run(1).await;
    let three = sharded_run(3).await;
    assert!(!one.iter().any(|(_, v)| v == "unknown version"), "{one:?}");
    assert_eq!(one.len(), 24 + 24 + 6);
    assert_eq!(one, three);
}

/// (b), the leader: only the leader reconciles; after kill -9 of it another takes over and
/// reconciles every change made after the kill, without overlapping the dead one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_kill_9_of_the_leader_every_later_change_is_reconciled_by_the_next() {
    let mut rs = Replicas::start().await;
    let created = seed(&rs, 10).await;
    let plugins = ledger_plugins_file(&rs.dir, json!({"holdMs": 20, "namespace": NS}), 1);
    for _ in 0..3 {
        rs.spawn(args(&plugins, &["--leader-elect"])).await;
    }
    let first = leader(&mut rs, &[0, 1, 2], WAIT).await;
    let recs = rs.expect_reconciled(&created, WAIT).await;
    assert_eq!(
        reconcilers(&recs, &created),
        BTreeSet::from([first]),
        "only the leader reconciles"
    );
    for id in (0..3).filter(|&i| i != first) {
        assert!(rs.replicas[id].wait_ready(WAIT).await, "a standby is ready");
        let (_, metrics) = rs.replicas[id].get("/metrics").await;
        assert!(
            metrics.contains("leader_election_master_status{name=\"kube-wasm-host\"} 0"),
            "{metrics}"
        );
    }

    let status = rs.kill(first).await;
    assert!(!status.success());
    let updated = update_all(&rs, keys(&created), "1").await;
    let recs = rs.expect_reconciled(&updated, WAIT).await;
    let by = reconcilers(&recs, &updated);
    assert_eq!(by.len(), 1, "{by:?}");
    assert!(!by.contains(&first));
    assert_no_overlap(&mut rs);
}

/// (b), a shard owner: its keys go to the others once its lease expires; every change made
/// after the kill is reconciled, and no key by two at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_kill_9_of_a_shard_owner_its_keys_are_reconciled_by_the_others() {
    kill_a_shard_owner(&["--shards"], false).await;
}

/// (b) with leader election too: the leader is a member through its leader Lease (it renews
/// no membership Lease of its own); killed, its keys go to the others all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_election_too_the_killed_leaders_keys_are_reconciled_by_the_others() {
    kill_a_shard_owner(&["--shards", "--leader-elect"], true).await;
}

async fn kill_a_shard_owner(extra: &[&str], the_leader: bool) {
    let mut rs = Replicas::start().await;
    let created = seed(&rs, 24).await;
    let plugins = ledger_plugins_file(&rs.dir, json!({"holdMs": 20, "namespace": NS}), 2);
    for _ in 0..3 {
        rs.spawn(args(&plugins, extra)).await;
    }
    let victim = if the_leader {
        leader(&mut rs, &[0, 1, 2], WAIT).await
    } else {
        1
    };
    let recs = rs.expect_reconciled(&created, WAIT).await;
    // Wait for a settled membership: each replica reconciles its share of an update.
    let probe = update_all(&rs, keys(&created), "1").await;
    let recs = match rs
        .wait_for(WAIT, |recs| {
            reconciled_pairs(recs).is_superset(&probe) && reconcilers(recs, &probe).len() == 3
        })
        .await
    {
        Ok(r) => r,
        Err(_) => panic!(
            "three replicas did not share the work: {:?}\n{}",
            reconcilers(&recs, &probe),
            rs.ledger_log()
        ),
    };
    let owned_by_victim: Vec<String> = recs
        .iter()
        .filter(|r| r.replica == victim && probe.contains(&(r.key.clone(), r.rv.clone())))
        .map(|r| r.key.clone())
        .collect();
    assert!(!owned_by_victim.is_empty());
    if the_leader {
        // Issue "Safe under faults" 1.6: the first leader's Event was refused by its own
        // membership fence, written before its first membership round. Now it waits for it.
        until_leader_events(&rs, 1).await;
        let log = rs.log();
        assert!(
            !log.contains("may not write now"),
            "an Event write was refused by the replica's own fence:\n{log}"
        );
        // The leader renews its leader Lease only (it may never have made a membership
        // Lease); a standby renews its membership Lease.
        let standby = (0..3).find(|&i| i != victim).expect("a standby");
        let before = [
            membership_rv(&mut rs, victim).await,
            membership_rv(&mut rs, standby).await,
        ];
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = [
            membership_rv(&mut rs, victim).await,
            membership_rv(&mut rs, standby).await,
        ];
        assert_eq!(
            before[0], after[0],
            "the leader renewed its membership Lease"
        );
        assert!(before[1].is_some());
        assert_ne!(before[1], after[1], "a standby renews its membership Lease");
    }

    rs.kill(victim).await;
    let updated = update_all(&rs, keys(&created), "2").await;
    let recs = rs.expect_reconciled(&updated, WAIT).await;
    let by = reconcilers(&recs, &updated);
    assert!(!by.contains(&victim), "{by:?}");
    for key in &owned_by_victim {
        let rv = &updated.iter().find(|(k, _)| k == key).expect("updated").1;
        assert!(
            recs.iter()
                .any(|r| r.finished && &r.key == key && &r.rv == rv && r.replica != victim),
            "{key} of the killed owner was not taken over"
        );
    }
    assert_no_overlap(&mut rs);
}

/// The resourceVersion of replica `id`'s membership Lease, if it has one.
async fn membership_rv(rs: &mut Replicas, id: usize) -> Option<String> {
    let (_, body) = rs.replicas[id].get("/statusz").await;
    let v: serde_json::Value = serde_json::from_str(&body).expect("statusz");
    let identity = v["replica"]["identity"].as_str().expect("identity");
    let name = kwh_coordination::membership::lease_name("kube-wasm-host", identity);
    let lease =
        kwh_coordination::leases::LeaseClient::new(rs.emulator.client.clone(), "default", "test")
            .get(&name)
            .await
            .expect("get");
    lease.map(|l| l.resource_version)
}

/// The notes of the host's `LeaderElection` Events on the leader Lease (`default/kube-wasm-host`,
/// named by its uid too, as `kubectl describe` matches them), as the API server lists them.
async fn leader_event_notes(rs: &Replicas) -> BTreeSet<String> {
    let lease =
        kwh_coordination::leases::LeaseClient::new(rs.emulator.client.clone(), "default", "test")
            .get("kube-wasm-host")
            .await
            .expect("get the leader Lease");
    let Some(uid) = lease.map(|l| l.uid).filter(|u| !u.is_empty()) else {
        return BTreeSet::new();
    };
    let body = rs
        .emulator
        .client
        .request_raw(
            http::Method::GET,
            "/apis/events.k8s.io/v1/namespaces/default/events",
            None,
        )
        .await
        .expect("list Events");
    let list: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| {
            e["reason"] == "LeaderElection"
                && e["type"] == "Normal"
                && e["reportingController"] == "kube-wasm-host"
                && e["regarding"]["kind"] == "Lease"
                && e["regarding"]["name"] == "kube-wasm-host"
                && e["regarding"]["uid"] == uid.as_str()
        })
        .filter_map(|e| e["note"].as_str().map(str::to_string))
        .collect()
}

/// Waits until the leader Lease has `n` distinct "<identity> became leader" Events.
async fn until_leader_events(rs: &Replicas, n: usize) -> BTreeSet<String> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let notes = leader_event_notes(rs).await;
        if notes.len() >= n {
            for note in &notes {
                assert!(note.ends_with(" became leader"), "{notes:?}");
            }
            return notes;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{n} leader Events expected, found {notes:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// (c): SIGTERM of the leader drains it, releases the lease, and a standby leads at once: well
/// before the lease (10 s here) could have expired. Each leader records an Event on the Lease
/// as it starts to lead, as client-go's leader election does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_releases_the_lease_and_a_standby_takes_over_at_once() {
    let mut rs = Replicas::start().await;
    let created = seed(&rs, 4).await;
    let plugins = ledger_plugins_file(&rs.dir, json!({"namespace": NS}), 1);
    for _ in 0..3 {
        rs.spawn(timed(&plugins, "10s", "5s", &["--leader-elect"]))
            .await;
    }
    let first = leader(&mut rs, &[0, 1, 2], WAIT).await;
    rs.expect_reconciled(&created, WAIT).await;
    let led = until_leader_events(&rs, 1).await;
    assert_eq!(led.len(), 1, "one leader so far: {led:?}");
    let others: Vec<usize> = (0..3).filter(|&i| i != first).collect();
    for &id in &others {
        assert!(rs.replicas[id].wait_ready(WAIT).await);
    }
    let stopped = tokio::time::Instant::now();
    let status = rs.sigterm(first, WAIT).await;
    assert!(status.success(), "a clean stop: {}", rs.log());
    let other = leader(&mut rs, &others, Duration::from_secs(20)).await;
    let took = stopped.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "the standby led {took:?} after the SIGTERM: the lease was not released"
    );
    let updated = update_all(&rs, keys(&created), "1").await;
    let recs = rs.expect_reconciled(&updated, WAIT).await;
    assert_eq!(reconcilers(&recs, &updated), BTreeSet::from([other]));
    assert_no_overlap(&mut rs);
    let both = until_leader_events(&rs, 2).await;
    assert!(both.is_superset(&led), "{both:?} after {led:?}");
}

/// What an operator reads: the real `kubectl describe lease` lists the leader's Event under the
/// Lease (kubectl matches Events on the Lease's uid).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(kubectl),
    ignore = "needs kubectl, not installed when this was built"
)]
async fn kubectl_describe_lease_lists_the_leaders_event() {
    let mut rs = Replicas::start().await;
    let plugins = ledger_plugins_file(&rs.dir, json!({"namespace": NS}), 1);
    rs.spawn(args(&plugins, &["--leader-elect"])).await;
    leader(&mut rs, &[0], WAIT).await;
    let led = until_leader_events(&rs, 1).await;
    let dir = support::temp_dir("leader-kubectl");
    std::fs::copy(&rs.emulator.kubeconfig, dir.join("kubeconfig")).expect("kubeconfig");
    let (ok, out, err) = support::kubectl::kubectl(
        &dir,
        &["describe", "lease", "kube-wasm-host", "-n", "default"],
    )
    .await;
    assert!(ok, "kubectl describe lease: {err}");
    let events = out
        .split_once("\nEvents:")
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("no Events section:\n{out}"));
    for note in &led {
        assert!(
            events
                .lines()
                .any(|l| l.contains("LeaderElection") && l.contains(note.as_str())),
            "{note:?} not under the Lease's Events:\n{out}"
        );
    }
}

/// (d): the leader is cut off from the API server while it has a backlog its cache lets it
/// keep working on; it stops calling its guest within its renew deadline (before its lease can
/// expire), exits, and the other replica takes over and finishes the work with no overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_stops_calling_its_guest_before_its_lease_can_expire() {
    let mut rs = Replicas::start().await;
    let created = seed(&rs, 30).await;
    let plugins = ledger_plugins_file(&rs.dir, json!({"holdMs": 100, "namespace": NS}), 1);
    for _ in 0..3 {
        rs.spawn(args(&plugins, &["--leader-elect"])).await;
    }
    let first = leader(&mut rs, &[0, 1, 2], WAIT).await;
    rs.expect_reconciled(&created, WAIT).await;
    let led = until_leader_events(&rs, 1).await;
    assert_eq!(led.len(), 1, "one leader so far: {led:?}");
    let others: Vec<usize> = (0..3).filter(|&i| i != first).collect();
    // A backlog of 30 × 100 ms on the leader: it would keep reconciling from its cache for
    // three seconds after a partition if nothing stopped it.
    let updated = update_all(&rs, keys(&created), "1").await;
    let started = |recs: &[LedgerRecord]| {
        recs.iter()
            .any(|r| r.replica == first && updated.contains(&(r.key.clone(), r.rv.clone())))
    };
    assert!(rs.wait_for(WAIT, started).await.is_ok());
    let cut = now_ns();
    rs.replicas[first].freeze();
    let status = rs.replicas[first].process.exit(WAIT).await;
    assert!(
        !status.success(),
        "a replica that lost its lease exits non-zero"
    );
    assert!(
        rs.replicas[first].process.saw("leader election lost"),
        "{}",
        rs.log()
    );
    let recs = rs.expect_reconciled(&updated, WAIT).await;
    let last_start = recs
        .iter()
        .filter(|r| r.replica == first)
        .map(|r| r.start_ns)
        .max()
        .expect("the leader reconciled");
    // Its last renewal began before the cut: nothing may start after cut + renew deadline.
    let slack = Duration::from_millis(250).as_nanos() as u64;
    assert!(
        last_start <= cut + RENEW.as_nanos() as u64 + slack,
        "the cut-off leader started a reconcile {} ms after the partition",
        (last_start - cut) / 1_000_000
    );
    assert!(last_start < cut + LEASE.as_nanos() as u64);
    assert!(
        reconcilers(&recs, &updated)
            .iter()
            .any(|r| others.contains(r)),
        "another replica took over"
    );
    assert_no_overlap(&mut rs);
}

/// The `WasmController` resource (cluster-scoped).
fn wasmcontrollers() -> kwh_client::ApiResource {
    kwh_client::ApiResource::new(
        "kube-wasm.dev/v1alpha1",
        "WasmController",
        "wasmcontrollers",
        false,
    )
}

/// Starts a replica taking its plugins from the cluster, electing a leader with the short
/// timings, with a compile cache of its own (so a takeover's loads are its own).
async fn spawn_cluster_replica(rs: &mut Replicas) {
    let cache = rs.dir.join(format!("cache-{}", rs.replicas.len()));
    rs.spawn([
        OsString::from("--plugins-from-cluster"),
        "--leader-elect".into(),
        "--leader-elect-lease-duration".into(),
        "2s".into(),
        "--leader-elect-renew-deadline".into(),
        "1500ms".into(),
        "--leader-elect-retry-period".into(),
        "300ms".into(),
        "--cache-dir".into(),
        cache.into_os_string(),
    ])
    .await;
}

/// Server-side applies `WasmController` `reviser` running `module` with config `revision`.
async fn apply_reviser(client: &kwh_client::Client, module: &std::path::Path, revision: &str) {
    let module = module.display().to_string();
    let body = json!({"apiVersion": "kube-wasm.dev/v1alpha1", "kind": "WasmController",
        "metadata": {"name": "reviser"},
        "spec": {"module": module, "logLinesPerSecond": 0,
                 "config": {"revision": revision}}});
    client
        .patch(
            &wasmcontrollers(),
            None,
            "reviser",
            None,
            &kwh_client::client::Patch::Apply(body.to_string().into()),
            &kwh_client::client::WriteParams {
                field_manager: Some("test".into()),
                force: true,
                ..Default::default()
            },
        )
        .await
        .expect("apply");
}

/// A replica's running revision and digest of plugin `reviser`, from /statusz.
async fn running_reviser(r: &mut Replica) -> Option<(u64, String)> {
    let (code, body) = r.get("/statusz").await;
    let v: serde_json::Value = serde_json::from_str(&body).ok().filter(|_| code == 200)?;
    let p = v["plugins"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == "reviser")?
        .clone();
    Some((p["revision"].as_u64()?, p["digest"].as_str()?.to_owned()))
}

/// Waits for both replicas to run `reviser` at `revision` with one digest; that digest.
async fn both_at(rs: &mut Replicas, revision: u64) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let a = running_reviser(&mut rs.replicas[0]).await;
        let b = running_reviser(&mut rs.replicas[1]).await;
        if let (Some(a), Some(b)) = (&a, &b) {
            if a.0 == revision && a == b {
                return a.1.clone();
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "replicas at {a:?} and {b:?}, not both at revision {revision}:\n{}",
            rs.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits for the `reviser` resource's status to reach `generation`: the leader wrote it.
async fn status_at(client: &kwh_client::Client, generation: i64) {
    let observed = || async {
        let o = client
            .get(&wasmcontrollers(), None, "reviser")
            .await
            .expect("get");
        let v: serde_json::Value = serde_json::from_slice(o.raw()).expect("JSON");
        v["status"]["observedGeneration"].as_i64().unwrap_or(0)
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    while observed().await < generation {
        assert!(
            tokio::time::Instant::now() < deadline,
            "status never reached generation {generation}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `WasmController` resources with two replicas and `--leader-elect` (issue "Plugins as managed
/// workloads"): the standby applies every generation too (its revision runs, wired but not
/// reconciling, so a takeover needs no compile or load), only the leader reconciles and writes
/// status, and after kill -9 of the leader the other runs the same revision and digest, writes
/// the next generation's status, and loads nothing at the takeover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_agree_on_a_wasmcontrollers_revision_after_a_takeover() {
    let crd = support::guests::repo_root().join("deploy/crds/wasmcontroller.yaml");
    let emulator = EmulatorProcess::start(&["--seed", &crd.display().to_string()]).await;
    let mut rs = Replicas::on(emulator);
    let module = support::guests::guest("reviser");
    for _ in 0..2 {
        spawn_cluster_replica(&mut rs).await;
    }
    let client = rs.emulator.client.clone();

    let first = leader(&mut rs, &[0, 1], WAIT).await;
    let standby = 1 - first;
    apply_reviser(&client, &module, "a").await;
    let digest = both_at(&mut rs, 1).await;
    status_at(&client, 1).await;
    apply_reviser(&client, &module, "b").await;
    assert_eq!(both_at(&mut rs, 2).await, digest, "a configuration change");
    status_at(&client, 2).await;
    // Only the leader reconciles.
    rs.emulator.create_namespace("default").await;
    rs.emulator.create_cm("default", "one", json!({})).await;
    rs.replicas[first]
        .process
        .line("REV b reconcile default/one")
        .await;
    assert!(
        !rs.replicas[standby].process.saw("REV b reconcile"),
        "{}",
        rs.log()
    );
    rs.replicas[standby].process.drain();
    let loads_before = rs.replicas[standby]
        .process
        .lines_mentioning(&["plugin loaded"])
        .len();
    assert!(loads_before >= 2, "the standby loaded both revisions");

    let status = rs.kill(first).await;
    assert!(!status.success());
    assert_eq!(leader(&mut rs, &[standby], WAIT).await, standby);
    assert_eq!(
        running_reviser(&mut rs.replicas[standby]).await,
        Some((2, digest.clone())),
        "the same revision after the takeover"
    );
    rs.emulator.create_cm("default", "two", json!({})).await;
    rs.replicas[standby]
        .process
        .line("REV b reconcile default/two")
        .await;
    rs.replicas[standby].process.drain();
    assert_eq!(
        rs.replicas[standby]
            .process
            .lines_mentioning(&["plugin loaded"])
            .len(),
        loads_before,
        "nothing loaded at the takeover"
    );
    // The new leader writes status.
    apply_reviser(&client, &module, "c").await;
    status_at(&client, 3).await;
}
