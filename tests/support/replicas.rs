//! Several `host` replicas against one `host emulator` process, for the tests of leader election
//! and sharding: each replica reaches the API server through its own [`FreezeProxy`] (a
//! partition of that replica alone is a `freeze()`), with its own kubeconfig copy and its own
//! ops address (`/readyz`, `/statusz`, `/metrics`).
//!
//! The replicas run the `ledger` test guest, which prints a line when a reconcile starts and one
//! when it ends (key, resourceVersion, unix time in ns); [`Replicas::records`] reads them back
//! from every replica's log as [`LedgerRecord`]s, and [`overlaps`] and [`reconciled_pairs`]
//! check them. Waits poll the logs with a deadline ([`Replicas::wait_for`]).
//!
//! ```ignore
//! let mut rs = Replicas::start().await;
//! rs.emulator.create_namespace("ns").await;
//! let rv = rs.emulator.create_cm("ns", "a").await;
//! let plugins = ledger_plugins_file(&rs.dir, json!({"holdMs": 200}), 1);
//! for _ in 0..3 {
//!     rs.spawn(["--plugins".as_ref(), plugins.as_os_str()]).await;
//! }
//! let recs = rs.expect_reconciled(&pairs([("ns/a", rv.as_str())]), WAIT).await;
//! assert!(overlaps(&recs).is_empty());
//! ```

use std::collections::{BTreeSet, HashMap};
use std::ffi::{OsStr, OsString};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kwh_client::client::{Patch, WriteParams};
use kwh_client::{ApiResource, Client};
use serde_json::{json, Value};

use super::freeze_proxy::FreezeProxy;
use super::process::{HostProcess, Stream, WAIT};

/// How often waits look at the logs again.
const POLL: Duration = Duration::from_millis(20);

/// Now, in nanoseconds since the Unix epoch (the ledger's clock: guests read the host's).
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn configmaps() -> ApiResource {
    ApiResource::new("v1", "ConfigMap", "configmaps", true)
}

/// `host emulator` as a process, with a client for it.
pub struct EmulatorProcess {
    pub process: HostProcess,
    /// Its base URL, e.g. `http://127.0.0.1:PORT` (`https://` with `--tls`).
    pub url: String,
    /// The kubeconfig it wrote (straight to it, no proxy).
    pub kubeconfig: PathBuf,
    pub client: Client,
}

impl EmulatorProcess {
    /// Starts `host emulator ARGS… --kubeconfig <fresh temp file>` (e.g. `&["--tls"]`) and waits
    /// for its address.
    pub async fn start(args: &[&str]) -> EmulatorProcess {
        let kubeconfig = super::temp_dir("emulator").join("kubeconfig");
        let mut all: Vec<OsString> = vec!["emulator".into()];
        all.extend(args.iter().map(OsString::from));
        all.extend(["--kubeconfig".into(), kubeconfig.clone().into_os_string()]);
        let mut process = HostProcess::spawn(all, "info");
        let url = process
            .line_where(WAIT, |l| {
                l.stream == Stream::Stdout && l.text.starts_with("listening on ")
            })
            .await
            .unwrap_or_else(|| panic!("the emulator did not start; saw:\n{}", process.log()));
        let url = url["listening on ".len()..].to_string();
        // The kubeconfig is written before this second line.
        process.line("kubeconfig: ").await;
        let client = super::process::client(&kubeconfig);
        EmulatorProcess {
            process,
            url,
            kubeconfig,
            client,
        }
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        let rest = self.url.split_once("://").map_or(&*self.url, |(_, r)| r);
        rest.trim_end_matches('/')
            .parse()
            .expect("a socket address")
    }

    /// Its kubeconfig with the server at `addr` instead (same scheme; its TLS skips
    /// verification, so the certificate's names do not matter).
    pub fn kubeconfig_via(&self, addr: SocketAddr) -> String {
        let kc = std::fs::read_to_string(&self.kubeconfig).expect("read kubeconfig");
        let line = format!("server: {}\n", self.url);
        assert!(kc.contains(&line), "{kc}");
        let scheme = self.url.split_once("://").map_or("http", |(s, _)| s);
        kc.replace(&line, &format!("server: {scheme}://{addr}\n"))
    }

    /// Creates Namespace `name` unless it exists (objects in a namespace need it first).
    pub async fn create_namespace(&self, name: &str) {
        let res = ApiResource::new("v1", "Namespace", "namespaces", false);
        let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        match self
            .client
            .create(&res, None, body.to_string().into(), &WriteParams::default())
            .await
        {
            Ok(_) => {}
            Err(e) if e.code() == Some(409) => {}
            Err(e) => panic!("create namespace {name}: {e}"),
        }
    }

    /// Creates ConfigMap `namespace/name` with `data` (see
    /// [`create_namespace`](Self::create_namespace)); its resourceVersion.
    pub async fn create_cm(&self, namespace: &str, name: &str, data: Value) -> String {
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace}, "data": data});
        let o = self
            .client
            .create(
                &configmaps(),
                Some(namespace),
                body.to_string().into(),
                &WriteParams::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("create {namespace}/{name}: {e}"));
        o.resource_version().to_string()
    }

    /// Merges `data` into ConfigMap `namespace/name`'s data; its new resourceVersion.
    pub async fn update_cm(&self, namespace: &str, name: &str, data: Value) -> String {
        let patch = Patch::Merge(json!({ "data": data }).to_string().into());
        let o = self
            .client
            .patch(
                &configmaps(),
                Some(namespace),
                name,
                None,
                &patch,
                &WriteParams::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("update {namespace}/{name}: {e}"));
        o.resource_version().to_string()
    }

    /// Deletes ConfigMap `namespace/name` (a reconcile then reads it as absent: rv `-`).
    pub async fn delete_cm(&self, namespace: &str, name: &str) {
        self.client
            .delete(&configmaps(), Some(namespace), name, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("delete {namespace}/{name}: {e}"));
    }
}

/// A plugins file running the `ledger` guest with `config` (`holdMs`, `namespace`) and
/// `workers` reconcile workers, written into `dir`.
pub fn ledger_plugins_file(dir: &Path, config: Value, workers: u32) -> PathBuf {
    let path = dir.join(format!("ledger-plugins-{}.yaml", now_ns()));
    let module = super::guests::guest("ledger");
    // JSON is YAML: no quoting rules to get wrong.
    let entry = json!([{"module": module, "workers": workers, "config": config}]);
    std::fs::write(&path, entry.to_string()).expect("write plugins file");
    path
}

/// One `host` process of a [`Replicas`] set.
pub struct Replica {
    /// Its position in [`Replicas::replicas`]; [`LedgerRecord::replica`] names it.
    pub id: usize,
    pub process: HostProcess,
    /// Between it and the API server.
    pub proxy: FreezeProxy,
    /// Its kubeconfig, pointing at its proxy.
    pub kubeconfig: PathBuf,
    ops: Option<String>,
    exited_ns: Option<u64>,
}

impl Replica {
    /// Its ops server's `host:port`, once it announced it (within [`WAIT`]).
    pub async fn ops_addr(&mut self) -> String {
        if let Some(a) = &self.ops {
            return a.clone();
        }
        let line = self
            .process
            .line_where(WAIT, |l| {
                l.stream == Stream::Stdout && l.text.starts_with("metrics on http://")
            })
            .await
            .unwrap_or_else(|| {
                panic!(
                    "replica {} announced no metrics address; saw:\n{}",
                    self.id,
                    self.process.log()
                )
            });
        let addr = line["metrics on http://".len()..]
            .trim_end_matches("/metrics")
            .to_string();
        self.ops = Some(addr.clone());
        addr
    }

    /// GET `path` (`/readyz`, `/statusz`, `/metrics`, `/healthz`) on its ops server.
    pub async fn get(&mut self, path: &str) -> (u16, String) {
        let addr = self.ops_addr().await;
        super::cluster::http_get(&addr, path).await
    }

    /// Whether `/readyz` answers 200 within `within`.
    pub async fn wait_ready(&mut self, within: Duration) -> bool {
        let addr = self.ops_addr().await;
        super::cluster::get_until(&addr, "/readyz", within, |code, _| code == 200)
            .await
            .is_some()
    }

    /// Partitions it from the API server (see [`FreezeProxy::freeze`]).
    pub fn freeze(&self) {
        self.proxy.freeze();
    }

    pub fn thaw(&self) {
        self.proxy.thaw();
    }

    /// When it exited, as far as this harness knows: the time a kill or SIGTERM completed, or
    /// the first time [`Replicas::records`] found it gone.
    pub fn exited_ns(&self) -> Option<u64> {
        self.exited_ns
    }
}

/// One reconcile as the ledger guest reported it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct LedgerRecord {
    pub replica: usize,
    pub key: String,
    /// The resourceVersion the reconcile read from its cache (`-`: the object was absent).
    pub rv: String,
    pub start_ns: u64,
    /// The end line's time. Without one: the replica's exit time if it exited (a reconcile
    /// cannot outlive its process), the next start of the key in the same replica if there is
    /// one (the call died: trap or deadline), else `u64::MAX` (still running, or lost).
    pub end_ns: u64,
    /// Whether the end line was seen.
    pub finished: bool,
}

/// Parses the ledger lines among `lines` (one replica's log) into records, in start order.
/// `exited_ns` closes the reconciles that never ended (see [`LedgerRecord::end_ns`]).
pub fn parse_ledger<'a>(
    replica: usize,
    lines: impl IntoIterator<Item = &'a str>,
    exited_ns: Option<u64>,
) -> Vec<LedgerRecord> {
    let mut records: Vec<LedgerRecord> = Vec::new();
    let mut open: HashMap<String, usize> = HashMap::new();
    for line in lines {
        // Guest stdout is logged under this target; anything else quoting a ledger line is not
        // one.
        if !line.contains("plugin::stdout") {
            continue;
        }
        let Some((_, rest)) = line.split_once("LEDGER ") else {
            continue;
        };
        let mut it = rest.split_whitespace();
        let (Some(what), Some(key), Some(rv), Some(ns)) =
            (it.next(), it.next(), it.next(), it.next())
        else {
            continue;
        };
        let digits: String = ns.chars().take_while(char::is_ascii_digit).collect();
        let Ok(ns) = digits.parse::<u64>() else {
            continue;
        };
        match what {
            "start" => {
                if let Some(prev) = open.insert(key.to_string(), records.len()) {
                    records[prev].end_ns = ns;
                }
                records.push(LedgerRecord {
                    replica,
                    key: key.to_string(),
                    rv: rv.to_string(),
                    start_ns: ns,
                    end_ns: exited_ns.unwrap_or(u64::MAX),
                    finished: false,
                });
            }
            "end" => {
                if let Some(i) = open.remove(key) {
                    if records[i].rv == rv {
                        records[i].end_ns = ns;
                        records[i].finished = true;
                    }
                }
            }
            _ => {}
        }
    }
    records
}

/// Every pair of records of one key by two different replicas whose intervals intersect
/// (`a.start < b.end && b.start < a.end`), each pair once, the earlier start first.
pub fn overlaps(records: &[LedgerRecord]) -> Vec<(LedgerRecord, LedgerRecord)> {
    let mut by_key: HashMap<&str, Vec<&LedgerRecord>> = HashMap::new();
    for r in records {
        by_key.entry(&r.key).or_default().push(r);
    }
    let mut found = Vec::new();
    for recs in by_key.values_mut() {
        recs.sort_by_key(|r| r.start_ns);
        for (i, a) in recs.iter().enumerate() {
            for b in &recs[i + 1..] {
                if a.replica != b.replica && a.start_ns < b.end_ns && b.start_ns < a.end_ns {
                    found.push(((*a).clone(), (*b).clone()));
                }
            }
        }
    }
    found.sort();
    found
}

/// The (key, resourceVersion) pairs of the finished reconciles.
pub fn reconciled_pairs(records: &[LedgerRecord]) -> BTreeSet<(String, String)> {
    records
        .iter()
        .filter(|r| r.finished)
        .map(|r| (r.key.clone(), r.rv.clone()))
        .collect()
}

/// `(key, rv)` pairs from string pairs.
pub fn pairs<'a>(p: impl IntoIterator<Item = (&'a str, &'a str)>) -> BTreeSet<(String, String)> {
    p.into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Only the records of replica `id`.
pub fn of_replica(records: &[LedgerRecord], id: usize) -> Vec<LedgerRecord> {
    records
        .iter()
        .filter(|r| r.replica == id)
        .cloned()
        .collect()
}

/// An emulator process and the replicas run against it.
pub struct Replicas {
    pub emulator: EmulatorProcess,
    pub replicas: Vec<Replica>,
    /// A scratch directory for this set (kubeconfigs, plugins files).
    pub dir: PathBuf,
}

impl Replicas {
    /// A plain-HTTP `host emulator` and no replicas yet.
    pub async fn start() -> Replicas {
        Replicas::on(EmulatorProcess::start(&[]).await)
    }

    /// No replicas yet, on `emulator`.
    pub fn on(emulator: EmulatorProcess) -> Replicas {
        Replicas {
            emulator,
            replicas: Vec::new(),
            dir: super::temp_dir("replicas"),
        }
    }

    /// Starts a replica: `host --kubeconfig <its copy, via its own proxy> --metrics-addr
    /// 127.0.0.1:0 ARGS…` (text logs at `info`). Returns its id; does not wait for it to start
    /// (see [`Replica::ops_addr`], [`Replica::wait_ready`]).
    pub async fn spawn<S: AsRef<OsStr>>(&mut self, args: impl IntoIterator<Item = S>) -> usize {
        let id = self.replicas.len();
        let proxy = FreezeProxy::start(self.emulator.addr()).await;
        let kubeconfig = self.dir.join(format!("replica-{id}.kubeconfig"));
        std::fs::write(&kubeconfig, self.emulator.kubeconfig_via(proxy.addr()))
            .expect("write kubeconfig");
        let mut all: Vec<OsString> = vec![
            "--kubeconfig".into(),
            kubeconfig.clone().into_os_string(),
            "--metrics-addr".into(),
            "127.0.0.1:0".into(),
            // The guests' lines are the records read back (one per reconcile): no log budget.
            "--log-lines-per-second".into(),
            "0".into(),
        ];
        all.extend(args.into_iter().map(|a| a.as_ref().to_os_string()));
        let process = HostProcess::spawn(all, "info");
        self.replicas.push(Replica {
            id,
            process,
            proxy,
            kubeconfig,
            ops: None,
            exited_ns: None,
        });
        id
    }

    /// Every replica's ledger records so far (lines that have arrived are read without waiting).
    pub fn records(&mut self) -> Vec<LedgerRecord> {
        let mut all = Vec::new();
        for r in &mut self.replicas {
            r.process.drain();
            if r.exited_ns.is_none() && r.process.has_exited() {
                r.exited_ns = Some(now_ns());
            }
            let lines = r.process.seen.iter().map(|l| l.text.as_str());
            // The `kube-root-ca.crt` the namespace controller puts in the test's namespace is
            // reconciled too; the tests count their own ConfigMaps.
            all.extend(
                parse_ledger(r.id, lines, r.exited_ns)
                    .into_iter()
                    .filter(|r| !r.key.ends_with("/kube-root-ca.crt")),
            );
        }
        all
    }

    /// Polls the records until `done` holds for them (then returns them), or `within` passes
    /// (then returns the last records as the error).
    pub async fn wait_for(
        &mut self,
        within: Duration,
        mut done: impl FnMut(&[LedgerRecord]) -> bool,
    ) -> Result<Vec<LedgerRecord>, Vec<LedgerRecord>> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let recs = self.records();
            if done(&recs) {
                return Ok(recs);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(recs);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until every pair of `want` has been reconciled to its end, by any replica (`by:
    /// None`) or by replica `by`; the records then, or the pairs still missing at the deadline.
    pub async fn wait_reconciled(
        &mut self,
        by: Option<usize>,
        want: &BTreeSet<(String, String)>,
        within: Duration,
    ) -> Result<Vec<LedgerRecord>, BTreeSet<(String, String)>> {
        let mine = |recs: &[LedgerRecord]| match by {
            Some(id) => reconciled_pairs(&of_replica(recs, id)),
            None => reconciled_pairs(recs),
        };
        self.wait_for(within, |recs| want.is_subset(&mine(recs)))
            .await
            .map_err(|recs| want.difference(&mine(&recs)).cloned().collect())
    }

    /// [`wait_reconciled`](Self::wait_reconciled) by anyone, panicking with the missing pairs
    /// and every replica's ledger lines when the time passes.
    pub async fn expect_reconciled(
        &mut self,
        want: &BTreeSet<(String, String)>,
        within: Duration,
    ) -> Vec<LedgerRecord> {
        match self.wait_reconciled(None, want, within).await {
            Ok(recs) => recs,
            Err(missing) => panic!(
                "not reconciled within {within:?}: {missing:?}\n{}",
                self.ledger_log()
            ),
        }
    }

    /// `kill -9` of replica `id`; returns once it is gone.
    pub async fn kill(&mut self, id: usize) -> ExitStatus {
        let r = &mut self.replicas[id];
        let status = r.process.kill().await;
        r.exited_ns.get_or_insert_with(now_ns);
        status
    }

    /// SIGTERM to replica `id`; waits up to `within` for it to exit.
    pub async fn sigterm(&mut self, id: usize, within: Duration) -> ExitStatus {
        let r = &mut self.replicas[id];
        r.process.sigterm();
        let status = r.process.exit(within).await;
        r.exited_ns.get_or_insert_with(now_ns);
        status
    }

    /// Every replica's ledger lines so far, each marked with its replica (for failure messages).
    pub fn ledger_log(&mut self) -> String {
        let mut out = String::new();
        for r in &mut self.replicas {
            r.process.drain();
            for l in r.process.lines_mentioning(&["LEDGER"]) {
                out.push_str(&format!("[{}] {l}\n", r.id));
            }
        }
        out
    }

    /// Every replica's whole log so far, each line marked with its replica.
    pub fn log(&mut self) -> String {
        let mut out = String::new();
        for r in &mut self.replicas {
            r.process.drain();
            for l in r.process.log().lines() {
                out.push_str(&format!("[{}] {l}\n", r.id));
            }
        }
        out
    }
}
