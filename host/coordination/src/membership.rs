//! Shard membership over Leases: every replica holds a Lease of its own, labelled with the
//! group, and reads the others' to know the live members.
//!
//! Each retry period a member renews its Lease and lists the group's. A member is live while
//! its Lease is held and was seen to change within its `leaseDurationSeconds`, counted on this
//! replica's clock from when the change was seen (as leader election counts expiry, so clock
//! skew cannot make a live member look gone). The member's own [`Shards::fence`] stays open
//! until the start of its last successful renew-and-list plus the renew deadline: a member
//! that cannot renew stops working before any other can count its Lease as expired. A clean
//! stop deletes the Lease, so the others take its keys at once.
//!
//! In a host that also elects a leader ([`LeaderLink`]), the leader counts as a member while
//! its leader Lease is valid as each replica's own elector observed it, so the leader does
//! not renew a membership Lease as well: every replica writes one Lease per retry period. The
//! leader's membership fence then never outlives its leader fence.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::leader_election::{Fence, LeaderSeen, Timings};
use crate::leases::{Lease, LeaseClient, LeaseSpec};
use crate::ownership::{Ownership, Shards};
use kwh_client::{Client, Error};

/// The label that marks a group's membership Leases; its value is the group.
pub const GROUP_LABEL: &str = "kube-wasm-host.io/shard-group";

/// Where a membership is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// Not yet renewed once.
    Joining,
    /// Renewing; its fence is open.
    Member,
    /// Could not renew within the renew deadline: it must stop.
    Lost,
    /// Stopped (Lease deleted).
    Stopped,
}

/// The election of the same host, when there is one.
#[derive(Clone)]
pub struct LeaderLink {
    /// The leader Lease as this replica's elector last read it.
    pub seen: watch::Receiver<Option<LeaderSeen>>,
    /// This replica's leader fence.
    pub fence: Fence,
}

impl LeaderLink {
    fn leading(&self, me: &str) -> bool {
        self.fence.is_open()
            && self
                .seen
                .borrow()
                .as_ref()
                .and_then(|s| s.valid_holder(Instant::now()))
                == Some(me)
    }
}

/// A running membership.
pub struct Membership {
    state: watch::Receiver<MemberState>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Membership {
    /// Joins `group` (Leases `<group>-<identity>` in `namespace`) as `shards.me()`; each change
    /// of the live members updates `shards` and tells `own` this replica may have gained work.
    pub fn spawn(
        client: Client,
        namespace: &str,
        group: &str,
        timings: Timings,
        shards: Arc<Shards>,
        own: Ownership,
        leader: Option<LeaderLink>,
    ) -> Self {
        let (state_tx, state) = watch::channel(MemberState::Joining);
        let (stop, stop_rx) = watch::channel(false);
        let leases = LeaseClient::new(client, namespace, "shard-membership");
        let span = tracing::info_span!("membership", group, identity = %shards.me());
        let member = Member {
            leases,
            group: group.to_string(),
            t: timings,
            shards,
            own,
            leader,
        };
        let task = tokio::spawn(run(member, state_tx, stop_rx).instrument(span));
        Membership { state, stop, task }
    }

    /// The state, as it changes.
    pub fn state(&self) -> watch::Receiver<MemberState> {
        self.state.clone()
    }

    /// Leaves: closes the fence and deletes this member's Lease. Call it after the workers
    /// have stopped: the others take this member's keys as soon as the Lease is gone.
    pub async fn leave(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// The Lease name of `identity` in `group` (a DNS subdomain: lowercased, other characters
/// mapped to `-`, at most 253 characters).
pub fn lease_name(group: &str, identity: &str) -> String {
    let mut s: String = format!("{group}-{identity}")
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '-' | '.') => c,
            _ => '-',
        })
        .collect();
    s.truncate(253);
    s.trim_matches(|c| c == '-' || c == '.').to_string()
}

/// What this member knows of the others' Leases: when each was last seen to change.
#[derive(Default)]
struct Observed {
    seen: HashMap<String, (String, Instant)>,
}

impl Observed {
    /// The live members among `leases`, as of `now`.
    fn live(&mut self, leases: &[Lease], now: Instant) -> Vec<String> {
        let mut live = Vec::new();
        let mut names = Vec::with_capacity(leases.len());
        for l in leases {
            names.push(l.name.clone());
            let entry = self
                .seen
                .entry(l.name.clone())
                .or_insert_with(|| (l.resource_version.clone(), now));
            if entry.0 != l.resource_version {
                *entry = (l.resource_version.clone(), now);
            }
            let Some(holder) = l.spec.holder() else {
                continue;
            };
            let secs = l.spec.lease_duration_seconds.unwrap_or(0).max(0) as u64;
            if now < entry.1 + Duration::from_secs(secs) {
                live.push(holder.to_string());
            }
        }
        self.seen.retain(|k, _| names.contains(k));
        live
    }

    /// The Leases among `leases` (other than `mine`) not seen to change for `age`: the
    /// memberships of replicas that died. Identities are new at every start, so without this
    /// every restart would leave one behind for good.
    fn stale<'a>(
        &self,
        leases: &'a [Lease],
        mine: &str,
        now: Instant,
        age: Duration,
    ) -> Vec<&'a Lease> {
        leases
            .iter()
            .filter(|l| l.name != mine)
            .filter(|l| {
                self.seen
                    .get(&l.name)
                    .is_some_and(|(rv, at)| *rv == l.resource_version && now >= *at + age)
            })
            .collect()
    }
}

/// How long a membership Lease must go unchanged before a member deletes it: three lease
/// durations, and at least 30 s. Every member counts it gone after one; a replica that was
/// only cut off closed its fence at its renew deadline long before, and makes its Lease again
/// when it can renew (a renewal answered 404 creates it). Until it is deleted, a replica that
/// joins meanwhile counts it live for a lease duration from when it first sees it (expiry is
/// counted on the local clock, never from the holder's `renewTime`: clock skew), so a dead
/// member's Lease must not linger for minutes.
fn stale_after(lease_duration: Duration) -> Duration {
    (lease_duration * 3).max(Duration::from_secs(30))
}

async fn renew(
    leases: &LeaseClient,
    name: &str,
    labels: &BTreeMap<String, String>,
    mine: &mut Option<Lease>,
    identity: &str,
    secs: i32,
) -> Result<(), Error> {
    let now = SystemTime::now();
    if let Some(cur) = mine.clone() {
        let spec = LeaseSpec {
            renew_time: Some(kwh_client::time::micro_time(now)),
            ..LeaseSpec::held(identity, secs, now, 0)
        };
        let spec = LeaseSpec {
            acquire_time: cur.spec.acquire_time.clone(),
            ..spec
        };
        match leases.update(&cur, &spec).await {
            Ok(l) => {
                *mine = Some(l);
                return Ok(());
            }
            Err(e) if e.code() == Some(409) || e.code() == Some(404) => *mine = None,
            Err(e) => return Err(e),
        }
    }
    let spec = LeaseSpec::held(identity, secs, now, 0);
    match leases.get(name).await? {
        Some(cur) => *mine = Some(leases.update(&cur, &spec).await?),
        None => *mine = Some(leases.create(name, labels, &spec).await?),
    }
    Ok(())
}

/// Resolves when a stop is asked for (or the handle is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// What one membership works with.
struct Member {
    leases: LeaseClient,
    group: String,
    t: Timings,
    shards: Arc<Shards>,
    own: Ownership,
    leader: Option<LeaderLink>,
}

async fn run(m: Member, state: watch::Sender<MemberState>, mut stop: watch::Receiver<bool>) {
    let Member {
        leases,
        group,
        t,
        shards,
        own,
        leader,
    } = m;
    let identity = shards.me().to_string();
    let name = lease_name(&group, &identity);
    let labels = BTreeMap::from([(GROUP_LABEL.to_string(), group.clone())]);
    let selector = format!("{GROUP_LABEL}={group}");
    let secs = i32::try_from(t.lease_duration.as_secs()).unwrap_or(i32::MAX);
    let mut mine: Option<Lease> = None;
    let mut observed = Observed::default();
    loop {
        let started = Instant::now();
        let leading = leader.as_ref().is_some_and(|l| l.leading(&identity));
        let round = async {
            if !leading {
                renew(&leases, &name, &labels, &mut mine, &identity, secs).await?;
            }
            leases.list(&selector).await
        };
        let limit = shards
            .fence
            .remaining()
            .unwrap_or(t.renew_deadline)
            .min(t.renew_deadline);
        match tokio::time::timeout(limit, round).await {
            Ok(Ok(list)) => {
                let now = Instant::now();
                let mut live = observed.live(&list, now);
                let mut until = Some(started + t.renew_deadline);
                if let Some(link) = &leader {
                    let seen = link.seen.borrow().clone();
                    match seen {
                        // The elector has not read the leader Lease yet: the leader may be a
                        // member this list does not show. No view until it has.
                        None => until = None,
                        Some(s) => live.extend(s.valid_holder(now).map(str::to_owned)),
                    }
                    if leading {
                        until = until.zip(link.fence.deadline()).map(|(a, b)| a.min(b));
                    }
                }
                let Some(until) = until else {
                    let wait = t.retry_period;
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => continue,
                        _ = stopped(&mut stop) => break,
                    }
                };
                // Closed since the last read (the read came after the renew deadline) and
                // open again: the keys dropped meanwhile come back, as on joining.
                let reopened = *state.borrow() == MemberState::Member && !shards.fence.is_open();
                shards.fence.open_until(until);
                if reopened && shards.fence.is_open() {
                    tracing::warn!("shard membership renewed after its fence closed; rejoining");
                    shards.rejoin();
                }
                for l in observed.stale(&list, &name, now, stale_after(t.lease_duration)) {
                    match leases.delete(l).await {
                        Ok(()) => {
                            tracing::info!(lease = %l.name, "deleted the membership Lease of a replica long gone")
                        }
                        Err(e) => {
                            tracing::debug!(lease = %l.name, error = %e, "cannot delete a stale membership Lease")
                        }
                    }
                }
                if let Some(gain) = shards.update(&live, Instant::now()) {
                    tracing::info!(members = ?shards.members(), "shard membership changed");
                    own.gained(gain);
                }
                state.send_if_modified(|s| {
                    let changed = *s != MemberState::Member;
                    *s = MemberState::Member;
                    changed
                });
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot renew the membership lease; retrying"),
            Err(_) => tracing::warn!("membership renewal timed out; retrying"),
        }
        if *state.borrow() == MemberState::Member && !shards.fence.is_open() {
            tracing::error!(
                renew_deadline = ?t.renew_deadline,
                "shard membership lost: the lease was not renewed within the renew deadline"
            );
            state.send_replace(MemberState::Lost);
            return;
        }
        let wait = match shards.fence.remaining() {
            Some(left) if left < t.retry_period => left,
            _ => t.retry_period,
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stopped(&mut stop) => break,
        }
    }
    shards.fence.close();
    if let Some(l) = mine {
        match leases.delete(&l).await {
            Ok(()) => tracing::info!("left the shard group"),
            Err(e) => {
                tracing::warn!(error = %e, "cannot delete the membership lease; it expires by itself")
            }
        }
    }
    state.send_replace(MemberState::Stopped);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_names_are_dns_subdomains() {
        assert_eq!(
            lease_name("kube-wasm-host", "Pod-7_1a2b3c4d"),
            "kube-wasm-host-pod-7-1a2b3c4d"
        );
        assert!(lease_name("g", &"x".repeat(400)).len() <= 253);
    }

    #[test]
    fn members_are_live_until_their_lease_runs_out_as_observed() {
        let lease = |name: &str, rv: &str, holder: &str| {
            Lease::from_json(
                serde_json::json!({"metadata": {"name": name, "resourceVersion": rv},
                    "spec": {"holderIdentity": holder, "leaseDurationSeconds": 2}})
                .to_string()
                .as_bytes(),
            )
            .unwrap()
        };
        let mut o = Observed::default();
        let t0 = Instant::now();
        let a = lease("g-a", "1", "a");
        let b = lease("g-b", "5", "b");
        let gone = lease("g-c", "7", "");
        assert_eq!(o.live(&[a.clone(), b.clone(), gone], t0), ["a", "b"]);
        // A renews, B does not: after two seconds only A is live.
        let a2 = lease("g-a", "9", "a");
        let t1 = t0 + Duration::from_millis(1500);
        assert_eq!(o.live(&[a2.clone(), b.clone()], t1), ["a", "b"]);
        let t2 = t0 + Duration::from_millis(2100);
        assert_eq!(o.live(&[a2.clone(), b.clone()], t2), ["a"]);
        // B is stale only after many lease durations without a change; A, renewed, never.
        let age = stale_after(Duration::from_secs(2));
        assert_eq!(age, Duration::from_secs(30));
        assert_eq!(
            stale_after(Duration::from_secs(15)),
            Duration::from_secs(45)
        );
        let leases = [a2, b];
        assert!(o
            .stale(&leases, "g-a", t0 + Duration::from_secs(29), age)
            .is_empty());
        let late = t0 + Duration::from_secs(31);
        o.live(&leases, late);
        let stale: Vec<_> = o
            .stale(&leases, "g-a", late, age)
            .iter()
            .map(|l| l.name.clone())
            .collect();
        assert_eq!(stale, ["g-b"]);
        assert!(
            o.stale(&leases, "g-b", late, age).is_empty(),
            "never one's own"
        );
    }
}
