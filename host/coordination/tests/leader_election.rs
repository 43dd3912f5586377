//! Leader election over a Lease in the in-process emulator, over loopback: one leader among
//! candidates at any instant (fences sampled), a release hands over at once, a crashed
//! leader's lease is taken only after it expires as observed, and a leader that cannot renew
//! closes its own fence before its lease can expire and writes nothing afterwards. The
//! semantics are client-go's `tools/leaderelection` with a `LeaseLock`.

use std::time::{Duration, Instant};

use kwh_client::Client;
use kwh_coordination::leader_election::{ElectionConfig, Ended, LeaderElection, Role, Timings};
use kwh_coordination::leases::LeaseClient;

/// Bound on every wait; the tests finish far sooner.
const LIMIT: Duration = Duration::from_secs(20);

/// A fresh emulator on a loopback port, and a client of it.
async fn emulator() -> (kwh_emulator::EmulatorHandle, kwh_client::Client) {
    let h = kwh_emulator::Emulator::builder().start().await.unwrap();
    let client = h.client().unwrap();
    (h, client)
}

fn timings() -> Timings {
    Timings {
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(300),
    }
}

fn candidate(client: &Client, identity: &str) -> LeaderElection {
    candidate_with(client, identity, timings())
}

/// A candidate for the Lease `default/host` with timings of its own.
fn candidate_with(client: &Client, identity: &str, timings: Timings) -> LeaderElection {
    LeaderElection::spawn(
        client.clone(),
        ElectionConfig {
            namespace: "default".into(),
            name: "host".into(),
            identity: identity.into(),
            timings,
        },
    )
    .unwrap()
}

async fn until_role(e: &LeaderElection, want: Role) {
    let mut rx = e.role();
    tokio::time::timeout(LIMIT, rx.wait_for(|r| *r == want))
        .await
        .unwrap_or_else(|_| panic!("role {want:?} not reached within {LIMIT:?}"))
        .unwrap();
}

/// Candidate `a`, once it leads, and candidate `b`, once it stands by for `a`.
async fn leader_and_standby(client: &Client) -> (LeaderElection, LeaderElection) {
    let a = candidate(client, "a");
    until_role(&a, Role::Leader).await;
    let b = candidate(client, "b");
    until_role(
        &b,
        Role::Standby {
            leader: Some("a".into()),
        },
    )
    .await;
    (a, b)
}

/// Waits until exactly one of `es` leads; returns its index.
async fn leader_of(es: &[&LeaderElection]) -> usize {
    let deadline = Instant::now() + LIMIT;
    loop {
        let leading: Vec<_> = (0..es.len())
            .filter(|&i| *es[i].role().borrow() == Role::Leader)
            .collect();
        if leading.len() == 1 {
            return leading[0];
        }
        assert!(Instant::now() < deadline, "no single leader: {leading:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_candidate_leads_and_a_release_hands_over_with_a_transition_counted() {
    let (_h, client) = emulator().await;
    let a = candidate(&client, "a");
    until_role(&a, Role::Leader).await;
    assert!(a.fence().is_open());
    let b = candidate(&client, "b");
    until_role(
        &b,
        Role::Standby {
            leader: Some("a".into()),
        },
    )
    .await;
    assert!(!b.fence().is_open(), "a standby's fence is closed");

    let leases = LeaseClient::new(client.clone(), "default", "test");
    let held = leases.get("host").await.unwrap().unwrap();
    assert_eq!(held.spec.holder(), Some("a"));
    assert_eq!(held.spec.lease_transitions, Some(0));
    assert_eq!(held.spec.lease_duration_seconds, Some(2));
    let acquired = held.spec.acquire_time.clone();

    let fence_a = a.fence();
    assert_eq!(a.release().await, Ended::Stopped);
    assert!(
        !fence_a.is_open(),
        "the fence closes before the release is written"
    );
    until_role(&b, Role::Leader).await;
    let taken = leases.get("host").await.unwrap().unwrap();
    assert_eq!(taken.spec.holder(), Some("b"));
    assert_eq!(taken.spec.lease_transitions, Some(1));
    assert_ne!(taken.spec.acquire_time, acquired);
    b.release().await;
    let released = leases.get("host").await.unwrap().unwrap();
    assert_eq!(released.spec.holder(), None);
    assert_eq!(released.spec.lease_duration_seconds, Some(1));
    assert_eq!(released.spec.lease_transitions, Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_leaders_lease_is_taken_only_once_it_expired_as_observed() {
    let (_h, client) = emulator().await;
    let (a, b) = leader_and_standby(&client).await;
    // A renews at most one retry period before it stops, so B may not lead sooner than a
    // lease duration less one retry period after the crash.
    let crashed = Instant::now();
    a.abandon();
    until_role(&b, Role::Leader).await;
    let after = crashed.elapsed();
    let t = timings();
    assert!(
        after >= t.lease_duration - t.retry_period,
        "took over {after:?} after the crash: before the lease could expire"
    );
    assert!(
        after <= t.lease_duration + 2 * t.retry_period + Duration::from_secs(1),
        "took over only {after:?} after the crash"
    );
    b.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_renew_closes_its_fence_before_its_lease_can_expire() {
    let (h, client) = emulator().await;
    let a = candidate(&client, "a");
    until_role(&a, Role::Leader).await;
    let fence = a.fence();
    // Let it renew at least once, then fail every request from now on.
    let leases = LeaseClient::new(client.clone(), "default", "test");
    let first = leases.get("host").await.unwrap().unwrap().resource_version;
    let deadline = Instant::now() + LIMIT;
    while leases.get("host").await.unwrap().unwrap().resource_version == first {
        assert!(Instant::now() < deadline, "no renewal");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let last_renewal = leases.get("host").await.unwrap().unwrap();
    let cut = Instant::now();
    h.faults().fail_next(1_000_000, 500, 0);
    until_role(&a, Role::Lost).await;
    let lost_after = cut.elapsed();
    assert!(!fence.is_open());
    let t = timings();
    // The last renewal began before the cut, so the fence closed within the renew deadline
    // of the cut, and well before any other candidate could count the lease as expired.
    assert!(
        lost_after <= t.renew_deadline + Duration::from_millis(200),
        "fence still open {lost_after:?} after renewals began to fail"
    );
    assert!(lost_after < t.lease_duration);
    let updates = h.stats().requests("update");
    tokio::time::sleep(2 * t.retry_period).await;
    assert_eq!(
        h.stats().requests("update"),
        updates,
        "a lost leader writes no more"
    );
    h.faults().fail_next(0, 500, 0);
    let now = leases.get("host").await.unwrap().unwrap();
    assert_eq!(now.spec.holder(), Some("a"));
    assert!(now.resource_version >= last_renewal.resource_version);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_candidates_never_hold_open_fences_at_once_through_crashes_and_releases() {
    let (_h, client) = emulator().await;
    let mut alive = vec![
        candidate(&client, "a"),
        candidate(&client, "b"),
        candidate(&client, "c"),
    ];
    let fences: Vec<_> = alive.iter().map(|e| e.fence()).collect();
    let sample = |fences: &[kwh_coordination::leader_election::Fence]| {
        fences.iter().filter(|f| f.is_open()).count()
    };
    let sampler = {
        let fences = fences.clone();
        tokio::spawn(async move {
            let mut max = 0;
            let mut ticks = 0u64;
            let end = Instant::now() + Duration::from_secs(12);
            while Instant::now() < end {
                max = max.max(sample(&fences));
                ticks += 1;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            (max, ticks)
        })
    };
    // Stall one leader (frozen, cut off: its fence runs out at its own deadline, and the
    // sampler sees it until then), release the next: each time another takes over.
    let refs: Vec<&LeaderElection> = alive.iter().collect();
    let first = leader_of(&refs).await;
    alive.remove(first).stall();
    let refs: Vec<&LeaderElection> = alive.iter().collect();
    let second = leader_of(&refs).await;
    alive.remove(second).release().await;
    let refs: Vec<&LeaderElection> = alive.iter().collect();
    leader_of(&refs).await;
    let (max, ticks) = sampler.await.unwrap();
    assert!(ticks > 100, "the sampler ran");
    assert_eq!(max, 1, "two fences were open at once");
    for e in alive {
        e.release().await;
    }
}

/// A standby whose Lease watch the server ends as soon as it opens does not reopen it in a
/// loop: the reopens back off (0.5 s doubling), so in three seconds a handful are made, not
/// hundreds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_watch_that_ends_at_once_is_reopened_with_backoff() {
    let (h, client) = emulator().await;
    let a = candidate(&client, "a");
    until_role(&a, Role::Leader).await;
    // Every watch ends after its first event (the Lease as it is).
    h.faults().close_watches_after(1);
    let before = h.stats().requests("watch");
    let b = candidate(&client, "b");
    until_role(
        &b,
        Role::Standby {
            leader: Some("a".into()),
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let watches = h.stats().requests("watch") - before;
    assert!(
        (1..=8).contains(&watches),
        "{watches} watches of the Lease in 3 s"
    );
    h.faults().close_watches_after(0);
    b.release().await;
    a.release().await;
}

/// A leader asked to stop while its renewals fail stops at once (its fence closed), instead
/// of trying until its renew deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_stops_at_once_while_its_renewals_fail() {
    let (h, client) = emulator().await;
    let t = Timings {
        lease_duration: Duration::from_secs(20),
        renew_deadline: Duration::from_secs(15),
        retry_period: Duration::from_millis(300),
    };
    let a = candidate_with(&client, "a", t.clone());
    until_role(&a, Role::Leader).await;
    let fence = a.fence();
    h.faults().fail_next(1_000_000, 500, 0);
    // Into the failing renewals.
    tokio::time::sleep(3 * t.retry_period).await;
    assert!(fence.is_open(), "within its renew deadline");
    let asked = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(10), a.release())
        .await
        .expect("the stop is honoured between failed renewals, long before the deadline");
    assert_eq!(ended, Ended::Stopped);
    assert!(!fence.is_open());
    assert!(asked.elapsed() < Duration::from_secs(10));
    h.faults().fail_next(0, 500, 0);
}

/// An acquisition that took most of the renew deadline (an API server under load) leaves the
/// new leader a short fence: it renews before the fence closes, as client-go renews at once
/// after acquiring, instead of waiting a whole retry period and losing the lease without a
/// single attempt. Timings are long here so that every window is over a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_acquisition_was_slow_renews_before_its_fence_closes() {
    let (h, client) = emulator().await;
    let t = Timings {
        lease_duration: Duration::from_secs(10),
        renew_deadline: Duration::from_secs(8),
        retry_period: Duration::from_secs(2),
    };
    // The first acquisition creates the Lease: 6.5 s of the 8 s renew deadline.
    h.faults()
        .delay_next(1, Duration::from_millis(6500), &["create"])
        .unwrap();
    let a = candidate_with(&client, "a", t.clone());
    until_role(&a, Role::Leader).await;
    assert_eq!(
        h.faults().delivered().delayed,
        1,
        "the acquisition was slow"
    );
    // Its fence closes at most 1.5 s after it leads (the acquisition's start plus the renew
    // deadline), before a retry period is over: had it waited one to renew, its role would
    // turn `Lost`. It renews at once, and keeps leading across three retry periods: its role
    // does not change once (a watch of the role, not samples of it, so that no flip is missed
    // however the threads are scheduled; how soon the renewal happened is not asserted).
    let fence = a.fence();
    let mut role = a.role();
    assert_eq!(*role.borrow_and_update(), Role::Leader);
    if let Ok(changed) = tokio::time::timeout(3 * t.retry_period, role.changed()).await {
        changed.expect("the election runs");
        panic!(
            "lost the lease after a slow acquisition: {:?}",
            *role.borrow()
        );
    }
    assert!(fence.is_open());
    a.release().await;
}

/// A standby's read that the network or a loaded server holds longer than the lease does not
/// date the record it returns in the past: the standby counts the lease from when the answer
/// arrived, so the leader, renewing all along, keeps it. (Dated from when it was asked, the
/// record looked expired at the standby's next read, which found it unchanged a moment after a
/// renewal, and took it: two leaders at once, found by the simulation after a partition
/// healed.) Whenever the standby comes to lead, the old leader's fence must already be closed:
/// a fact read at that instant, not a timing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_held_up_longer_than_the_lease_does_not_date_the_lease_it_returns() {
    let (h, client) = emulator().await;
    let (a, b) = leader_and_standby(&client).await;
    // The leader renews from its cached record (PUT); the standby reads (GET): its next read
    // is answered 3 s late, longer than the 2 s lease.
    h.faults()
        .delay_next(1, Duration::from_secs(3), &["get"])
        .unwrap();
    let fence_a = a.fence();
    let mut role_b = b.role();
    let watched = async {
        loop {
            role_b.changed().await.expect("the election runs");
            if *role_b.borrow_and_update() == Role::Leader {
                return fence_a.is_open();
            }
        }
    };
    // Long enough for the held read to be answered and the standby to read again a few times.
    // b never leading (a kept renewing) leaves nothing to judge.
    if let Ok(a_still_fenced_in) = tokio::time::timeout(Duration::from_secs(6), watched).await {
        assert!(
            !a_still_fenced_in,
            "b took the lease while a's fence was open: two leaders at once"
        );
    }
    assert_eq!(h.faults().delivered().delayed, 1, "the read was held up");
    b.release().await;
    a.release().await;
}
