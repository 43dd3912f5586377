//! Leader election over one Lease, with the semantics of client-go's `tools/leaderelection`
//! and its `LeaseLock`: what kube-controller-manager and controller-runtime managers do.
//!
//! - A candidate takes the Lease when it is absent, released (no holder), or not renewed for
//!   `leaseDurationSeconds` *as this candidate observed it*: expiry is counted on the local
//!   monotonic clock from the moment the record was last seen to change, never from the
//!   `renewTime` written in it, so clock skew between nodes cannot make a live lease look
//!   expired.
//! - Every write carries the resourceVersion it read (optimistic concurrency): of two
//!   candidates that saw the same expired lease, one write wins and the other gets 409.
//! - The leader renews every retry period. Its right to act is a [`Fence`]: open until the
//!   start of its last successful renewal plus the renew deadline. The renew deadline is
//!   shorter than the lease duration, so the fence closes before any other candidate can count
//!   the lease as expired, whatever happens to the renewal requests; callers check the fence
//!   before every guest call and every write.
//! - A clean stop releases the Lease (no holder, `leaseDurationSeconds: 1`), so a standby
//!   takes over at once instead of waiting out the lease. Standbys also watch the Lease, so a
//!   release or a change wakes them without waiting for their next poll.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

use futures_util::StreamExt;
use rand::Rng;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::leases::{lease_resource, Lease, LeaseClient, LeaseSpec};
use kwh_client::client::Client;
use kwh_client::params::WatchParams;
use kwh_client::watch::WatchStream;
use kwh_client::Error;

/// The timings of an election: client-go's defaults are 15 s, 10 s and 2 s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timings {
    /// How long a lease holds after its last renewal, as the other candidates count it.
    pub lease_duration: Duration,
    /// How long the leader keeps acting without a successful renewal.
    pub renew_deadline: Duration,
    /// The interval between attempts to acquire or renew.
    pub retry_period: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// Why a configuration cannot elect safely.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TimingsError {
    /// The fence would outlive the lease: a leader could act after another took over.
    #[error("the lease duration ({lease:?}) must be longer than the renew deadline ({renew:?})")]
    LeaseNotLongerThanRenewDeadline {
        /// Lease duration.
        lease: Duration,
        /// Renew deadline.
        renew: Duration,
    },
    /// client-go's rule: the renew deadline must allow more than one (jittered) retry.
    #[error(
        "the renew deadline ({renew:?}) must be longer than 1.2 × the retry period ({retry:?})"
    )]
    RenewDeadlineTooShort {
        /// Renew deadline.
        renew: Duration,
        /// Retry period.
        retry: Duration,
    },
    /// A Lease counts whole seconds.
    #[error("the lease duration ({0:?}) must be a whole number of seconds, at least 1 s")]
    LeaseDurationNotWholeSeconds(Duration),
    /// Zero retry period.
    #[error("the retry period must be positive")]
    ZeroRetryPeriod,
}

impl Timings {
    /// Checks the relations client-go checks, and whole seconds for the lease.
    pub fn validate(&self) -> Result<(), TimingsError> {
        if self.retry_period.is_zero() {
            return Err(TimingsError::ZeroRetryPeriod);
        }
        if self.lease_duration.subsec_nanos() != 0 || self.lease_duration.as_secs() == 0 {
            return Err(TimingsError::LeaseDurationNotWholeSeconds(
                self.lease_duration,
            ));
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(TimingsError::LeaseNotLongerThanRenewDeadline {
                lease: self.lease_duration,
                renew: self.renew_deadline,
            });
        }
        if self.renew_deadline.as_secs_f64() <= 1.2 * self.retry_period.as_secs_f64() {
            return Err(TimingsError::RenewDeadlineTooShort {
                renew: self.renew_deadline,
                retry: self.retry_period,
            });
        }
        Ok(())
    }

    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }
}

/// Whether the holder may act now: open until an instant, then closed without anyone having
/// to notice. Cheap to clone and to check (one atomic load and a clock read).
#[derive(Clone, Debug)]
pub struct Fence {
    inner: Arc<FenceInner>,
}

#[derive(Debug)]
struct FenceInner {
    base: Instant,
    /// Nanoseconds after `base` until which the fence is open; 0 = closed.
    until: AtomicU64,
    /// Woken by [`Fence::close`], so that work bounded by the fence ends at once.
    closed: tokio::sync::Notify,
}

/// Work abandoned because the fence closed before it finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("this replica's fence closed (not the leader, or its lease lapsed) before the request finished; it was abandoned")]
pub struct FenceClosed;

impl Fence {
    /// A closed fence (a candidate before it leads).
    pub fn closed() -> Self {
        Fence {
            inner: Arc::new(FenceInner {
                base: Instant::now(),
                until: AtomicU64::new(0),
                closed: tokio::sync::Notify::new(),
            }),
        }
    }

    /// A fence that never closes: one host alone, no election.
    pub fn always_open() -> Self {
        let f = Fence::closed();
        f.inner.until.store(u64::MAX, Ordering::Release);
        f
    }

    /// Whether the holder may act now.
    pub fn is_open(&self) -> bool {
        let until = self.inner.until.load(Ordering::Acquire);
        until == u64::MAX || self.nanos(Instant::now()) < until
    }

    /// How long it stays open without a renewal (`None` when closed).
    pub fn remaining(&self) -> Option<Duration> {
        let until = self.inner.until.load(Ordering::Acquire);
        if until == u64::MAX {
            return Some(Duration::MAX);
        }
        let now = self.nanos(Instant::now());
        (now < until).then(|| Duration::from_nanos(until - now))
    }

    /// Keeps it open until `t` (never shortens it: renewals may finish out of order).
    pub fn open_until(&self, t: Instant) {
        let n = self.nanos(t).max(1);
        self.inner.until.fetch_max(n, Ordering::AcqRel);
    }

    /// The instant it closes at (`None` when closed, or never closing).
    pub fn deadline(&self) -> Option<Instant> {
        let until = self.inner.until.load(Ordering::Acquire);
        if until == 0 || until == u64::MAX {
            return None;
        }
        let t = self.inner.base + Duration::from_nanos(until);
        (Instant::now() < t).then_some(t)
    }

    /// Closes it now.
    pub fn close(&self) {
        self.inner.until.store(0, Ordering::Release);
        self.inner.closed.notify_waiters();
    }

    /// Resolves once the fence is closed: at its deadline unless a renewal moved it, or at
    /// [`Fence::close`]. Never, for a fence that never closes.
    pub async fn until_closed(&self) {
        loop {
            let notified = self.inner.closed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let until = self.inner.until.load(Ordering::Acquire);
            if until == u64::MAX {
                return std::future::pending().await;
            }
            if until == 0 || self.nanos(Instant::now()) >= until {
                return;
            }
            let at = self.inner.base + Duration::from_nanos(until);
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep_until(at) => {}
            }
        }
    }

    /// Runs `work` while the fence is open: refused when it is closed already, abandoned
    /// (dropped: a request in flight is cut off) the moment it closes. What bounds every
    /// write of a replica: the fence closes at the renew deadline, before any other replica
    /// can count the lease as expired, so a write held up in the network (a partition, a
    /// stalled connection) cannot be let land by this replica after another has taken over.
    /// The client's own request timeout is longer than that margin; this is the bound.
    pub async fn guard<F: std::future::Future>(&self, work: F) -> Result<F::Output, FenceClosed> {
        if !self.is_open() {
            return Err(FenceClosed);
        }
        tokio::select! {
            biased;
            r = work => Ok(r),
            () = self.until_closed() => Err(FenceClosed),
        }
    }

    fn nanos(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.inner.base).as_nanos())
            .unwrap_or(u64::MAX - 1)
    }
}

/// Where this candidate stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Not leading; the current holder when one is known.
    Standby {
        /// The holder's identity.
        leader: Option<String>,
    },
    /// Leading (while the fence is open).
    Leader,
    /// Was leading and could not renew within the renew deadline: it must stop acting.
    Lost,
    /// Stopped (released, or never led).
    Stopped,
}

/// The Lease as this candidate last read it: its holder, and until when that holder's lease is
/// valid by this candidate's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderSeen {
    /// The holder's identity; `None` while the lease is free.
    pub holder: Option<String>,
    /// Observed change plus the lease duration.
    pub valid_until: Instant,
    /// The Lease's `metadata.uid` (none before it exists): an Event about the Lease carries
    /// it, as client-go's `LeaseLock.RecordEvent` does with the lease it last read.
    pub lease_uid: Option<String>,
}

impl LeaderSeen {
    /// The holder, while its lease is valid at `now`.
    pub fn valid_holder(&self, now: Instant) -> Option<&str> {
        self.holder.as_deref().filter(|_| now < self.valid_until)
    }
}

/// How a run of the election ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Stopped on request; the lease was released if held.
    Stopped,
    /// Leadership was lost (renewals failed for the renew deadline).
    Lost,
}

/// One election: a Lease, this candidate's identity, the timings.
#[derive(Debug, Clone)]
pub struct ElectionConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This candidate (client-go: hostname plus a random suffix).
    pub identity: String,
    /// Timings.
    pub timings: Timings,
}

/// The candidate's state between attempts: the record as last observed, and when.
struct Candidate {
    cfg: ElectionConfig,
    leases: LeaseClient,
    observed: Option<Lease>,
    /// Local time the observed record was last seen to change.
    observed_at: Instant,
    /// Published at every observation (shard membership counts a valid leader as a member).
    seen: watch::Sender<Option<LeaderSeen>>,
}

impl Candidate {
    fn is_leader(&self) -> bool {
        self.observed
            .as_ref()
            .and_then(|l| l.spec.holder())
            .is_some_and(|h| h == self.cfg.identity)
    }

    /// When the observed record expires, counted from when it was seen to change.
    fn observed_expiry(&self) -> Option<Instant> {
        let l = self.observed.as_ref()?;
        l.spec.holder()?;
        let secs = l.spec.lease_duration_seconds.unwrap_or(0).max(0) as u64;
        Some(self.observed_at + Duration::from_secs(secs))
    }

    fn observe(&mut self, lease: Lease, now: Instant) {
        let changed = self
            .observed
            .as_ref()
            .is_none_or(|o| o.resource_version != lease.resource_version || o.spec != lease.spec);
        if changed {
            self.observed_at = now;
        }
        let lease_uid = Some(lease.uid.clone()).filter(|u| !u.is_empty());
        self.observed = Some(lease);
        let seen = LeaderSeen {
            holder: self.holder(),
            valid_until: self.observed_expiry().unwrap_or(now),
            lease_uid,
        };
        self.seen.send_replace(Some(seen));
    }

    /// client-go's `tryAcquireOrRenew`: true when this candidate holds the lease afterwards.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, Error> {
        let now = Instant::now();
        let wall = SystemTime::now();
        let secs = self.cfg.timings.lease_seconds();
        // Fast path of a leader: renew from the cached object without reading it first (one
        // request per renewal); any failure falls back to the full path.
        if self.is_leader() && self.observed_expiry().is_some_and(|e| now < e) {
            if let Some(cur) = self.observed.clone() {
                let spec = LeaseSpec {
                    renew_time: Some(kwh_client::time::micro_time(wall)),
                    lease_duration_seconds: Some(secs),
                    holder_identity: Some(self.cfg.identity.clone()),
                    ..cur.spec.clone()
                };
                match self.leases.update(&cur, &spec).await {
                    Ok(l) => {
                        self.observe(l, now);
                        return Ok(true);
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "lease renewal from the cached record failed; reading it")
                    }
                }
            }
        }
        let Some(old) = self.leases.get(&self.cfg.name).await? else {
            let spec = LeaseSpec::held(&self.cfg.identity, secs, wall, 0);
            let l = self
                .leases
                .create(&self.cfg.name, &BTreeMap::new(), &spec)
                .await?;
            self.observe(l, now);
            return Ok(true);
        };
        // Seen now, as the answer arrives, not when it was asked for: a read the network or
        // a loaded server held for longer than the lease would otherwise date the record in
        // the past, and a second read that finds it unchanged would take a lease its holder
        // renewed a moment ago (found by the simulation: two leaders at once after a
        // partition healed). client-go stamps its observed time the same way.
        let seen_at = Instant::now();
        self.observe(old.clone(), seen_at);
        let held_by_other = old.spec.holder().is_some_and(|h| h != self.cfg.identity);
        if held_by_other && self.observed_expiry().is_some_and(|e| seen_at < e) {
            return Ok(false);
        }
        let transitions = old.spec.lease_transitions.unwrap_or(0);
        let mut spec = LeaseSpec::held(&self.cfg.identity, secs, wall, transitions);
        if old.spec.holder() == Some(self.cfg.identity.as_str()) {
            spec.acquire_time = old.spec.acquire_time.clone().or(spec.acquire_time);
        } else {
            spec.lease_transitions = Some(transitions.saturating_add(1));
        }
        let l = self.leases.update(&old, &spec).await?;
        self.observe(l, now);
        Ok(true)
    }

    /// client-go's release: no holder, a 1 s lease, the transitions kept.
    async fn release(&mut self) -> Result<(), Error> {
        if !self.is_leader() {
            return Ok(());
        }
        let Some(cur) = self.observed.clone() else {
            return Ok(());
        };
        let wall = kwh_client::time::micro_time(SystemTime::now());
        let spec = LeaseSpec {
            holder_identity: Some(String::new()),
            lease_duration_seconds: Some(1),
            acquire_time: Some(wall.clone()),
            renew_time: Some(wall),
            lease_transitions: cur.spec.lease_transitions,
        };
        let l = self.leases.update(&cur, &spec).await?;
        self.observe(l, Instant::now());
        Ok(())
    }

    fn holder(&self) -> Option<String> {
        self.observed
            .as_ref()
            .and_then(|l| l.spec.holder())
            .map(str::to_owned)
    }
}

/// A running election: its role, its fence, and the way to stop it.
pub struct LeaderElection {
    role: watch::Receiver<Role>,
    seen: watch::Receiver<Option<LeaderSeen>>,
    fence: Fence,
    stop: watch::Sender<bool>,
    task: JoinHandle<Ended>,
}

impl LeaderElection {
    /// Starts campaigning for `cfg`'s Lease through `client`.
    pub fn spawn(client: Client, cfg: ElectionConfig) -> Result<Self, TimingsError> {
        cfg.timings.validate()?;
        let fence = Fence::closed();
        let (role_tx, role) = watch::channel(Role::Standby { leader: None });
        let (stop, stop_rx) = watch::channel(false);
        let leases = LeaseClient::new(client.clone(), &cfg.namespace, "leader-election");
        let span = tracing::info_span!("leader_election", lease = %format!("{}/{}", cfg.namespace, cfg.name), identity = %cfg.identity);
        let (seen_tx, seen) = watch::channel(None);
        let candidate = Candidate {
            cfg,
            leases,
            observed: None,
            observed_at: Instant::now(),
            seen: seen_tx,
        };
        let task = tokio::spawn(
            campaign(candidate, client, fence.clone(), role_tx, stop_rx).instrument(span),
        );
        Ok(LeaderElection {
            role,
            seen,
            fence,
            stop,
            task,
        })
    }

    /// The role, as it changes.
    pub fn role(&self) -> watch::Receiver<Role> {
        self.role.clone()
    }

    /// The Lease as last read (`None` before the first read), updated at every read.
    pub fn leader_seen(&self) -> watch::Receiver<Option<LeaderSeen>> {
        self.seen.clone()
    }

    /// The fence every guest call and write checks.
    pub fn fence(&self) -> Fence {
        self.fence.clone()
    }

    /// Stops at once without releasing, as a crash does: the lease stays until it expires.
    /// The fence closes too, so nothing in this process acts on it meanwhile.
    pub fn abandon(self) {
        self.fence.close();
        self.task.abort();
    }

    /// Stops renewing at once and leaves the fence to run out at its own deadline: what a
    /// leader frozen or cut off from the API server looks like to the others (a test's view
    /// of the fence the rest of the process would still obey).
    pub fn stall(self) {
        self.task.abort();
    }

    /// Stops campaigning and releases the lease if held. Call it after everything that acts
    /// as the leader has stopped: the next leader may start the moment the release lands.
    pub async fn release(self) -> Ended {
        let _ = self.stop.send(true);
        self.task.await.unwrap_or(Ended::Stopped)
    }
}

/// The retry period with client-go's sliding jitter kept small (up to +10 %): a standby also
/// wakes on the lease's own watch events, so jitter only spreads candidates' polls.
fn jittered(d: Duration) -> Duration {
    d.mul_f64(1.0 + rand::thread_rng().gen_range(0.0..0.1))
}

/// Resolves when a stop is asked for (or the handle is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

async fn campaign(
    mut c: Candidate,
    client: Client,
    fence: Fence,
    role: watch::Sender<Role>,
    mut stop: watch::Receiver<bool>,
) -> Ended {
    let t = c.cfg.timings.clone();
    let mut lease_watch = LeaseWatch::new(client, &c.cfg.namespace, &c.cfg.name);
    // Acquire.
    loop {
        let started = Instant::now();
        match c.try_acquire_or_renew().await {
            Ok(true) => {
                fence.open_until(started + t.renew_deadline);
                tracing::info!(transitions = ?c.observed.as_ref().and_then(|l| l.spec.lease_transitions), "acquired the lease: leading");
                role.send_replace(Role::Leader);
                break;
            }
            Ok(false) => {
                let leader = c.holder();
                role.send_if_modified(|r| {
                    let next = Role::Standby {
                        leader: leader.clone(),
                    };
                    let changed = *r != next;
                    if changed {
                        tracing::info!(leader = ?leader, "standing by");
                        *r = next;
                    }
                    changed
                });
            }
            Err(e) => tracing::warn!(error = %e, "cannot acquire the lease; retrying"),
        }
        // Poll again after a retry period, at the observed expiry if sooner, or when the
        // lease changes (a release hands over at once).
        let mut wait = jittered(t.retry_period);
        if let Some(exp) = c.observed_expiry() {
            wait =
                wait.min(exp.saturating_duration_since(Instant::now()) + Duration::from_millis(1));
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = lease_watch.changed() => {}
            _ = stopped(&mut stop) => {
                role.send_replace(Role::Stopped);
                return Ended::Stopped;
            }
        }
    }
    drop(lease_watch);
    // Renew. A stop is honoured at every wait, also between failed renewals.
    loop {
        let wait = renew_wait(t.retry_period, fence.remaining().unwrap_or_default());
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stopped(&mut stop) => return step_down(&mut c, &fence, &role).await,
        }
        // client-go's renew loop: attempts every retry period until one succeeds or the
        // renew deadline passes (here: the fence closes).
        loop {
            let Some(left) = fence.remaining() else {
                fence.close();
                tracing::error!(
                    renew_deadline = ?t.renew_deadline,
                    "leader election lost: the lease was not renewed within the renew deadline"
                );
                role.send_replace(Role::Lost);
                return Ended::Lost;
            };
            let started = Instant::now();
            let attempt = tokio::select! {
                r = tokio::time::timeout(left, c.try_acquire_or_renew()) => r,
                _ = stopped(&mut stop) => return step_down(&mut c, &fence, &role).await,
            };
            match attempt {
                Ok(Ok(true)) => {
                    fence.open_until(started + t.renew_deadline);
                    break;
                }
                Ok(Ok(false)) => {
                    // Someone else holds it: another replica took over.
                    fence.close();
                    tracing::error!(leader = ?c.holder(), "leader election lost: the lease is held by another");
                    role.send_replace(Role::Lost);
                    return Ended::Lost;
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot renew the lease; retrying"),
                Err(_) => tracing::warn!("lease renewal timed out; retrying"),
            }
            let left = fence.remaining().unwrap_or_default();
            tokio::select! {
                _ = tokio::time::sleep(t.retry_period.min(left)) => {}
                _ = stopped(&mut stop) => return step_down(&mut c, &fence, &role).await,
            }
        }
    }
}

/// How long a leader waits before its next renewal: a retry period, but no longer than leaves
/// a retry period for the renewal before its fence closes, and no wait at all when less is
/// left. Why: the fence runs from the start of the last successful request, so a slow one
/// (an acquisition that took most of the renew deadline, against a loaded API server) leaves
/// little of it; waiting a whole retry period would then lose the lease without a single
/// attempt, where client-go renews at once after acquiring and keeps trying for its deadline.
fn renew_wait(retry_period: Duration, fence_remaining: Duration) -> Duration {
    fence_remaining
        .saturating_sub(retry_period)
        .min(retry_period)
}

/// A leader asked to stop: closes its fence first, then releases the lease (best effort: a
/// lease that cannot be released expires by itself).
async fn step_down(c: &mut Candidate, fence: &Fence, role: &watch::Sender<Role>) -> Ended {
    fence.close();
    match c.release().await {
        Ok(()) => tracing::info!("released the lease"),
        Err(e) => tracing::warn!(error = %e, "cannot release the lease; it expires by itself"),
    }
    role.send_replace(Role::Stopped);
    Ended::Stopped
}

/// A watch of one Lease by name, to wake a standby when it changes. Best effort: when the
/// watch cannot be opened (e.g. RBAC grants no `watch`), the standby only polls.
struct LeaseWatch {
    client: Client,
    namespace: String,
    name: String,
    stream: Option<WatchStream>,
    /// Set after a refusal: do not ask again.
    refused: bool,
    /// When the open stream was opened.
    opened: Option<Instant>,
    /// The wait before the next open: grows while streams end as soon as they open (a server
    /// or proxy that closes every watch at once would otherwise be asked again in a loop),
    /// back to nothing once one lasts.
    backoff: Duration,
    /// No open before this.
    next_open: Option<Instant>,
}

/// A watch that lasted less than this ended "at once".
const WATCH_SHORT: Duration = Duration::from_secs(1);
/// The first and the longest wait before reopening a watch that ended at once.
const WATCH_BACKOFF: (Duration, Duration) = (Duration::from_millis(500), Duration::from_secs(30));

impl LeaseWatch {
    fn new(client: Client, namespace: &str, name: &str) -> Self {
        LeaseWatch {
            client,
            namespace: namespace.to_string(),
            name: name.to_string(),
            stream: None,
            refused: false,
            opened: None,
            backoff: Duration::ZERO,
            next_open: None,
        }
    }

    /// The stream ended (or failed): back off before the next open if it ended at once.
    fn ended(&mut self) {
        self.stream = None;
        let lasted = self.opened.take().map(|t| t.elapsed());
        if lasted.is_some_and(|d| d >= WATCH_SHORT) {
            self.backoff = Duration::ZERO;
            self.next_open = None;
            return;
        }
        self.backoff = (self.backoff * 2).clamp(WATCH_BACKOFF.0, WATCH_BACKOFF.1);
        self.next_open = Some(Instant::now() + self.backoff);
    }

    /// Resolves at the next event on the Lease (or never, when it cannot watch).
    async fn changed(&mut self) {
        if self.refused {
            return std::future::pending().await;
        }
        if self.stream.is_none() {
            if let Some(t) = self.next_open {
                tokio::time::sleep_until(t).await;
                self.next_open = None;
            }
            let params = WatchParams {
                field_selector: Some(format!("metadata.name={}", self.name)),
                timeout_seconds: Some(300),
                ..WatchParams::default()
            };
            match self
                .client
                .watch(&lease_resource(), Some(&self.namespace), &params)
                .await
            {
                Ok(s) => {
                    self.stream = Some(s);
                    self.opened = Some(Instant::now());
                }
                Err(e) => {
                    if matches!(e.code(), Some(401 | 403 | 404 | 405)) {
                        tracing::debug!(error = %e, "cannot watch the lease; polling only");
                        self.refused = true;
                    }
                    return std::future::pending().await;
                }
            }
        }
        if let Some(s) = self.stream.as_mut() {
            match s.next().await {
                Some(Ok(_)) => {}
                _ => self.ended(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timings_are_checked_as_client_go_checks_them() {
        assert_eq!(Timings::default().validate(), Ok(()));
        let t = |l: u64, r: u64, p: u64| Timings {
            lease_duration: Duration::from_millis(l),
            renew_deadline: Duration::from_millis(r),
            retry_period: Duration::from_millis(p),
        };
        assert!(matches!(
            t(10_000, 10_000, 2_000).validate(),
            Err(TimingsError::LeaseNotLongerThanRenewDeadline { .. })
        ));
        assert!(matches!(
            t(15_000, 2_400, 2_000).validate(),
            Err(TimingsError::RenewDeadlineTooShort { .. })
        ));
        assert!(matches!(
            t(1_500, 1_000, 200).validate(),
            Err(TimingsError::LeaseDurationNotWholeSeconds(_))
        ));
        assert_eq!(t(2_000, 1_500, 500).validate(), Ok(()));
        assert_eq!(
            t(2_000, 1_500, 0).validate(),
            Err(TimingsError::ZeroRetryPeriod)
        );
    }

    #[test]
    fn a_fence_closes_by_itself_and_never_shortens() {
        let f = Fence::closed();
        assert!(!f.is_open());
        assert_eq!(f.remaining(), None);
        let now = Instant::now();
        f.open_until(now + Duration::from_secs(60));
        assert!(f.is_open());
        f.open_until(now + Duration::from_secs(1));
        assert!(f.remaining().unwrap() > Duration::from_secs(30));
        f.close();
        assert!(!f.is_open());
        f.open_until(Instant::now());
        assert!(!f.is_open(), "open until now is closed");
        assert!(Fence::always_open().is_open());
    }

    /// Work under a fence ends when the fence does: at its deadline (later when a renewal
    /// moved it while the work ran), or at once when it is closed; refused when closed.
    #[tokio::test]
    async fn guarded_work_is_abandoned_when_the_fence_closes() {
        let f = Fence::closed();
        assert_eq!(f.guard(async { 1 }).await, Err(FenceClosed));
        let t0 = Instant::now();
        f.open_until(t0 + Duration::from_millis(1200));
        assert_eq!(f.guard(async { 2 }).await, Ok(2));
        // A renewal while the work runs moves the end.
        let renew = async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            f.open_until(t0 + Duration::from_millis(2400));
        };
        let (r, ()) = tokio::join!(f.guard(std::future::pending::<()>()), renew);
        assert_eq!(r, Err(FenceClosed));
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(2400) && took < Duration::from_secs(10),
            "{took:?}"
        );
        // A close ends it at once, long before the deadline.
        f.open_until(Instant::now() + Duration::from_secs(3600));
        let t1 = Instant::now();
        let closer = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            f.close();
        };
        let (r, ()) = tokio::join!(f.guard(std::future::pending::<()>()), closer);
        assert_eq!(r, Err(FenceClosed));
        assert!(t1.elapsed() < Duration::from_secs(60), "{:?}", t1.elapsed());
        // A fence that never closes never abandons.
        let open = Fence::always_open();
        let r = tokio::time::timeout(
            Duration::from_millis(50),
            open.guard(std::future::pending::<()>()),
        )
        .await;
        assert!(r.is_err(), "still running at the timeout");
    }
}
