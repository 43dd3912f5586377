//! The chaos soak (issue "Safe under faults", 3), shared by its one-minute variant in the test
//! run (`tests/soak.rs`) and the opt-in benchmark (`host/benches/soak.rs`). Not a module of
//! `support`: it needs the `host` package's dependencies, so only that package's test and
//! benchmark include it (`#[path]`, beside `mod support`).
//!
//! All of it is the real path: `host emulator` as a process, and two `host` processes with
//! `--leader-elect` (lease 2 s, renew deadline 1.5 s, retry 300 ms), each behind its own
//! [`FreezeProxy`](crate::support::freeze_proxy::FreezeProxy) ([`Replicas`]). Each runs the
//! `soak` test guest as two plugins on one shared ConfigMap informer: `soak-a` with handlers
//! of its own (guest calls that may trap), `soak-b` with the SDK's (handed over to the host);
//! and a third time, `soak-shards`, with one informer per shard of Secrets
//! ([`SoakConfig::shards`]), all relisted in pages (`--list-page-size`).
//! About 1 % of guest calls trap; quarantine is off (`--quarantine-failures 0`: at 1 % of
//! thousands of calls a second any threshold would quarantine both plugins at once, and the
//! soak is about convergence, not quarantine), and so is the guests' log budget
//! (`--log-lines-per-second 0`, as [`Replicas`] starts every host: their one line per
//! reconcile is how the soak counts them).
//! Meanwhile:
//!
//! - writers update the ConfigMaps `events` times over `kwh-client` (merge patches; one that a
//!   dropped connection failed is sent again);
//! - four injector lanes post fault commands to `/_emulator/faults` and confirm each in
//!   `/_emulator/stats` (counted by the emulator where it took effect): watch closes, stalls
//!   and dropped connections; 429 and 500 on the leader election's requests (`get`, `update`);
//!   compactions on a timer; and, at most one every `relist_every`, the faults that make an
//!   informer relist (an in-stream 410, a 410 at LIST followed by a compaction between the
//!   pages of the relist it causes, an expired watch history, 429 and 500 on `list` and
//!   `watch`), each armed for every informer of both hosts, and a compaction before as many
//!   pages. Why those apart: client-go's reflector sleeps one backoff after every relist
//!   (800 ms doubling to 30 s, reset only two minutes after its last reset, spec 1.1), so
//!   more than a few of them per two minutes keep an informer asleep, and no other fault
//!   reaches a sleeping informer: the count comes from the number of informers each reaches;
//! - a writer updates one of the shards' Secrets every 50 ms;
//! - every `kill_every` updates a quiet point (the writers pause until every cache equals the
//!   emulator's, a memory trim passes, each host's memory is read: [`Phase`]), then, a
//!   hundredth of `kill_every` updates later, the leader gets SIGKILL and is started again; a
//!   host that exits by itself (a leader that lost its lease under the faults does) is
//!   started again too. Halfway between two kills another quiet point reads the level of
//!   every role begun since the last one.
//!
//! Then, faults cleared, the floors ([`SoakReport::floors`]): every running host's cache
//! digests (`/statusz?digest=1`) equal the digests of the emulator's LISTs (the shards' per
//! shard); every object's final
//! resourceVersion was reconciled by both plugins; no key of a plugin was reconciled by two
//! processes at overlapping times ([`overlaps`]); every host's resident memory at the end of a
//! role within 10 % of its level after that role's first sync (see [`Phase`]); no host log
//! says "panicked"; no host exited but by a kill or a lost lease.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kwh_client::client::{Patch, WriteParams};
use kwh_client::{ApiResource, Client};
use kwh_informer::store::CacheDigest;
use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::support::cluster::try_http_get;
use crate::support::process::{Line, WAIT};
use crate::support::replicas::{overlaps, LedgerRecord, Replicas};

/// The namespace of the soak's ConfigMaps.
pub const NS: &str = "soak";
/// The two plugins (one build of the `soak` guest, two configurations).
pub const PLUGINS: [&str; 2] = ["soak-a", "soak-b"];
/// The shards' namespaces are this and `-000`, `-001`, …; the third plugin watches them (see
/// [`SoakConfig::shards`]).
pub const SHARD_NS: &str = "soak-shard";
pub const SHARD_PLUGIN: &str = "soak-shards";
/// The pause between two updates of the shards' Secrets.
const SHARD_WRITE_EVERY: Duration = Duration::from_millis(50);
/// Longer than the host's memory trim period (10 s).
const TRIM_SETTLE: Duration = Duration::from_secs(11);
/// A role's memory at its end may exceed its level by this fraction at most.
pub const MEMORY_SLACK: f64 = 0.10;

/// What a soak does; [`SoakConfig::full`] is the issue's, [`SoakConfig::short`] the test run's.
#[derive(Debug, Clone)]
pub struct SoakConfig {
    /// ConfigMaps, created before the hosts start.
    pub objects: usize,
    /// Updates written in all.
    pub events: usize,
    /// Concurrent writers.
    pub writers: usize,
    /// Updates per second at most (`None`: as fast as the emulator takes them).
    pub rate: Option<f64>,
    /// Updates between two kills of the leader (0: none).
    pub kill_every: usize,
    /// Confirmed deliveries wanted of each fault kind that does not make an informer relist.
    pub faults: u64,
    /// Confirmed faults wanted of each kind that makes informers relist (the emulator's
    /// counters), from actions posted at most one per
    /// `relist_every` (see the module's documentation).
    pub relist_faults: u64,
    pub relist_every: Duration,
    /// The pause between two commands of one lane.
    pub pace: Duration,
    /// Reconcile workers per plugin.
    pub workers: u32,
    /// Guest calls that trap, per thousand (the `soak` guest's `trapPerMille`).
    pub trap_per_mille: u64,
    /// How long convergence may take after the last write.
    pub converge_within: Duration,
    /// Informers of a third plugin on each host, beside the ConfigMap informer: each watches
    /// the Secrets of a namespace of its own ([`shard_ns`]). Why: a fault that
    /// makes informers relist can come only once per backoff (see the module's
    /// documentation), and each one reaches every informer of every host; with this many
    /// more, so does each of those faults. Secrets, not ConfigMaps: they are not woken by
    /// the ConfigMaps' writes; a namespace each, not a label each: a LIST of one namespace
    /// reads only its objects (one with a label selector reads all and filters).
    pub shards: usize,
    /// Secrets per shard; one more than `page_size` makes every relist of a shard two pages.
    pub shard_objects: usize,
    /// `--list-page-size` of the hosts: every relist in pages, so that each can meet a
    /// compaction between two of them.
    pub page_size: Option<u32>,
}

impl SoakConfig {
    /// The soak: 1,000,000 updates over 10,000 ConfigMaps, a kill every 100,000,
    /// 1,000 confirmed faults of each kind wanted.
    pub fn full() -> SoakConfig {
        SoakConfig {
            objects: 10_000,
            events: 1_000_000,
            writers: 8,
            rate: None,
            kill_every: 100_000,
            faults: 1_000,
            relist_faults: 1_000,
            relist_every: Duration::from_secs(20),
            pace: Duration::from_millis(10),
            workers: 2,
            trap_per_mille: 10,
            converge_within: Duration::from_secs(240),
            shards: 200,
            shard_objects: 101,
            page_size: Some(100),
        }
    }

    /// The one-minute variant of the default test run (a debug build on two loaded cores):
    /// 1,000 ConfigMaps, 12,000 updates, one kill, a few hundred faults, one of each relist
    /// action (the informers' backoff stays short).
    pub fn short() -> SoakConfig {
        SoakConfig {
            objects: 1_000,
            events: 12_000,
            writers: 4,
            rate: None,
            kill_every: 6_000,
            faults: 40,
            relist_faults: 1,
            relist_every: Duration::from_secs(4),
            pace: Duration::from_millis(20),
            workers: 1,
            trap_per_mille: 10,
            converge_within: Duration::from_secs(45),
            shards: 10,
            shard_objects: 101,
            page_size: Some(100),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The guests' lines.

/// One reconcile as a `soak` guest printed it.
#[derive(Debug, Clone, Copy)]
struct Rec {
    start: u64,
    end: u64,
    key: u32,
    replica: u16,
    plugin: u8,
}

/// The guests' lines, read as they come and kept compactly (a full soak prints millions).
#[derive(Default)]
pub struct Tracker {
    objects: usize,
    /// Per object and plugin: the highest resourceVersion a reconcile read and finished.
    best: Vec<[u64; 2]>,
    recs: Vec<Rec>,
    /// Per replica and plugin: the objects it reconciled, and how many (its first pass).
    passes: BTreeMap<usize, [(Vec<bool>, usize); 2]>,
    pub reconciles: [u64; 2],
    pub reconcile_traps: [u64; 2],
    pub handler_traps: [u64; 2],
    /// Lines naming no known plugin or object.
    pub strays: u64,
}

impl Tracker {
    fn new(objects: usize) -> Tracker {
        Tracker {
            objects,
            best: vec![[0; 2]; objects],
            ..Tracker::default()
        }
    }

    /// Takes `line` of replica `replica` if it is a guest's soak line.
    fn take(&mut self, replica: usize, line: &Line) -> bool {
        let text = &line.text;
        if !text.contains("plugin::stdout") {
            return false;
        }
        if let Some((_, rest)) = text.split_once("SOAK-TRAP ") {
            match rest.split_whitespace().next().and_then(plugin_index) {
                Some(p) => self.handler_traps[p] += 1,
                None => self.strays += 1,
            }
            return true;
        }
        let Some((_, rest)) = text.split_once("SOAK ") else {
            return false;
        };
        // The `kube-root-ca.crt` the namespace controller puts in the soak's namespace is
        // reconciled too: not one of the soak's objects, and no stray either.
        if rest
            .split_whitespace()
            .nth(1)
            .is_some_and(|k| k.ends_with("/kube-root-ca.crt"))
        {
            return true;
        }
        let mut it = rest.split_whitespace();
        let (Some(plugin), Some(key), Some(rv), Some(start), Some(end), Some(outcome)) = (
            it.next().and_then(plugin_index),
            it.next().and_then(|k| object_index(k, self.objects)),
            it.next(),
            it.next().and_then(|s| s.parse::<u64>().ok()),
            it.next().and_then(|s| s.parse::<u64>().ok()),
            it.next(),
        ) else {
            self.strays += 1;
            return true;
        };
        self.recs.push(Rec {
            start,
            end,
            key: key as u32,
            replica: replica as u16,
            plugin: plugin as u8,
        });
        if outcome != "ok" {
            self.reconcile_traps[plugin] += 1;
            return true;
        }
        self.reconciles[plugin] += 1;
        let rv = rv.parse::<u64>().unwrap_or(0);
        let best = &mut self.best[key][plugin];
        *best = (*best).max(rv);
        let n = self.objects;
        let pass = self
            .passes
            .entry(replica)
            .or_insert_with(|| [(vec![false; n], 0), (vec![false; n], 0)]);
        let (seen, count) = &mut pass[plugin];
        if !seen[key] {
            seen[key] = true;
            *count += 1;
        }
        true
    }

    /// Whether replica `replica` has reconciled every object with both plugins.
    fn passed(&self, replica: usize) -> bool {
        self.passes
            .get(&replica)
            .is_some_and(|p| p.iter().all(|(_, n)| *n == self.objects))
    }

    /// Objects whose final version (`finals[i]`) a plugin has not reconciled: (plugin, index).
    fn missing(&self, finals: &[u64]) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for (i, want) in finals.iter().enumerate() {
            for p in 0..2 {
                if self.best[i][p] != *want {
                    out.push((p, i));
                }
            }
        }
        out
    }

    /// The pairs of reconciles of one key by one plugin in two processes at overlapping times,
    /// checked by [`overlaps`] one key at a time.
    fn overlapping(&mut self) -> Vec<(LedgerRecord, LedgerRecord)> {
        self.recs
            .sort_unstable_by_key(|r| (r.plugin, r.key, r.start, r.replica));
        let mut found = Vec::new();
        for group in self
            .recs
            .chunk_by(|a, b| (a.plugin, a.key) == (b.plugin, b.key))
        {
            let first = group[0].replica;
            if group.iter().all(|r| r.replica == first) {
                continue;
            }
            let name = format!(
                "{} {}",
                PLUGINS[group[0].plugin as usize],
                object_key(group[0].key as usize)
            );
            let records: Vec<LedgerRecord> = group
                .iter()
                .map(|r| LedgerRecord {
                    replica: r.replica as usize,
                    key: name.clone(),
                    rv: String::new(),
                    start_ns: r.start,
                    end_ns: r.end,
                    finished: true,
                })
                .collect();
            found.extend(overlaps(&records));
        }
        found
    }
}

fn plugin_index(name: &str) -> Option<usize> {
    PLUGINS.iter().position(|p| *p == name)
}

/// `soak/cm-00042` → 42.
fn object_index(key: &str, objects: usize) -> Option<usize> {
    let i: usize = key.strip_prefix(NS)?.strip_prefix("/cm-")?.parse().ok()?;
    (i < objects).then_some(i)
}

fn object_name(i: usize) -> String {
    format!("cm-{i:05}")
}

fn object_key(i: usize) -> String {
    format!("{NS}/{}", object_name(i))
}

// ---------------------------------------------------------------------------------------------
// The fault injector.

/// A fault counter of `/_emulator/stats`, as the table names it.
pub const COUNTERS: [(&str, &str, bool); 9] = [
    (
        "closedAfter",
        "watch closed after N events (closeWatchesAfter)",
        false,
    ),
    ("stalled", "watch stream stalled (stallStreams)", false),
    ("dropped", "connection dropped (dropConnections)", false),
    ("tooManyRequests", "429 (failNext)", false),
    ("serverErrors", "500 (failNext)", false),
    ("expired", "410 in-stream (injectExpired)", true),
    (
        "watchesTooOld",
        "410 in-stream, history expired (expireWatchHistory)",
        true,
    ),
    ("listsExpired", "410 at LIST (failNext 410 on list)", true),
    (
        "listsCompacted",
        "LIST page refused by a compaction (compactBeforeContinue)",
        true,
    ),
];

/// The fault kinds that show only if something is written at the right moment, so a short run
/// may miss them (the test run does not require them; the emulator's own tests cover each):
/// an expired watch history is too old only for a watch stalled behind events written before
/// it was dropped (`fault_expire_watch_history_expires_old_rvs`), and a compaction between
/// two pages of a LIST refuses the second only if something was written since the first
/// (`a_compaction_before_the_next_continue_refuses_that_page`), where the paged relist comes
/// after the informer's backoff, maybe in a quiet point or after the last write.
pub const NEED_WRITES: [&str; 2] = ["watchesTooOld", "listsCompacted"];

/// An action's posts and how many of them were confirmed.
#[derive(Debug, Default, Clone, Copy)]
pub struct Posted {
    pub posted: u64,
    pub confirmed: u64,
}

struct Injector {
    client: Client,
    stop: AtomicBool,
    cfg: SoakConfig,
    actions: Mutex<BTreeMap<&'static str, Posted>>,
    rng: AtomicU64,
}

impl Injector {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// A number in `[lo, hi)` (xorshift; the runs need variety, not reproducibility).
    fn random(&self, lo: u64, hi: u64) -> u64 {
        let mut x = self.rng.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.store(x, Ordering::Relaxed);
        lo + x % (hi - lo).max(1)
    }

    async fn faults(&self) -> Option<Value> {
        stats(&self.client).await.map(|s| s["faults"].clone())
    }

    async fn counter(&self, name: &str) -> Option<u64> {
        self.faults().await.and_then(|f| f[name].as_u64())
    }

    async fn post(&self, cmd: &Value) -> bool {
        post_fault(&self.client, cmd).await
    }

    fn note(&self, action: &'static str, confirmed: bool) {
        let mut a = self.actions.lock();
        let e = a.entry(action).or_default();
        e.posted += 1;
        e.confirmed += u64::from(confirmed);
    }

    fn confirmed(&self, action: &'static str) -> u64 {
        self.actions.lock().get(action).map_or(0, |p| p.confirmed)
    }

    /// Posts `cmd` (again every `repeat`, if given: a kick reaches only the watches open at
    /// that moment) until `counter` rises, within `within`. Whether it did. The end of the
    /// writes does not cut it short (`within` bounds it): a fault armed is seen through.
    async fn deliver(
        &self,
        action: &'static str,
        counter: &str,
        cmd: Value,
        repeat: Option<Duration>,
        within: Duration,
    ) -> bool {
        let Some(before) = self.counter(counter).await else {
            return false;
        };
        self.post(&cmd).await;
        let deadline = Instant::now() + within;
        let mut next = repeat.map(|r| Instant::now() + r);
        let done = loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if self.counter(counter).await.is_some_and(|n| n > before) {
                break true;
            }
            if Instant::now() >= deadline {
                break false;
            }
            if let (Some(t), Some(r)) = (next, repeat) {
                if Instant::now() >= t {
                    self.post(&cmd).await;
                    next = Some(Instant::now() + r);
                }
            }
        };
        self.note(action, done);
        done
    }

    /// Sleeps `d`, or less if the soak stops meanwhile.
    async fn pause(&self, d: Duration) {
        let until = Instant::now() + d;
        while !self.stopped() && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20).min(until - Instant::now())).await;
        }
    }

    /// Watch closes, stalls and dropped connections, in turn, until each has `faults`.
    async fn streams_lane(&self) {
        let mut turn = 0usize;
        while !self.stopped() {
            let Some(f) = self.faults().await else {
                self.pause(self.cfg.pace).await;
                continue;
            };
            let want = |k: &str| f[k].as_u64().unwrap_or(0) < self.cfg.faults;
            let pending: Vec<&str> = ["closedAfter", "stalled", "dropped"]
                .into_iter()
                .filter(|k| want(k))
                .collect();
            if !want("closedAfter") {
                self.post(&json!({"closeWatchesAfter": 0})).await;
            }
            let Some(&kind) = pending.get(turn % pending.len().max(1)) else {
                break;
            };
            turn += 1;
            match kind {
                "closedAfter" => {
                    let n = self.random(50, 400);
                    let cmd = json!({ "closeWatchesAfter": n });
                    self.deliver("closeWatchesAfter", kind, cmd, None, Duration::from_secs(2))
                        .await
                }
                "stalled" => {
                    let secs = self.random(20, 200) as f64 / 1000.0;
                    let cmd = json!({ "stallStreams": secs });
                    self.deliver("stallStreams", kind, cmd, None, Duration::from_secs(1))
                        .await
                }
                _ => {
                    let cmd = json!({"dropConnections": true});
                    self.deliver("dropConnections", kind, cmd, None, Duration::from_secs(1))
                        .await
                }
            };
            self.pause(self.cfg.pace).await;
        }
        self.post(&json!({"closeWatchesAfter": 0})).await;
    }

    /// 429 and 500 on the leader election's requests, in turn, until each has `faults`. A
    /// failure not taken within its window is disarmed.
    async fn requests_lane(&self) {
        let mut turn = 0u64;
        while !self.stopped() {
            let Some(f) = self.faults().await else {
                self.pause(self.cfg.pace).await;
                continue;
            };
            let want = |k: &str| f[k].as_u64().unwrap_or(0) < self.cfg.faults;
            let too_many = (429, "tooManyRequests", "failNext 429 (get, update)");
            let server_error = (500, "serverErrors", "failNext 500 (get, update)");
            let (code, counter, action) = match (want("tooManyRequests"), want("serverErrors")) {
                (false, false) => break,
                (true, true) if turn % 2 == 0 => too_many,
                (true, true) | (false, true) => server_error,
                (true, false) => too_many,
            };
            turn += 1;
            let verbs = ["get", "update"];
            let cmd =
                json!({"failNext": {"count": 1, "code": code, "retryAfter": 1, "verbs": verbs}});
            if !self
                .deliver(action, counter, cmd, None, Duration::from_secs(2))
                .await
            {
                let off = json!({"failNext": {"count": 0, "code": code, "verbs": verbs}});
                self.post(&off).await;
            }
            // Not two in a row on one replica's renewals: it has 1.5 s to renew.
            self.pause(self.cfg.pace.max(Duration::from_millis(300)))
                .await;
        }
    }

    /// Compactions on a timer, as etcd's: an informer's LISTs at a resourceVersion are not
    /// Exact and its watches are served from the history, so these pass it by unless they
    /// fall between the pages of a LIST (which `compactBeforeContinue` makes sure of).
    async fn compactions_lane(&self) {
        while !self.stopped() {
            if self.post(&json!({"compactHistory": true})).await {
                self.note("compactHistory", true);
            }
            self.pause(self.cfg.pace.max(Duration::from_millis(100)))
                .await;
        }
    }

    /// The relist actions, in turn, one per `relist_every`, each until `relist_faults` of
    /// them were confirmed.
    async fn relists_lane(&self) {
        type Act = (&'static str, &'static str);
        // The quickest first (a kick is confirmed within a second; a LIST's 410 may wait
        // out a backoff), each in turn after the one before it, pending or not: a rotation
        // over the pending ones only would skip an action each time the set shrinks.
        let acts: [Act; 5] = [
            ("injectExpired", "expired"),
            ("failNext 410 (list)", "listsExpired"),
            ("stallStreams + expireWatchHistory", "watchesTooOld"),
            ("failNext 500 (list, watch)", "serverErrors"),
            ("failNext 429 (list, watch)", "tooManyRequests"),
        ];
        // The informers one fault can reach: both hosts' (a third runs only between a kill
        // and the next sync), the ConfigMaps' and each shard's. Failures are armed for as
        // many requests, and a compaction before as many pages.
        let reach = 2 * (1 + self.cfg.shards as u64);
        let (want_relists, want_requests) = (self.cfg.relist_faults, self.cfg.faults);
        let mut next = 0usize;
        self.pause(Duration::from_secs(2)).await;
        while !self.stopped() {
            // Pending while the emulator's counter is short of what is wanted (429 and 500
            // also come from the requests lane).
            let Some(f) = self.faults().await else {
                self.pause(self.cfg.pace).await;
                continue;
            };
            let short = |c: &str, want: u64| f[c].as_u64().unwrap_or(0) < want;
            let pending = |i: usize| match acts[i].1 {
                "listsExpired" => {
                    short("listsExpired", want_relists) || short("listsCompacted", want_relists)
                }
                c @ ("serverErrors" | "tooManyRequests") => short(c, want_requests),
                c => short(c, want_relists),
            };
            let Some(i) = (next..next + acts.len())
                .map(|i| i % acts.len())
                .find(|&i| pending(i))
            else {
                break;
            };
            next = i + 1;
            let (action, counter) = acts[i];
            let window = self.cfg.relist_every.min(Duration::from_secs(10));
            // Every relist the action causes is paged (`--list-page-size`): a compaction comes
            // before the next pages, so that their continue tokens expire and the pagers list
            // whole (spec 1.4). Confirmed if any did by the end of the action's pause.
            let compacted_before = self.counter("listsCompacted").await;
            if self.cfg.page_size.is_some() {
                self.post(&json!({"compactBeforeContinue": reach})).await;
            }
            match action {
                "injectExpired" => {
                    let cmd = json!({"injectExpired": true});
                    self.deliver(
                        action,
                        counter,
                        cmd,
                        Some(Duration::from_millis(100)),
                        window,
                    )
                    .await;
                }
                "failNext 410 (list)" => {
                    // Two 410s for each informer's LIST: its relist at its RV, then its retry
                    // at once from the most recent state (spec 1.3-1.4). Armed until LISTs
                    // take them: an informer lists only after a relist fault and its backoff
                    // (up to a minute); the kick makes the hosts relist.
                    let arm =
                        json!({"failNext": {"count": 2 * reach, "code": 410, "verbs": ["list"]}});
                    self.post(&arm).await;
                    let cmd = json!({"injectExpired": true});
                    let repeat = Some(Duration::from_millis(200));
                    let window = Duration::from_secs(65);
                    self.deliver(action, counter, cmd, repeat, window).await;
                }
                "stallStreams + expireWatchHistory" => {
                    // Events pile up behind a stall; the history they were in is then
                    // dropped, so the stalled watches' next read is too old.
                    self.post(&json!({"stallStreams": 0.3})).await;
                    self.pause(Duration::from_millis(100)).await;
                    let cmd = json!({"expireWatchHistory": true});
                    self.deliver(action, counter, cmd, None, Duration::from_secs(2))
                        .await;
                }
                _ => {
                    let code = if counter == "serverErrors" { 500 } else { 429 };
                    let verbs = ["list", "watch"];
                    let cmd = json!({"failNext": {"count": reach, "code": code, "retryAfter": 1, "verbs": verbs}});
                    if !self.deliver(action, counter, cmd, None, window).await {
                        let off = json!({"failNext": {"count": 0, "code": code, "verbs": verbs}});
                        self.post(&off).await;
                    }
                }
            }
            self.pause(self.cfg.relist_every).await;
            if self.cfg.page_size.is_some() {
                let compacted = self.counter("listsCompacted").await > compacted_before;
                self.note("compactBeforeContinue", compacted);
            }
        }
    }
}

/// The cache digest of `items` as `/statusz?digest=1` writes it: `objects:digest`.
fn digest_text<'a>(items: impl IntoIterator<Item = &'a kwh_client::Object>) -> String {
    let keys: Vec<(String, String)> = items
        .into_iter()
        .map(|o| (o.key(), o.resource_version().to_string()))
        .collect();
    let d = CacheDigest::of(keys.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    format!("{}:{d:x}", d.objects)
}

/// `GET /_emulator/stats`, or `None` (the request failed: a dropped connection).
async fn stats(client: &Client) -> Option<Value> {
    let body = client
        .request_raw(http::Method::GET, "/_emulator/stats", None)
        .await
        .ok()?;
    serde_json::from_slice(&body).ok()
}

/// `POST /_emulator/faults`; false when it failed (a connection dropped by a fault may be
/// the very one that carried the command).
async fn post_fault(client: &Client, cmd: &Value) -> bool {
    let body = Bytes::from(cmd.to_string());
    client
        .request_raw(
            http::Method::POST,
            "/_emulator/faults",
            Some((body, "application/json")),
        )
        .await
        .is_ok()
}

// ---------------------------------------------------------------------------------------------
// The hosts.

/// A role a host process held, and its resident memory as it began, at its level and at its
/// end.
///
/// Why per role: a standby caches and hands notifications to no guest; a leader also runs two
/// plugins' instances and reconciles. A process that starts as a standby and is later killed
/// as the leader would otherwise be held to a level taken before it ran any guest. So a
/// standby begins when it first reports ready (its caches synced), a leader once it has
/// reconciled every object with both plugins (its first pass: the caches replayed to the
/// plugins as it took over, or the initial sync); a role ends when the process is killed,
/// when a standby takes over (just before the kill of the leader), or at the end of the soak.
///
/// Both its level and its end are read at quiet points: the writers pause until every cache
/// equals the emulator's, one memory trim passes, every host's memory is read, and the
/// writers go on. The level is read at the first quiet point after the role began, halfway
/// between two kills: after its first sync *under the load*. Read as the role begins instead,
/// a level is either mid-stream (a standby's memory swung by ±15 % with what it had in
/// flight: a relist's two copies, events read but not yet cached) or, for the hosts that
/// start before the load, a process that has not yet seen one update, relist or fault: the
/// first standby's memory then stepped up by up to 18 % in its first relist storms (the heap's
/// peak, held as fragmentation) and stayed flat after, which is the load's working set, not
/// growth. The end is read at the quiet point before the kill that ends the role (the kill
/// comes a hundredth of `kill_every` updates later, mid-stream), or after convergence at the
/// end of the soak.
#[derive(Debug, Clone)]
pub struct Phase {
    pub role: &'static str,
    /// (KiB, updates written by then) as the role began: shown, not judged.
    pub began: (u64, u64),
    /// (KiB, updates written by then) at the first quiet point after the role began, else
    /// `began` (a role with no quiet point between its start and its end).
    pub level: (u64, u64),
    /// Whether `level` was read at a quiet point.
    pub settled: bool,
    pub end: Option<(u64, u64)>,
}

impl Phase {
    fn new(role: &'static str, began: (u64, u64)) -> Phase {
        Phase {
            role,
            began,
            level: began,
            settled: false,
            end: None,
        }
    }
}

/// What a quiet point reads (see [`Phase`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quiet {
    /// The level of each role that has none yet.
    Level,
    /// What ends each role at the kill that follows.
    End,
}

/// One `host` process of the soak.
#[derive(Debug, Clone)]
pub struct HostRun {
    /// Its place in [`Replicas::replicas`].
    pub id: usize,
    pub pid: u32,
    /// Updates written when it started.
    pub started_at: u64,
    pub phases: Vec<Phase>,
    /// Peak resident memory (`VmHWM`), KiB, at its last sample.
    pub peak_kib: u64,
    /// (updates written, RSS KiB) about every twentieth of the updates, while it ran.
    pub samples: Vec<(u64, u64)>,
    /// How it ended: `killed`, `lost its lease`, `exited: <status>`, or `running`.
    pub ended: String,
    /// Its memory at the last quiet point (writes paused, caches equal to the emulator's, one
    /// memory trim later), KiB, and the updates written by then: what ends its role at the
    /// kill that follows (see [`Phase`]).
    quiet: Option<(u64, u64)>,
    /// Its last lines about the lease, if it exited by itself.
    pub why: Vec<String>,
    /// `plugin_*`/`informer_*` counters from its last `/metrics` scrape (summed over labels).
    pub metrics: BTreeMap<String, u64>,
    ready: bool,
    leader: bool,
}

impl HostRun {
    fn open_phase(&mut self) -> Option<&mut Phase> {
        self.phases.last_mut().filter(|p| p.end.is_none())
    }
}

/// The metric families the report sums over every process's last scrape.
const METRICS: [&str; 7] = [
    "plugin_reconcile_total",
    "plugin_guest_traps_total",
    "plugin_notification_retries_total",
    "plugin_notifications_dropped_total",
    "plugin_instantiations_total",
    "informer_relists_total",
    "informer_watch_restarts_total",
];

fn sum_metrics(body: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in body.lines() {
        let Some((name, rest)) = line.split_once('{') else {
            continue;
        };
        if !METRICS.contains(&name) {
            continue;
        }
        let value = rest
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        *out.entry(name.to_string()).or_default() += value as u64;
    }
    out
}

/// `GET path` on a host's ops address, `None` if it does not answer.
async fn ops_get(addr: &str, path: &str) -> Option<(u16, String)> {
    tokio::time::timeout(Duration::from_secs(5), try_http_get(addr, path))
        .await
        .ok()?
        .ok()
}

/// The plugins file: the `soak` guest twice, `soak-a` with its own handlers; a third time,
/// not trapping, for the shards' informers if there are any.
fn plugins_file(dir: &Path, cfg: &SoakConfig) -> PathBuf {
    let path = dir.join("soak-plugins.yaml");
    let module = crate::support::guests::guest("soak");
    let entry = |name: &str, guest_handlers: bool| {
        json!({"module": module, "workers": cfg.workers, "config": {
            "name": name, "namespace": NS, "guestHandlers": guest_handlers,
            "trapPerMille": cfg.trap_per_mille}})
    };
    let mut file = vec![entry(PLUGINS[0], true), entry(PLUGINS[1], false)];
    if cfg.shards > 0 {
        file.push(json!({"module": module, "workers": 1, "config": {
            "name": SHARD_PLUGIN, "namespace": SHARD_NS, "shards": cfg.shards,
            "trapPerMille": 0}}));
    }
    std::fs::write(&path, Value::Array(file).to_string()).expect("write plugins file");
    path
}

fn host_args(plugins: &Path, page_size: Option<u32>) -> Vec<OsString> {
    let page_size = page_size.map(|n| n.to_string());
    let page_size = page_size
        .iter()
        .flat_map(|n| ["--list-page-size", n.as_str()]);
    [
        "--plugins",
        &plugins.display().to_string(),
        "--leader-elect",
        "--leader-elect-lease-duration",
        "2s",
        "--leader-elect-renew-deadline",
        "1500ms",
        "--leader-elect-retry-period",
        "300ms",
        "--quarantine-failures",
        "0",
    ]
    .into_iter()
    .chain(page_size)
    .map(OsString::from)
    .collect()
}

// ---------------------------------------------------------------------------------------------
// The run.

/// What a soak did and found.
#[derive(Debug, Clone, Default)]
pub struct SoakReport {
    pub objects: usize,
    pub events: u64,
    /// Seconds the writes took.
    pub write_seconds: f64,
    /// Write retries (a dropped connection failed the first try).
    pub write_retries: u64,
    /// Shards (Secret informers of the third plugin, per host), Secrets in each, and the
    /// updates of them written.
    pub shards: usize,
    pub shard_objects: usize,
    pub shard_writes: u64,
    /// The emulator's fault counters at the end (`/_emulator/stats`, `faults`).
    pub faults: BTreeMap<String, u64>,
    pub fault_target: u64,
    pub relist_target: u64,
    /// Without convergence: each running host's last lines of its own.
    pub tails: Vec<String>,
    pub actions: BTreeMap<&'static str, Posted>,
    pub kills: usize,
    /// Seconds the writers were paused at quiet points (left out of the write time).
    pub quiet_seconds: f64,
    pub hosts: Vec<HostRun>,
    /// Seconds from the last write until every cache and every reconcile had converged.
    pub convergence_seconds: Option<f64>,
    /// Running hosts whose cache digest differs from the emulator's at the end, with both.
    pub digest_mismatches: Vec<String>,
    pub emulator_digest: String,
    /// (plugin, key) whose final version was not reconciled.
    pub unreconciled: Vec<String>,
    pub reconciles: [u64; 2],
    pub reconcile_traps: [u64; 2],
    pub handler_traps: [u64; 2],
    pub stray_lines: u64,
    pub overlaps: Vec<String>,
    pub panics: Vec<String>,
    /// Processes that exited neither by a kill nor by losing their lease.
    pub crashes: Vec<String>,
}

impl SoakReport {
    /// Each floor: (what, the figure, met).
    pub fn floors(&self) -> Vec<(String, String, bool)> {
        let mut out = vec![
            (
                "every running host's cache equals the emulator (digest)".to_string(),
                format!(
                    "{} mismatch(es), emulator {}",
                    self.digest_mismatches.len(),
                    self.emulator_digest
                ),
                self.digest_mismatches.is_empty() && self.convergence_seconds.is_some(),
            ),
            (
                "every object's final resourceVersion reconciled, by both plugins".to_string(),
                format!("{} (plugin, object) missing", self.unreconciled.len()),
                self.unreconciled.is_empty(),
            ),
            (
                "no key of a plugin reconciled by two processes at once".to_string(),
                format!("{} overlapping pair(s)", self.overlaps.len()),
                self.overlaps.is_empty(),
            ),
            (
                "no panic in any host's or the emulator's log".to_string(),
                format!("{} line(s)", self.panics.len()),
                self.panics.is_empty(),
            ),
            (
                "no host exited but by a kill or a lost lease".to_string(),
                format!("{} other exit(s)", self.crashes.len()),
                self.crashes.is_empty(),
            ),
        ];
        for h in &self.hosts {
            for p in &h.phases {
                // Judged only over a role that saw updates (not one that ended as it began).
                let Some(end) = p.end.filter(|e| e.1 > p.level.1) else {
                    continue;
                };
                let met = end.0 as f64 <= p.level.0 as f64 * (1.0 + MEMORY_SLACK);
                out.push((
                    format!(
                        "host {} (pid {}) as {}: RSS at the end within 10 % of its level",
                        h.id, h.pid, p.role
                    ),
                    format!(
                        "{} → {} KiB ({:+.1} %), updates {} → {}{}",
                        p.level.0,
                        end.0,
                        (end.0 as f64 / p.level.0.max(1) as f64 - 1.0) * 100.0,
                        p.level.1,
                        end.1,
                        if p.settled {
                            ""
                        } else {
                            " (no quiet point in the role: level as it began)"
                        }
                    ),
                    met,
                ));
            }
        }
        out
    }

    /// The floors not met.
    /// A fault counter's confirmed count and the count wanted of it.
    pub fn fault_count(&self, counter: &str) -> (u64, u64) {
        let n = self.faults.get(counter).copied().unwrap_or(0);
        let relist = COUNTERS.iter().any(|(c, _, r)| *c == counter && *r);
        let want = if relist {
            self.relist_target
        } else {
            self.fault_target
        };
        (n, want)
    }

    /// The fault kinds confirmed fewer times than wanted, each with both counts.
    pub fn faults_short(&self) -> Vec<String> {
        COUNTERS
            .iter()
            .filter_map(|(c, _, _)| {
                let (n, want) = self.fault_count(c);
                (n < want).then(|| format!("{c}: {n} of {want}"))
            })
            .collect()
    }

    pub fn unmet(&self) -> Vec<String> {
        self.floors()
            .into_iter()
            .filter(|(_, _, met)| !met)
            .map(|(what, figure, _)| format!("{what}: {figure}"))
            .collect()
    }

    /// The report as Markdown tables.
    pub fn table(&self) -> String {
        [
            self.summary_table(),
            self.faults_table(),
            self.actions_table(),
            self.hosts_table(),
            markdown(
                &["floor", "figure", "met"],
                self.floors()
                    .into_iter()
                    .map(|(what, figure, met)| vec![what, figure, met.to_string()]),
            ),
        ]
        .join("\n")
    }

    /// What was written, killed and reconciled, and the hosts' counters summed.
    fn summary_table(&self) -> String {
        let mut rows = Vec::new();
        let mut row = |cells: &[String]| rows.push(cells.to_vec());
        let rate = self.events as f64 / self.write_seconds.max(1e-9);
        for (what, figure) in [
            ("ConfigMaps", self.objects.to_string()),
            (
                "updates written (retried after a dropped connection)",
                format!(
                    "{} in {:.1} s, {rate:.0}/s ({})",
                    self.events, self.write_seconds, self.write_retries
                ),
            ),
            (
                "shards: Secret informers per host (Secrets each, updates written)",
                format!(
                    "{} ({}, {})",
                    self.shards, self.shard_objects, self.shard_writes
                ),
            ),
            ("leader kills (SIGKILL)", self.kills.to_string()),
            (
                "quiet points: levels and ends of roles (writes paused)",
                format!("{:.1} s in all", self.quiet_seconds),
            ),
            ("host processes", self.hosts.len().to_string()),
            (
                "convergence after the last write",
                self.convergence_seconds
                    .map_or("not reached".into(), |c| format!("{c:.1} s")),
            ),
            (
                "reconciles finished (soak-a, soak-b)",
                format!("{}, {}", self.reconciles[0], self.reconciles[1]),
            ),
            (
                "reconciles trapped (soak-a, soak-b)",
                format!("{}, {}", self.reconcile_traps[0], self.reconcile_traps[1]),
            ),
            (
                "handler calls trapped (soak-a; soak-b's are the host's)",
                format!("{}", self.handler_traps[0] + self.handler_traps[1]),
            ),
        ] {
            row(&[what.into(), figure]);
        }
        let mut totals: BTreeMap<&str, u64> = BTreeMap::new();
        for h in &self.hosts {
            for (k, v) in &h.metrics {
                *totals.entry(k.as_str()).or_default() += v;
            }
        }
        for (k, v) in totals {
            row(&[
                format!("`{k}`, all processes (last scrape each)"),
                v.to_string(),
            ]);
        }
        markdown(&["what", "figure"], rows)
    }

    /// Each fault kind: how many the emulator confirmed, against how many are wanted.
    fn faults_table(&self) -> String {
        let mut rows = Vec::new();
        for (counter, label, _) in COUNTERS {
            let (n, want) = self.fault_count(counter);
            rows.push(vec![
                format!("{label} `{counter}`"),
                n.to_string(),
                want.to_string(),
                (n >= want).to_string(),
            ]);
        }
        for k in ["compacted", "historyExpired", "failed"] {
            rows.push(vec![
                format!("(acts) `{k}`"),
                self.faults.get(k).copied().unwrap_or(0).to_string(),
                "-".into(),
                "-".into(),
            ]);
        }
        markdown(
            &["fault (emulator's counter)", "confirmed", "wanted", "met"],
            rows,
        )
    }

    /// What the injector posted, and what the emulator confirmed of it.
    fn actions_table(&self) -> String {
        markdown(
            &["injector action", "posted", "confirmed"],
            self.actions
                .iter()
                .map(|(a, p)| vec![a.to_string(), p.posted.to_string(), p.confirmed.to_string()]),
        )
    }

    /// Each host process: its roles' memory, why it ended, its RSS over the run.
    fn hosts_table(&self) -> String {
        let rows = self.hosts.iter().map(|h| {
            let phases: Vec<String> = h
                .phases
                .iter()
                .map(|p| {
                    let level = if p.settled {
                        p.level.0.to_string()
                    } else {
                        "none".to_string()
                    };
                    let end = p.end.map_or("?".to_string(), |e| e.0.to_string());
                    format!("{}: {}, {level} → {end}", p.role, p.began.0)
                })
                .collect();
            vec![
                h.id.to_string(),
                h.pid.to_string(),
                h.started_at.to_string(),
                h.ended.clone(),
                phases.join("; "),
                h.peak_kib.to_string(),
            ]
        });
        let header = [
            "host",
            "pid",
            "from update",
            "ended",
            "role: RSS as it began, level → end (KiB)",
            "peak RSS (KiB)",
        ];
        let mut s = markdown(&header, rows);
        for h in self.hosts.iter().filter(|h| !h.why.is_empty()) {
            s.push_str(&format!("\nhost {} {}:\n", h.id, h.ended));
            for l in &h.why {
                s.push_str(&format!("    {l}\n"));
            }
        }
        s.push('\n');
        for h in &self.hosts {
            let samples: Vec<String> = h
                .samples
                .iter()
                .map(|(at, kib)| format!("{}k:{kib}", at / 1000))
                .collect();
            s.push_str(&format!(
                "host {} RSS (KiB) by updates written: {}\n",
                h.id,
                samples.join(" ")
            ));
        }
        s
    }
}

/// A Markdown table: the header, its rule, one line per row.
fn markdown(header: &[&str], rows: impl IntoIterator<Item = Vec<String>>) -> String {
    let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
    let head: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    let mut s = line(&head);
    s.push_str(&line(&vec!["---".to_string(); header.len()]));
    for r in rows {
        s.push_str(&line(&r));
    }
    s
}

/// The soak's state between its steps.
struct Soak {
    rs: Replicas,
    args: Vec<OsString>,
    tracker: Tracker,
    hosts: Vec<HostRun>,
    written: Arc<AtomicU64>,
    kills: usize,
    /// Updates to write in all.
    events: u64,
    /// [`SoakConfig::shards`].
    shards: usize,
}

impl Soak {
    /// Reads every process's new lines: the guests' into the tracker, the rest kept.
    fn ingest(&mut self) {
        let tracker = &mut self.tracker;
        for r in &mut self.rs.replicas {
            let id = r.id;
            r.process.take_lines(|l| tracker.take(id, l));
        }
        self.rs.emulator.process.drain();
    }

    async fn spawn(&mut self) -> usize {
        let id = self.rs.spawn(self.args.clone()).await;
        let pid = self.rs.replicas[id].process.pid().unwrap_or(0);
        self.hosts.push(HostRun {
            id,
            pid,
            started_at: self.written.load(Ordering::Relaxed),
            phases: Vec::new(),
            peak_kib: 0,
            samples: Vec::new(),
            ended: "running".into(),
            quiet: None,
            why: Vec::new(),
            metrics: BTreeMap::new(),
            ready: false,
            leader: false,
        });
        id
    }

    fn live(&self) -> Vec<usize> {
        self.hosts
            .iter()
            .filter(|h| h.ended == "running")
            .map(|h| h.id)
            .collect()
    }

    fn memory(&self, id: usize) -> Option<(u64, u64)> {
        self.rs.replicas[id].process.memory_kib()
    }

    async fn scrape(&mut self, id: usize) {
        let addr = self.rs.replicas[id].ops_addr().await;
        if let Some((200, body)) = ops_get(&addr, "/metrics").await {
            self.hosts[id].metrics = sum_metrics(&body);
        }
        if let Some((_, peak)) = self.memory(id) {
            self.hosts[id].peak_kib = peak;
        }
    }

    /// Closes the open phase of `id` with its memory at the last quiet point since the phase
    /// began, else its memory now.
    fn end_phase(&mut self, id: usize) {
        let now = self.written.load(Ordering::Relaxed);
        let mem = self.memory(id);
        let quiet = self.hosts[id].quiet.take();
        if let Some(p) = self.hosts[id].open_phase() {
            p.end = match (quiet, mem) {
                (Some((rss, at)), _) if at >= p.level.1 => Some((rss, at)),
                (_, Some((rss, _))) => Some((rss, now)),
                _ => None,
            };
        }
    }

    /// Every live host's caches against the emulator's state: one line per host that differs
    /// (none: all equal). Each host's two plugins read one informer's cache, reported twice;
    /// the shards' plugin one per shard, compared as a set with the digests of the emulator's
    /// Secrets grouped by shard.
    async fn mismatches(&mut self, client: &Client) -> Vec<String> {
        let Ok(list) = client
            .list(&configmaps(), Some(NS), &Default::default())
            .await
        else {
            return vec!["the emulator's LIST failed".into()];
        };
        let want_text = digest_text(&list.items);
        let mut want_shards = Vec::new();
        if self.shards > 0 {
            let Ok(list) = client.list(&secrets(), None, &Default::default()).await else {
                return vec!["the emulator's LIST of the shards failed".into()];
            };
            let mut by_shard: BTreeMap<&str, Vec<&kwh_client::Object>> = BTreeMap::new();
            for o in &list.items {
                by_shard
                    .entry(o.namespace().unwrap_or(""))
                    .or_default()
                    .push(o);
            }
            want_shards = (0..self.shards)
                .map(|i| digest_text(by_shard.remove(shard_ns(i).as_str()).unwrap_or_default()))
                .collect();
            want_shards.sort();
        }
        let mut mismatches = Vec::new();
        for id in self.live() {
            let addr = self.rs.replicas[id].ops_addr().await;
            let Some((200, body)) = ops_get(&addr, "/statusz?digest=1").await else {
                mismatches.push(format!("host {id}: no answer"));
                continue;
            };
            let v: Value = serde_json::from_str(&body).unwrap_or_default();
            let cache = |i: &Value| {
                let c = &i["cache"];
                format!("{}:{}", c["objects"], c["digest"].as_str().unwrap_or("?"))
            };
            let (mut got, mut got_shards) = (Vec::new(), Vec::new());
            for p in v["plugins"].as_array().into_iter().flatten() {
                if p["name"] == SHARD_PLUGIN {
                    let informers = p["informers"].as_array().into_iter().flatten();
                    got_shards = informers.map(cache).collect();
                    got_shards.sort();
                } else {
                    got.push(cache(&p["informers"][0]));
                }
            }
            if got.len() != 2 || got.iter().any(|g| *g != want_text) {
                mismatches.push(format!("host {id}: {got:?} (emulator {want_text})"));
            }
            if got_shards != want_shards {
                let differ = got_shards
                    .iter()
                    .filter(|g| !want_shards.contains(g))
                    .count();
                mismatches.push(format!(
                    "host {id}: {} of {} shards' caches differ from the emulator's",
                    differ.max(want_shards.len().abs_diff(got_shards.len())),
                    want_shards.len()
                ));
            }
        }
        mismatches
    }

    /// A quiet point (see [`Phase`]): the writers paused until every live host's caches equal
    /// the emulator's (at most `within`), one memory trim, every live host's memory read: as
    /// the level of its open role if that has none yet (`Quiet::Level`), else as what ends
    /// that role at the kill that follows (`Quiet::End`).
    async fn quiet_point(
        &mut self,
        client: &Client,
        paused: &AtomicBool,
        within: Duration,
        what: Quiet,
    ) {
        let deadline = Instant::now() + within;
        paused.store(true, Ordering::Relaxed);
        if what == Quiet::Level {
            // Every live host in a role first: a standby started at the last kill ready, the
            // new leader through its first pass (at most `within`).
            loop {
                self.survey().await;
                let live = self.live();
                if live.iter().all(|&id| self.hosts[id].open_phase().is_some())
                    || Instant::now() >= deadline
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        loop {
            self.survey().await;
            if self.mismatches(client).await.is_empty() || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        tokio::time::sleep(TRIM_SETTLE).await;
        let now = self.written.load(Ordering::Relaxed);
        for id in self.live() {
            let Some((rss, _)) = self.memory(id) else {
                continue;
            };
            match what {
                Quiet::End => self.hosts[id].quiet = Some((rss, now)),
                Quiet::Level => {
                    if let Some(p) = self.hosts[id].open_phase().filter(|p| !p.settled) {
                        p.level = (rss, now);
                        p.settled = true;
                    }
                }
            }
        }
        paused.store(false, Ordering::Relaxed);
    }

    /// Looks at every running host: readiness, role, first passes (phases start), exits
    /// (restarted).
    async fn survey(&mut self) {
        self.ingest();
        let now = self.written.load(Ordering::Relaxed);
        for id in self.live() {
            if self.rs.replicas[id].process.has_exited() {
                // The rest of its output first: why it exited.
                self.rs.replicas[id].process.exit(WAIT).await;
                self.ingest();
                let process = &self.rs.replicas[id].process;
                let lost = process.saw("leader election lost");
                self.hosts[id].ended = if lost {
                    "lost its lease".into()
                } else {
                    "exited by itself".into()
                };
                // Why: its last lines about the lease (failed renewals, then the loss).
                let why = process.lines_mentioning(&["lease", "leader election"]);
                let from = why.len().saturating_sub(4);
                self.hosts[id].why = why[from..].iter().map(|l| l.to_string()).collect();
                self.spawn().await;
                continue;
            }
            let addr = self.rs.replicas[id].ops_addr().await;
            let Some((_, body)) = ops_get(&addr, "/statusz").await else {
                continue;
            };
            let v: Value = serde_json::from_str(&body).unwrap_or_default();
            let ready = v["ready"] == true;
            let leader = v["replica"]["role"] == "leader";
            let mem = self.memory(id);
            let passed = self.tracker.passed(id);
            let every = (self.events / 20).max(1);
            let h = &mut self.hosts[id];
            if let Some((rss, peak)) = mem {
                h.peak_kib = peak;
                if h.samples.last().is_none_or(|(at, _)| now >= at + every) {
                    h.samples.push((now, rss));
                }
            }
            if ready && !h.ready && !leader && h.phases.is_empty() {
                if let Some((rss, _)) = mem {
                    h.phases.push(Phase::new("standby", (rss, now)));
                }
            }
            h.ready |= ready;
            if leader {
                // A standby's role ends as it takes over (at the leader's kill, or here when
                // the leader lost its lease instead), before its first pass as the leader.
                if let Some(p) = h.open_phase().filter(|p| p.role == "standby") {
                    p.end = mem.map(|(rss, _)| (rss, now));
                }
                if passed && !h.leader {
                    if let Some((rss, _)) = mem {
                        h.phases.push(Phase::new("leader", (rss, now)));
                    }
                    h.leader = true;
                }
            }
        }
    }

    /// The running host that leads, by `/statusz`, within `within`.
    async fn leader(&mut self, within: Duration) -> Option<usize> {
        let deadline = Instant::now() + within;
        loop {
            for id in self.live() {
                let addr = self.rs.replicas[id].ops_addr().await;
                if let Some((200, body)) = ops_get(&addr, "/statusz").await {
                    let v: Value = serde_json::from_str(&body).unwrap_or_default();
                    if v["replica"]["role"] == "leader" {
                        return Some(id);
                    }
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            self.ingest();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL of the leader; the standbys' roles end here too (one of them takes over).
    async fn kill_leader(&mut self) {
        let Some(id) = self.leader(Duration::from_secs(20)).await else {
            return;
        };
        self.scrape(id).await;
        for other in self.live() {
            self.end_phase(other);
        }
        self.rs.kill(id).await;
        self.hosts[id].ended = "killed".into();
        self.kills += 1;
        self.ingest();
        self.spawn().await;
    }
}

/// Runs a soak; the report says what happened and which floors were met.
pub async fn run(cfg: SoakConfig) -> SoakReport {
    let mut soak = Soak::start(&cfg).await;
    let client = soak.rs.emulator.client.clone();
    let load = soak.load(&client, &cfg).await;
    let end = soak.converge(&client, &cfg).await;
    let seen = soak.problems(end.convergence.is_some());
    let faults: BTreeMap<String, u64> = load
        .faults_end
        .as_ref()
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default();
    let report = SoakReport {
        objects: cfg.objects,
        events: soak.written.load(Ordering::Relaxed),
        write_seconds: load.write_seconds,
        write_retries: load.retries,
        shards: cfg.shards,
        shard_objects: cfg.shard_objects,
        shard_writes: load.shard_writes,
        faults,
        fault_target: cfg.faults,
        relist_target: cfg.relist_faults,
        actions: load.actions,
        kills: soak.kills,
        quiet_seconds: load.quiet_seconds,
        hosts: soak.hosts.clone(),
        convergence_seconds: end.convergence,
        digest_mismatches: end.mismatches,
        tails: seen.tails,
        emulator_digest: end.want_text,
        unreconciled: end.unreconciled,
        reconciles: soak.tracker.reconciles,
        reconcile_traps: soak.tracker.reconcile_traps,
        handler_traps: soak.tracker.handler_traps,
        stray_lines: soak.tracker.strays,
        overlaps: end.overlaps,
        panics: seen.panics,
        crashes: seen.crashes,
    };
    soak.stop().await;
    report
}

/// What the load phase leaves for the report.
struct Load {
    write_seconds: f64,
    quiet_seconds: f64,
    retries: u64,
    shard_writes: u64,
    actions: BTreeMap<&'static str, Posted>,
    faults_end: Option<Value>,
}

/// What convergence found.
struct End {
    convergence: Option<f64>,
    mismatches: Vec<String>,
    want_text: String,
    unreconciled: Vec<String>,
    overlaps: Vec<String>,
}

/// What the processes said that no host should.
struct Seen {
    panics: Vec<String>,
    crashes: Vec<String>,
    tails: Vec<String>,
}

impl Soak {
    /// The emulator seeded, two hosts started, and their first sync: a leader that reconciled
    /// every object with both plugins, a ready standby.
    async fn start(cfg: &SoakConfig) -> Soak {
        let rs = Replicas::start().await;
        let client = rs.emulator.client.clone();
        rs.emulator.create_namespace(NS).await;
        seed(&client, cfg.objects, cfg.writers).await;
        for i in 0..cfg.shards {
            rs.emulator.create_namespace(&shard_ns(i)).await;
        }
        seed_shards(&client, cfg).await;
        let plugins = plugins_file(&rs.dir, cfg);
        let mut soak = Soak {
            args: host_args(&plugins, cfg.page_size),
            tracker: Tracker::new(cfg.objects),
            hosts: Vec::new(),
            written: Arc::new(AtomicU64::new(0)),
            kills: 0,
            events: cfg.events as u64,
            shards: cfg.shards,
            rs,
        };
        soak.spawn().await;
        soak.spawn().await;
        let deadline = Instant::now() + WAIT;
        loop {
            soak.survey().await;
            let leading = soak.hosts.iter().any(|h| h.leader);
            let standby = soak.hosts.iter().any(|h| h.ready && !h.leader);
            if leading && standby {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no first sync of two hosts:\n{}",
                soak.rs.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        soak
    }

    /// The writers, the fault injector's lanes and the kills, until every update is written
    /// and every kind of fault was seen (the faults then cleared).
    async fn load(&mut self, client: &Client, cfg: &SoakConfig) -> Load {
        let injector = Arc::new(Injector {
            client: client.clone(),
            stop: AtomicBool::new(false),
            cfg: cfg.clone(),
            actions: Mutex::new(BTreeMap::new()),
            rng: AtomicU64::new(crate::support::replicas::now_ns() | 1),
        });
        let lanes: Vec<_> = (0..4)
            .map(|lane| {
                let inj = injector.clone();
                tokio::spawn(async move {
                    match lane {
                        0 => inj.streams_lane().await,
                        1 => inj.requests_lane().await,
                        2 => inj.compactions_lane().await,
                        _ => inj.relists_lane().await,
                    }
                })
            })
            .collect();
        let retries = Arc::new(AtomicU64::new(0));
        let paused = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let writers = write(
            client,
            cfg,
            self.written.clone(),
            retries.clone(),
            paused.clone(),
            started,
        );
        let shards_done = Arc::new(AtomicBool::new(false));
        let shard_writer = write_shards(client, cfg, paused.clone(), shards_done.clone());
        // Before each kill a quiet point, then a hundredth of `kill_every` more updates: the kill
        // comes mid-stream, the roles it ends are read quiet; halfway between two kills another,
        // where the roles begun since the last are given their level (see `Phase`).
        let mut next_quiet = cfg.kill_every as u64;
        let mut next_level = cfg.kill_every as u64 / 2;
        let mut kill_at = None;
        let mut quiet_seconds = 0.0;
        while !writers.iter().all(|w| w.is_finished()) {
            self.survey().await;
            let written = self.written.load(Ordering::Relaxed);
            let before_end = written < cfg.events as u64;
            if cfg.kill_every > 0 && written >= next_level && before_end {
                let t = Instant::now();
                self.quiet_point(client, &paused, cfg.converge_within, Quiet::Level)
                    .await;
                quiet_seconds += t.elapsed().as_secs_f64();
                next_level += cfg.kill_every as u64;
            }
            if cfg.kill_every > 0 && kill_at.is_none() && written >= next_quiet && before_end {
                let t = Instant::now();
                self.quiet_point(client, &paused, cfg.converge_within, Quiet::End)
                    .await;
                quiet_seconds += t.elapsed().as_secs_f64();
                kill_at = Some(written + (cfg.kill_every as u64 / 100).max(1));
                next_quiet += cfg.kill_every as u64;
            }
            if kill_at.is_some_and(|k| written >= k) && before_end {
                self.kill_leader().await;
                kill_at = None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for w in writers {
            w.await.expect("a writer failed");
        }
        let write_seconds = started.elapsed().as_secs_f64() - quiet_seconds;
        // The faults go on after the last write until every kind was confirmed at least once (but
        // those of `NEED_WRITES`), for at most a minute: a short run can write faster than a
        // relist's sequence of faults takes (each relist comes after the informer's backoff).
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let seen = stats(client).await.is_some_and(|s| {
                COUNTERS
                    .iter()
                    .filter(|(c, _, _)| !NEED_WRITES.contains(c))
                    .all(|(c, _, _)| s["faults"][*c].as_u64().unwrap_or(0) > 0)
            });
            if seen {
                break;
            }
            self.survey().await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        injector.stop.store(true, Ordering::Relaxed);
        shards_done.store(true, Ordering::Relaxed);
        let shard_writes = shard_writer.await.expect("the shards' writer failed");
        for l in lanes {
            l.await.expect("an injector lane failed");
        }
        post_fault(client, &json!({"clear": true})).await;
        let faults_end = stats(client).await.map(|s| s["faults"].clone());
        let actions = injector.actions.lock().clone();
        Load {
            write_seconds,
            quiet_seconds,
            retries: retries.load(Ordering::Relaxed),
            shard_writes,
            actions,
            faults_end,
        }
    }

    /// Convergence: the emulator's state, every running host's caches, every final version;
    /// then the end of every role still open.
    async fn converge(&mut self, client: &Client, cfg: &SoakConfig) -> End {
        let converged_from = Instant::now();
        let list = client
            .list(&configmaps(), Some(NS), &Default::default())
            .await
            .expect("list the final state");
        let mut finals = vec![0u64; cfg.objects];
        for o in &list.items {
            if let Some(i) = object_index(&o.key(), cfg.objects) {
                finals[i] = o.resource_version().parse().unwrap_or(0);
            }
        }
        let want_text = digest_text(&list.items);
        let deadline = Instant::now() + cfg.converge_within;
        let (convergence, mismatches) = loop {
            self.survey().await;
            let mismatches = self.mismatches(client).await;
            let missing = self.tracker.missing(&finals);
            if mismatches.is_empty() && missing.is_empty() {
                break (Some(converged_from.elapsed().as_secs_f64()), mismatches);
            }
            if Instant::now() >= deadline {
                break (None, mismatches);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        // The end of every role still open, after convergence and one of the host's memory trims
        // (every 10 s, `host/src/trim.rs`): what is read is then what the host holds, not pages
        // it freed and the allocator kept. A leak would still show.
        tokio::time::sleep(TRIM_SETTLE).await;
        for id in self.live() {
            self.scrape(id).await;
            self.end_phase(id);
        }
        self.ingest();

        let unreconciled: Vec<String> = self
            .tracker
            .missing(&finals)
            .into_iter()
            .map(|(p, i)| {
                format!(
                    "{} {} (final {}, reconciled {})",
                    PLUGINS[p],
                    object_key(i),
                    finals[i],
                    self.tracker.best[i][p]
                )
            })
            .collect();
        let overlapping: Vec<String> = self
            .tracker
            .overlapping()
            .iter()
            .map(|(a, b)| format!("{a:?} / {b:?}"))
            .collect();
        End {
            convergence,
            mismatches,
            want_text,
            unreconciled,
            overlaps: overlapping,
        }
    }

    /// Panics in any process, hosts that exited by themselves, and, without convergence, what
    /// the running hosts said last.
    fn problems(&mut self, converged: bool) -> Seen {
        let mut panics = Vec::new();
        let mut crashes = Vec::new();
        for r in &mut self.rs.replicas {
            r.process.drain();
            for l in &r.process.seen {
                let own = !l.text.contains("plugin::stdout") && !l.text.contains("plugin::stderr");
                if own && l.text.contains("panicked") {
                    panics.push(format!("host {}: {}", r.id, l.text));
                }
            }
        }
        for l in &self.rs.emulator.process.seen {
            if l.text.contains("panicked") {
                panics.push(format!("emulator: {}", l.text));
            }
        }
        // Without convergence, what the running hosts said last (their own lines, not the guests').
        let mut tails = Vec::new();
        if !converged {
            for id in self.live() {
                let own: Vec<&str> = self.rs.replicas[id]
                    .process
                    .seen
                    .iter()
                    .filter(|l| !l.text.contains("plugin::stdout"))
                    .map(|l| l.text.as_str())
                    .collect();
                let from = own.len().saturating_sub(40);
                tails.push(format!("host {id}:\n{}", own[from..].join("\n")));
            }
        }
        for h in &self.hosts {
            if h.ended == "exited by itself" {
                let tail: Vec<String> = self.rs.replicas[h.id]
                    .process
                    .seen
                    .iter()
                    .rev()
                    .take(20)
                    .map(|l| l.text.clone())
                    .collect();
                crashes.push(format!("host {} (pid {}): {tail:#?}", h.id, h.pid));
            }
        }
        Seen {
            panics,
            crashes,
            tails,
        }
    }

    /// SIGTERM to every running host, each given 30 s to exit.
    async fn stop(mut self) {
        for id in self.live() {
            self.rs.replicas[id].process.sigterm();
        }
        for id in self.live() {
            let _ = tokio::time::timeout(
                Duration::from_secs(30),
                self.rs.replicas[id].process.exit(Duration::from_secs(30)),
            )
            .await;
        }
    }
}

fn configmaps() -> ApiResource {
    ApiResource::new("v1", "ConfigMap", "configmaps", true)
}

/// Creates the ConfigMaps, `writers` at a time.
async fn seed(client: &Client, objects: usize, writers: usize) {
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let client = client.clone();
            tokio::spawn(async move {
                for i in (w..objects).step_by(writers) {
                    let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": object_name(i), "namespace": NS},
                        "data": {"v": "0"}});
                    client
                        .create(
                            &configmaps(),
                            Some(NS),
                            body.to_string().into(),
                            &WriteParams::default(),
                        )
                        .await
                        .unwrap_or_else(|e| panic!("create {}: {e}", object_name(i)));
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("a seeding task failed");
    }
}

fn secrets() -> ApiResource {
    ApiResource::new("v1", "Secret", "secrets", true)
}

/// The namespace of shard `i`.
pub fn shard_ns(i: usize) -> String {
    format!("{SHARD_NS}-{i:03}")
}

fn shard_object_name(j: usize) -> String {
    format!("s-{j:03}")
}

/// Creates the shards' Secrets, each shard's in its namespace.
async fn seed_shards(client: &Client, cfg: &SoakConfig) {
    let (shards, per, writers) = (cfg.shards, cfg.shard_objects, cfg.writers);
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let client = client.clone();
            tokio::spawn(async move {
                for n in (w..shards * per).step_by(writers) {
                    let (ns, name) = (shard_ns(n / per), shard_object_name(n % per));
                    let body = json!({"apiVersion": "v1", "kind": "Secret",
                        "metadata": {"name": name, "namespace": ns},
                        "data": {"v": "MA=="}});
                    client
                        .create(
                            &secrets(),
                            Some(&ns),
                            body.to_string().into(),
                            &WriteParams::default(),
                        )
                        .await
                        .unwrap_or_else(|e| panic!("create {ns}/{name}: {e}"));
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("a seeding task failed");
    }
}

/// Updates one of the shards' Secrets after another (so that their informers' watches carry
/// events and their caches can be wrong), one every [`SHARD_WRITE_EVERY`], none while
/// `paused`, until `done`. How many it wrote. A failed update (a dropped connection, an
/// injected 429 or 500) is not sent again: the next one comes soon.
fn write_shards(
    client: &Client,
    cfg: &SoakConfig,
    paused: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<u64> {
    let client = client.clone();
    let (shards, per) = (cfg.shards, cfg.shard_objects);
    tokio::spawn(async move {
        let mut written = 0u64;
        let mut n = 0usize;
        while shards > 0 && !done.load(Ordering::Relaxed) {
            tokio::time::sleep(SHARD_WRITE_EVERY).await;
            if paused.load(Ordering::Relaxed) {
                continue;
            }
            // A stride coprime with most totals walks every Secret in turn.
            n = (n + 7919) % (shards * per);
            let patch = Patch::Merge(
                json!({"metadata": {"annotations": {"soak-write": written.to_string()}}})
                    .to_string()
                    .into(),
            );
            let (ns, name) = (shard_ns(n / per), shard_object_name(n % per));
            let params = WriteParams::default();
            if client
                .patch(&secrets(), Some(&ns), &name, None, &patch, &params)
                .await
                .is_ok()
            {
                written += 1;
            }
        }
        written
    })
}

/// The writers: each takes the next update number (`written` counts those done), updates
/// object `n % objects` (each writer its own objects, in turn), paced to `rate` if set. An
/// update that fails (a connection dropped by a fault) is sent again, at most 100 times. None
/// starts while `paused` is set (a quiet point; `rate` is not caught up after one).
fn write(
    client: &Client,
    cfg: &SoakConfig,
    written: Arc<AtomicU64>,
    retries: Arc<AtomicU64>,
    paused: Arc<AtomicBool>,
    started: Instant,
) -> Vec<tokio::task::JoinHandle<()>> {
    let claimed = Arc::new(AtomicU64::new(0));
    (0..cfg.writers)
        .map(|w| {
            let (client, written, retries, claimed, paused) = (
                client.clone(),
                written.clone(),
                retries.clone(),
                claimed.clone(),
                paused.clone(),
            );
            let (events, objects, writers, rate) =
                (cfg.events as u64, cfg.objects, cfg.writers, cfg.rate);
            tokio::spawn(async move {
                let mut turn = 0usize;
                loop {
                    while paused.load(Ordering::Relaxed) {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    let n = claimed.fetch_add(1, Ordering::Relaxed);
                    if n >= events {
                        return;
                    }
                    if let Some(rate) = rate {
                        let at = started + Duration::from_secs_f64(n as f64 / rate);
                        tokio::time::sleep_until(at.into()).await;
                    }
                    // Writer w's objects are w, w + writers, …
                    let per = objects.div_ceil(writers);
                    let i = (w + (turn % per) * writers) % objects;
                    turn += 1;
                    let patch =
                        Patch::Merge(json!({"data": {"v": n.to_string()}}).to_string().into());
                    let mut tries = 0;
                    loop {
                        match client
                            .patch(
                                &configmaps(),
                                Some(NS),
                                &object_name(i),
                                None,
                                &patch,
                                &WriteParams::default(),
                            )
                            .await
                        {
                            Ok(_) => break,
                            Err(e) if tries < 100 && e.status().is_none() => {
                                tries += 1;
                                retries.fetch_add(1, Ordering::Relaxed);
                                tokio::time::sleep(Duration::from_millis(10)).await;
                            }
                            Err(e) => panic!("update {}: {e}", object_name(i)),
                        }
                    }
                    written.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect()
}
