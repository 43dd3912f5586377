//! Plugin health: quarantine of a plugin whose instances keep failing, and probation after it.
//!
//! Replacing a trapped instance is cheap, so a single failure is only logged. But a plugin whose
//! guest fails on everything would otherwise burn CPU in a replace-and-fail loop, flood the log
//! and keep its keys churning through backoff forever. After `failures` instance failures
//! (traps, deadlines, memory exhaustion, failed instantiations) within `window`, the plugin is
//! quarantined for a cool-down that doubles with each quarantine in a row, up to a cap: its
//! workers wait at [`Health::admit`] (keys stay in the workqueue, one entry each however often
//! they are added), while its dispatcher asks [`Health::try_admit`] and drops what it may not
//! deliver, so a plugin quarantined for good costs no memory per notification; its caches are
//! replayed to it, in order, once it may be called again. Then one call (whichever comes first: a notification or a
//! reconcile) is let through on a fresh instance as probation; if it succeeds the plugin resumes,
//! if its instance fails the plugin goes back into quarantine for the next, longer cool-down.
//! A guest's own `Err` from reconcile is not a failure here: the instance is healthy and the key
//! is rate-limited as usual.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::instance::GuestError;

/// When a plugin is quarantined and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuarantinePolicy {
    /// Instance failures within `window` that quarantine the plugin; 0 disables quarantine.
    pub failures: u32,
    /// The sliding window the failures are counted in.
    pub window: Duration,
    /// Cool-down of a first quarantine; each further quarantine in a row doubles it.
    pub cooldown: Duration,
    /// The longest cool-down.
    pub max_cooldown: Duration,
}

impl Default for QuarantinePolicy {
    /// Five failures in a minute: well above what a guest hitting the occasional bad object
    /// produces (each bad key is rate-limited, 5 ms doubling), well below a guest that fails on
    /// everything. Ten seconds first, doubling to five minutes, so a broken plugin costs almost
    /// nothing while a transient cause (an API outage making every reconcile hit its deadline)
    /// is retried promptly.
    fn default() -> Self {
        QuarantinePolicy {
            failures: 5,
            window: Duration::from_secs(60),
            cooldown: Duration::from_secs(10),
            max_cooldown: Duration::from_secs(300),
        }
    }
}

impl QuarantinePolicy {
    /// The cool-down of the `n`th quarantine in a row (1-based): `cooldown · 2^(n-1)`, capped.
    pub fn cooldown_for(&self, n: u32) -> Duration {
        let factor = 1u32.checked_shl(n.saturating_sub(1)).unwrap_or(u32::MAX);
        self.cooldown
            .checked_mul(factor)
            .unwrap_or(self.max_cooldown)
            .min(self.max_cooldown)
    }
}

/// Where a plugin stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Calls go through.
    Running,
    /// No calls until the cool-down ends.
    Quarantined,
    /// The cool-down ended: one call at a time is let through until one succeeds or fails.
    Probation,
}

impl Phase {
    /// Lower-case name for logs and status views.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Running => "running",
            Phase::Quarantined => "quarantined",
            Phase::Probation => "probation",
        }
    }
}

/// A point-in-time view of a plugin's health, for `/readyz`, `/statusz` and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthSnapshot {
    /// Where it stands.
    pub phase: Phase,
    /// Why it was last quarantined (none if never).
    pub reason: Option<String>,
    /// When the current quarantine began (wall clock), if quarantined or on probation.
    pub since: Option<SystemTime>,
    /// Time left of the cool-down, if quarantined.
    pub remaining: Option<Duration>,
    /// Quarantines since start.
    pub quarantines: u64,
}

#[derive(Debug)]
enum State {
    Running,
    Quarantined { until: Instant },
    Probation { probing: bool },
}

#[derive(Debug)]
struct Inner {
    state: State,
    /// Failure times within the window, oldest first (only counted while running).
    failures: VecDeque<Instant>,
    /// Quarantines in a row: the cool-down exponent. Reset after a window of healthy running.
    streak: u32,
    resumed_at: Option<Instant>,
    reason: Option<String>,
    since: Option<SystemTime>,
    closed: bool,
}

/// What [`Health::try_admit`] answers.
#[must_use = "a permit must be reported"]
pub enum Admission<'a> {
    /// Make the call and report its end.
    Go(Permit<'a>),
    /// Quarantined (or another call is the probation call): do not call now.
    Held,
    /// Shutting down: no more calls.
    Closed,
}

/// [`Health::gate`]'s answer.
enum Gate<'a> {
    Open(Option<Permit<'a>>),
    Held(Option<Instant>),
    Closed,
}

/// The health gate of one plugin, shared by its dispatcher and workers.
#[derive(Debug)]
pub struct Health {
    plugin: String,
    policy: QuarantinePolicy,
    /// Set while not running (or closed): the fast path of [`Health::admit`] reads only this.
    gated: AtomicBool,
    inner: Mutex<Inner>,
    changed: Notify,
    quarantines: AtomicU64,
}

/// Permission to make one guest call. Report its end with [`Permit::succeeded`] or
/// [`Permit::failed`]; dropping it unreported (the call was cancelled) reopens probation.
#[must_use = "report the call's end"]
pub struct Permit<'a> {
    health: &'a Health,
    probe: bool,
    reported: bool,
}

impl Health {
    /// A running plugin named `plugin` under `policy`.
    pub fn new(plugin: &str, policy: QuarantinePolicy) -> Self {
        Health {
            plugin: plugin.to_string(),
            policy,
            gated: AtomicBool::new(false),
            inner: Mutex::new(Inner {
                state: State::Running,
                failures: VecDeque::new(),
                streak: 0,
                resumed_at: None,
                reason: None,
                since: None,
                closed: false,
            }),
            changed: Notify::new(),
            quarantines: AtomicU64::new(0),
        }
    }

    /// The policy.
    pub fn policy(&self) -> &QuarantinePolicy {
        &self.policy
    }

    /// Waits until a call may be made: at once while running; after the cool-down (as the one
    /// probation call) while quarantined. None once [`Health::close`] was called.
    pub async fn admit(&self) -> Option<Permit<'_>> {
        if !self.gated.load(Ordering::Acquire) {
            return Some(self.permit(false));
        }
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let wake_at = match self.gate(true) {
                Gate::Open(p) => return p,
                Gate::Closed => return None,
                Gate::Held(wake_at) => wake_at,
            };
            self.wait(notified, wake_at).await;
        }
    }

    /// [`Health::admit`] without the wait: what a caller that must not hold on to its work
    /// while the plugin is quarantined asks (the dispatcher, whose notifications would pile
    /// up behind it otherwise).
    pub fn try_admit(&self) -> Admission<'_> {
        if !self.gated.load(Ordering::Acquire) {
            return Admission::Go(self.permit(false));
        }
        match self.gate(true) {
            Gate::Open(Some(p)) => Admission::Go(p),
            Gate::Open(None) | Gate::Closed => Admission::Closed,
            Gate::Held(_) => Admission::Held,
        }
    }

    /// Resolves once [`Health::try_admit`] would let a call through (running, or the
    /// cool-down over and no probation call under way) or the gate was closed. Admits nothing
    /// itself: whoever calls next (perhaps another caller) takes the permit.
    pub async fn admittable(&self) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let wake_at = match self.gate(false) {
                Gate::Open(_) | Gate::Closed => return,
                Gate::Held(wake_at) => wake_at,
            };
            self.wait(notified, wake_at).await;
        }
    }

    /// Where the gate stands, under the lock. With `take`, a call it lets through is admitted
    /// (`Open(Some(permit))`, a probation starts); without, nothing changes (`Open(None)`).
    fn gate(&self, take: bool) -> Gate<'_> {
        let mut g = self.inner.lock();
        if g.closed {
            return Gate::Closed;
        }
        let grant = |probe: bool| Gate::Open(take.then(|| self.permit(probe)));
        match g.state {
            State::Running => grant(false),
            State::Quarantined { until } if Instant::now() >= until => {
                if take {
                    g.state = State::Probation { probing: true };
                    tracing::info!(plugin = %self.plugin,
                        "quarantine cool-down over; probation call on a fresh instance");
                }
                grant(true)
            }
            State::Quarantined { until } => Gate::Held(Some(until)),
            State::Probation { probing: false } => {
                if take {
                    g.state = State::Probation { probing: true };
                }
                grant(true)
            }
            State::Probation { probing: true } => Gate::Held(None),
        }
    }

    /// Waits for a change of state, or until `wake_at` when given.
    async fn wait(
        &self,
        notified: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
        wake_at: Option<Instant>,
    ) {
        match wake_at {
            Some(t) => {
                tokio::select! {
                    _ = notified => {}
                    _ = tokio::time::sleep_until(t) => {}
                }
            }
            None => notified.await,
        }
    }

    fn permit(&self, probe: bool) -> Permit<'_> {
        Permit {
            health: self,
            probe,
            reported: false,
        }
    }

    /// Releases every waiter for good (shutdown): [`Health::admit`] answers None from now on.
    pub fn close(&self) {
        self.inner.lock().closed = true;
        self.gated.store(true, Ordering::Release);
        self.changed.notify_waiters();
    }

    /// Whether the plugin is quarantined or on probation.
    pub fn is_quarantined(&self) -> bool {
        !matches!(self.inner.lock().state, State::Running)
    }

    /// Quarantines since start.
    pub fn quarantines(&self) -> u64 {
        self.quarantines.load(Ordering::Relaxed)
    }

    /// The current state.
    pub fn snapshot(&self) -> HealthSnapshot {
        let g = self.inner.lock();
        let (phase, remaining) = match g.state {
            State::Running => (Phase::Running, None),
            State::Quarantined { until } => (
                Phase::Quarantined,
                Some(until.saturating_duration_since(Instant::now())),
            ),
            State::Probation { .. } => (Phase::Probation, None),
        };
        HealthSnapshot {
            phase,
            reason: g.reason.clone(),
            since: g.since.filter(|_| phase != Phase::Running),
            remaining,
            quarantines: self.quarantines(),
        }
    }

    fn report(&self, probe: bool, failure: Option<&GuestError>) {
        if failure.is_none() && !probe {
            // The hot path: an ordinary call succeeded. No clock read, no lock.
            return;
        }
        let now = Instant::now();
        let mut g = self.inner.lock();
        let Some(err) = failure else {
            if probe {
                g.state = State::Running;
                g.failures.clear();
                g.resumed_at = Some(now);
                drop(g);
                self.gated.store(false, Ordering::Release);
                tracing::info!(plugin = %self.plugin, "probation call succeeded; plugin resumed");
                self.changed.notify_waiters();
            }
            return;
        };
        match g.state {
            State::Probation { .. } if probe => {
                let reason = format!("probation call failed: {err}");
                self.quarantine(&mut g, now, reason);
            }
            State::Running if self.policy.failures > 0 => {
                let window = self.policy.window;
                while g
                    .failures
                    .front()
                    .is_some_and(|t| now.saturating_duration_since(*t) >= window)
                {
                    g.failures.pop_front();
                }
                g.failures.push_back(now);
                if g.failures.len() >= self.policy.failures as usize {
                    if g.resumed_at
                        .is_some_and(|t| now.saturating_duration_since(t) >= window)
                    {
                        // A window of healthy running since the last probation: start over.
                        g.streak = 0;
                    }
                    let reason = format!(
                        "{} instance failures within {:?} (last: {err})",
                        g.failures.len(),
                        window
                    );
                    self.quarantine(&mut g, now, reason);
                }
            }
            // Already quarantined (a call admitted just before the gate closed), or disabled.
            _ => {}
        }
    }

    fn quarantine(&self, g: &mut Inner, now: Instant, reason: String) {
        g.streak = g.streak.saturating_add(1);
        let cooldown = self.policy.cooldown_for(g.streak);
        g.state = State::Quarantined {
            until: now + cooldown,
        };
        g.failures.clear();
        g.since = Some(SystemTime::now());
        self.gated.store(true, Ordering::Release);
        self.quarantines.fetch_add(1, Ordering::Relaxed);
        tracing::error!(plugin = %self.plugin, %reason, ?cooldown, quarantines_in_a_row = g.streak,
            "plugin quarantined: {reason}; dispatch and reconcile paused for {cooldown:?}, queued keys kept");
        g.reason = Some(reason);
        self.changed.notify_waiters();
    }
}

impl Permit<'_> {
    /// Whether this is the probation call of a quarantined plugin.
    pub fn is_probe(&self) -> bool {
        self.probe
    }

    /// The call completed without a sandbox failure.
    pub fn succeeded(mut self) {
        self.reported = true;
        self.health.report(self.probe, None);
    }

    /// The call failed in the sandbox (its instance was discarded).
    pub fn failed(mut self, err: &GuestError) {
        self.reported = true;
        self.health.report(self.probe, Some(err));
    }

    /// Reports `r`'s sandbox outcome and passes it through.
    pub fn settle<T>(self, r: Result<T, GuestError>) -> Result<T, GuestError> {
        match &r {
            Ok(_) => self.succeeded(),
            Err(e) => self.failed(e),
        }
        r
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if self.reported || !self.probe {
            return;
        }
        let mut g = self.health.inner.lock();
        if let State::Probation { probing } = &mut g.state {
            *probing = false;
        }
        drop(g);
        self.health.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> QuarantinePolicy {
        QuarantinePolicy {
            failures: 3,
            window: Duration::from_secs(10),
            cooldown: Duration::from_secs(1),
            max_cooldown: Duration::from_secs(5),
        }
    }

    fn trap() -> GuestError {
        GuestError::Trap("unreachable".into())
    }

    async fn fail(h: &Health) {
        h.admit().await.expect("open").failed(&trap());
    }

    #[test]
    fn cooldown_doubles_and_is_capped() {
        let p = policy();
        let got: Vec<_> = (1..=5).map(|n| p.cooldown_for(n).as_secs()).collect();
        assert_eq!(got, [1, 2, 4, 5, 5]);
        assert_eq!(p.cooldown_for(200), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn failures_outside_the_window_do_not_add_up() {
        let h = Health::new("p", policy());
        fail(&h).await;
        fail(&h).await;
        tokio::time::advance(Duration::from_secs(11)).await;
        fail(&h).await;
        assert!(
            !h.is_quarantined(),
            "two of the three are older than the window"
        );
        fail(&h).await;
        fail(&h).await;
        assert!(h.is_quarantined());
        let s = h.snapshot();
        assert_eq!(s.phase, Phase::Quarantined);
        assert_eq!(s.quarantines, 1);
        assert!(s
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("3 instance failures")));
        assert_eq!(s.remaining, Some(Duration::from_secs(1)));
    }

    #[tokio::test(start_paused = true)]
    async fn quarantine_holds_calls_until_the_cooldown_then_one_probe_resumes() {
        let h = std::sync::Arc::new(Health::new("p", policy()));
        for _ in 0..3 {
            fail(&h).await;
        }
        let start = Instant::now();
        // Two callers wait; only one becomes the probe, the other waits for its verdict.
        let (a, b) = tokio::join!(
            async {
                let p = h.admit().await.expect("admitted");
                assert!(p.is_probe());
                tokio::time::sleep(Duration::from_millis(100)).await;
                p.succeeded();
                start.elapsed()
            },
            async {
                tokio::time::sleep(Duration::from_millis(10)).await;
                let p = h.admit().await.expect("admitted");
                assert!(!p.is_probe(), "running again: an ordinary call");
                p.succeeded();
                start.elapsed()
            }
        );
        assert_eq!(
            a,
            Duration::from_millis(1100),
            "probe after the 1 s cool-down"
        );
        assert_eq!(b, a, "the second caller waited for the probe's success");
        assert!(!h.is_quarantined());
        assert_eq!(h.snapshot().phase, Phase::Running);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_probe_quarantines_again_for_twice_as_long() {
        let h = Health::new("p", policy());
        for _ in 0..3 {
            fail(&h).await;
        }
        let t = Instant::now();
        fail(&h).await; // the probe, after 1 s
        assert_eq!(t.elapsed(), Duration::from_secs(1));
        assert_eq!(h.snapshot().remaining, Some(Duration::from_secs(2)));
        fail(&h).await; // after 2 s more
        assert_eq!(t.elapsed(), Duration::from_secs(3));
        assert_eq!(h.snapshot().remaining, Some(Duration::from_secs(4)));
        let p = h.admit().await.expect("probe");
        assert_eq!(t.elapsed(), Duration::from_secs(7));
        p.succeeded();
        assert_eq!(h.quarantines(), 3);
        // Breaking again soon after resuming continues the streak (capped at 5 s) ...
        for _ in 0..3 {
            fail(&h).await;
        }
        assert_eq!(h.snapshot().remaining, Some(Duration::from_secs(5)));
        h.admit().await.expect("probe").succeeded();
        // ... but after a healthy window it starts from the first cool-down again.
        tokio::time::advance(Duration::from_secs(10)).await;
        for _ in 0..3 {
            fail(&h).await;
        }
        assert_eq!(h.snapshot().remaining, Some(Duration::from_secs(1)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_probe_lets_the_next_caller_probe_and_close_releases_waiters() {
        let h = Health::new("p", policy());
        for _ in 0..3 {
            fail(&h).await;
        }
        let p = h.admit().await.expect("probe");
        drop(p);
        assert_eq!(h.snapshot().phase, Phase::Probation);
        let p = h.admit().await.expect("probe again");
        assert!(p.is_probe());
        p.failed(&trap());
        let waiting = h.admit();
        tokio::pin!(waiting);
        assert!(
            tokio::time::timeout(Duration::from_millis(100), &mut waiting)
                .await
                .is_err(),
            "quarantined: the call waits"
        );
        h.close();
        assert!(waiting.await.is_none(), "closed: released with no permit");
    }

    /// The dispatcher's view: while quarantined nothing is held waiting, `admittable` says
    /// when to come back, and the first caller after the cool-down is the probe.
    #[tokio::test(start_paused = true)]
    async fn try_admit_never_waits_and_admittable_resolves_at_the_cooldown() {
        let h = Health::new("p", policy());
        assert!(matches!(h.try_admit(), Admission::Go(p) if !p.is_probe()));
        for _ in 0..3 {
            fail(&h).await;
        }
        assert!(matches!(h.try_admit(), Admission::Held));
        let t = Instant::now();
        h.admittable().await;
        assert_eq!(t.elapsed(), Duration::from_secs(1));
        assert_eq!(
            h.snapshot().phase,
            Phase::Quarantined,
            "admittable took nothing"
        );
        let Admission::Go(probe) = h.try_admit() else {
            panic!("the cool-down is over: a probe");
        };
        assert!(probe.is_probe());
        assert!(
            matches!(h.try_admit(), Admission::Held),
            "one probe at a time"
        );
        probe.succeeded();
        assert!(matches!(h.try_admit(), Admission::Go(p) if !p.is_probe()));
        h.close();
        assert!(matches!(h.try_admit(), Admission::Closed));
        h.admittable().await;
    }

    #[tokio::test(start_paused = true)]
    async fn zero_failures_disables_quarantine() {
        let h = Health::new(
            "p",
            QuarantinePolicy {
                failures: 0,
                ..policy()
            },
        );
        for _ in 0..10 {
            fail(&h).await;
        }
        assert!(!h.is_quarantined());
    }
}
