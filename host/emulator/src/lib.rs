#![doc = include_str!("../README.md")]
//!
//! ## In this crate
//!
//! The embedded API-server emulator: a kube-apiserver stand-in for tests and first runs.
//!
//! It speaks the real wire protocol (spec section 6) over HTTP/1.1 and h2, plain or TLS, so the
//! host's client and the real `kubectl` work against it unchanged. Start one with
//! [`Emulator::builder`]; the returned [`EmulatorHandle`] gives the address, a kubeconfig,
//! fault injection ([`Faults`]), counters ([`Stats`]) and direct store access for tests.
//!
//! Layout: [`store`] (revisioned objects and history), [`registry`] (served resources),
//! [`server`] (listener, TLS, connections), [`router`] (paths and verbs), [`discovery`],
//! [`list`], [`watch`], [`write`](mod@write), [`events`] (core `v1` and `events.k8s.io/v1`
//! Events: one storage, two views), [`faults`], [`admin`]; with authorization on,
//! [`authn`], [`request_info`], [`authz`], [`token`] and [`reviews`].
//!
//! What `kubectl` falls back on:
//! - aggregated discovery is answered with the legacy documents as plain `application/json`,
//!   which client-go accepts as the legacy format;
//! - `/openapi/v3` serves only what tells kubectl that the server validates fields itself (see
//!   [`openapi`]); `/openapi/v2` answers 404, so `kubectl explain` does not work;
//! - requests asked `as=Table` (list, get, watch) get Tables with Name and Age columns and
//!   PartialObjectMetadata rows (kind-specific and CRD printer columns are not rendered);
//!   those asked metadata only (`as=PartialObjectMetadataList` for lists,
//!   `as=PartialObjectMetadata` for gets and watches, as metadata informers ask) get each
//!   object's whole `metadata` and nothing else ([`accept`]); responses are always JSON;
//! - kubectl 1.32's typed generators send protobuf bodies: those for namespaces, configmaps,
//!   secrets, serviceaccounts, TokenRequests and the self reviews are decoded ([`protobuf`]);
//!   others (`kubectl create deployment …`) are answered 415. `create -f`, `apply` (client-
//!   and server-side), `diff`, `label`, `patch`, `delete` and `get` send JSON and work for
//!   every kind.
//!
//! Authorization is opt-in ([`EmulatorBuilder::authorize`], `host emulator --authorize`):
//! bearer tokens from a token file ([`EmulatorBuilder::token_auth_file`], `--token-auth-file`),
//! added by a test ([`EmulatorBuilder::user_token`], [`EmulatorHandle::add_user_token`]) or
//! issued through the TokenRequest API ([`token`]: `kubectl create token`,
//! [`EmulatorHandle::issue_service_account_token`]) map to users and groups ([`authn`]); each
//! request is named from its path as kube-apiserver names it ([`request_info`]) and RBAC is
//! evaluated from the stored Roles, ClusterRoles and bindings, the bootstrap ones seeded, with
//! refusals worded as the real server's ([`authz`]), including the `create` check of a
//! server-side apply that creates. `kubectl auth can-i` and `kubectl auth whoami` work
//! ([`reviews`]). The kubeconfig's own token is an admin's in `system:masters`.
//!
//! Known differences from kube-apiserver (by design or not yet done):
//! - authorization is off unless asked for: then any request with the right token (or none
//!   configured) is allowed, as with `--authorization-mode=AlwaysAllow`; with it on,
//!   aggregated ClusterRoles, impersonation (`kubectl --as`), SubjectAccessReview,
//!   LocalSubjectAccessReview and SelfSubjectRulesReview (`kubectl auth can-i --list`) are not
//!   implemented, the bootstrap policy is only `cluster-admin`, `system:discovery`,
//!   `system:basic-user` and `system:public-info-viewer`, issued tokens are opaque (not JWTs)
//!   and discovery does not list the review APIs or `serviceaccounts/token`;
//! - `fieldValidation` is accepted and ignored (no schemas are known);
//! - graceful deletion is immediate; garbage collection and namespace cleanup run synchronously
//!   at the end of the DELETE that triggers them (see [`write`](mod@write));
//! - a watch or list at an RV newer than the store answers at once (504 for lists) instead of
//!   waiting up to 3 s for it;
//! - the history window counts events per resource, not seconds; as on the real server, an
//!   etcd-style compaction ([`Faults::compact_history`]) expires old Exact LISTs and continue
//!   tokens but not watches, which the history (the watch cache) still serves; a watch 410
//!   comes from the window or from [`Faults::expire_watch_history`];
//! - list items keep their `kind` and `apiVersion` (the server drops them for built-in kinds)
//!   and stored objects serialize their keys in sorted order.
//!
//! PATCH and server-side apply are computed by [`patch`]; `managedFields` by [`fields`].

// Handlers return `Status` by value as their error: it is built once per failed request and
// becomes the response body, so boxing it would only add an allocation.
#![allow(clippy::result_large_err)]

pub mod accept;
pub mod admin;
pub mod authn;
pub mod authz;
pub mod discovery;
pub(crate) mod encode;
pub mod events;
pub mod faults;
pub mod fields;
#[doc(hidden)]
pub mod fuzzing;
pub mod kube_types;
pub mod list;
pub(crate) mod object_meta;
pub mod openapi;
pub mod patch;
mod printers;
pub mod protobuf;
pub use kwh_client::registry;
pub mod request;
pub mod request_info;
pub mod response;
pub mod reviews;
pub mod router;
pub mod scale;
pub mod server;
pub mod store;
pub mod strategy;
pub mod token;
pub mod util;
pub mod watch;
pub mod write;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::watch as tokio_watch;
use tokio::task::JoinHandle;

pub use faults::{Delivered, Faults, Stats};
pub use registry::ResourceDef;

use faults::Counters;
use kwh_client::Status;
use registry::Registry;
use store::Store;

/// Why the emulator could not start or seed.
#[derive(Debug, thiserror::Error)]
pub enum EmulatorError {
    #[error("cannot listen on 127.0.0.1:{port}: {source}")]
    Bind { port: u16, source: std::io::Error },
    #[error("TLS setup failed: {0}")]
    Tls(String),
    #[error("cannot read seed: {0}")]
    Io(#[from] std::io::Error),
    #[error("seed document {index} is not valid YAML: {message}")]
    Yaml { index: usize, message: String },
    #[error("seed object {index} rejected: {status}")]
    Rejected { index: usize, status: String },
    #[error("cannot read token file {}: {source}", .path.display())]
    TokenFileRead {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("token file {}: {source}", .path.display())]
    TokenFile {
        path: PathBuf,
        source: authn::TokenFileError,
    },
}

/// State shared by every connection and the handle.
pub struct Shared {
    pub store: Arc<Store>,
    pub registry: Registry,
    pub faults: Faults,
    pub(crate) counters: Arc<Counters>,
    pub token: Option<String>,
    /// Tokens and RBAC enforcement, when authorization is on.
    pub auth: Option<authn::Tokens>,
    pub addr: SocketAddr,
    pub tls: bool,
    pub bookmark_interval: Duration,
    pub admin: bool,
    /// Where server-set timestamps (creation, deletion, managedFields) come from: the system
    /// clock when none, a virtual clock (seconds since the Unix epoch) in the test harness.
    pub clock: Option<Arc<dyn Fn() -> u64 + Send + Sync>>,
    /// Cluster IPs and node ports given to Services.
    pub(crate) allocator: strategy::Allocator,
    /// What the `kube-root-ca.crt` ConfigMap of every namespace holds: the serving
    /// certificate's PEM, empty over plain HTTP.
    pub(crate) root_ca: String,
    /// See [`EmulatorBuilder::namespace_controller`].
    pub(crate) namespace_controller: bool,
    /// Custom resources' schemas, parsed once per revision of their CRD.
    pub(crate) crd_schemas: strategy::Schemas,
}

impl Shared {
    /// The emulator's state without a listener: the same store, registry and write logic,
    /// called in-process (the guest test harness's fake cluster). The default namespaces exist.
    pub fn in_process(
        clock: Option<Arc<dyn Fn() -> u64 + Send + Sync>>,
    ) -> Result<Arc<Shared>, Status> {
        let store = Arc::new(Store::new(10_000));
        let shared = Arc::new(Shared {
            faults: Faults::new(store.clone()),
            store,
            registry: Registry::new(),
            counters: Arc::new(Counters::default()),
            token: None,
            auth: None,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            tls: false,
            bookmark_interval: Duration::from_secs(60),
            admin: false,
            clock,
            allocator: strategy::Allocator::default(),
            root_ca: String::new(),
            namespace_controller: false,
            crd_schemas: strategy::Schemas::default(),
        });
        seed_default_namespaces(&shared)?;
        Ok(shared)
    }

    /// "Now" for server-set timestamps, as RFC 3339 in whole seconds.
    pub(crate) fn now_rfc3339(&self) -> String {
        match &self.clock {
            Some(c) => util::rfc3339(c()),
            None => util::now_rfc3339(),
        }
    }
}

/// The namespaces every cluster starts with.
fn seed_default_namespaces(shared: &Shared) -> Result<(), Status> {
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let v =
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        write::create_value(shared, v, "emulator")?;
    }
    Ok(())
}

/// Entry point: `Emulator::builder()…start().await`.
pub struct Emulator;

impl Emulator {
    /// A builder with defaults: plain HTTP, no token, a random port, 10,000 events of history
    /// per resource, bookmarks every 60 s, no admin path.
    pub fn builder() -> EmulatorBuilder {
        EmulatorBuilder {
            tls: false,
            token: None,
            port: 0,
            history_window: 10_000,
            bookmark_interval: Duration::from_secs(60),
            admin: false,
            namespace_controller: false,
            authorize: false,
            users: Vec::new(),
            token_file: None,
            clock: None,
        }
    }
}

/// Options of a new emulator.
#[derive(Debug, Clone)]
pub struct EmulatorBuilder {
    tls: bool,
    token: Option<String>,
    port: u16,
    history_window: usize,
    bookmark_interval: Duration,
    admin: bool,
    namespace_controller: bool,
    authorize: bool,
    users: Vec<(String, authn::UserInfo)>,
    token_file: Option<PathBuf>,
    clock: Option<BuilderClock>,
}

/// A builder's clock (see [`EmulatorBuilder::clock`]); shown by `Debug` as set or not.
#[derive(Clone)]
struct BuilderClock(Arc<dyn Fn() -> u64 + Send + Sync>);

impl std::fmt::Debug for BuilderClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BuilderClock")
    }
}

impl EmulatorBuilder {
    /// Server-set timestamps (creation, deletion, managedFields) from `clock` (seconds since
    /// the Unix epoch) instead of the system clock: answers whose order depends on the second
    /// a write was made in (managedFields are sorted by it) reproduced exactly in tests.
    pub fn clock(mut self, clock: Arc<dyn Fn() -> u64 + Send + Sync>) -> Self {
        self.clock = Some(BuilderClock(clock));
        self
    }

    /// Authenticate bearer tokens and authorize every request by RBAC, as a cluster with RBAC
    /// on does. The kubeconfig's token (the [`EmulatorBuilder::token`], else a random one)
    /// belongs to an `admin` user in `system:masters`; requests without a token are
    /// `system:anonymous`. The bootstrap ClusterRoles and bindings (`cluster-admin`,
    /// `system:discovery`, `system:basic-user`, `system:public-info-viewer`) are seeded.
    pub fn authorize(mut self, on: bool) -> Self {
        self.authorize = on;
        self
    }
    /// Accept `token` as `user`, as a line of a token file does. Implies
    /// [`EmulatorBuilder::authorize`]: tokens mean nothing without it.
    pub fn user_token(mut self, token: &str, user: authn::UserInfo) -> Self {
        self.users.push((token.to_owned(), user));
        self
    }
    /// Accept the tokens of a file in kube-apiserver's `--token-auth-file` format
    /// (`token,user,uid,"group1,group2"` per line), read at [`EmulatorBuilder::start`].
    /// Implies [`EmulatorBuilder::authorize`].
    pub fn token_auth_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.token_file = Some(path.into());
        self
    }
    /// Serve HTTPS with a self-signed certificate generated at start (ALPN h2 and http/1.1).
    pub fn tls(mut self, on: bool) -> Self {
        self.tls = on;
        self
    }
    /// Require `Authorization: Bearer <token>` (401 otherwise).
    pub fn token(mut self, token: Option<String>) -> Self {
        self.token = token;
        self
    }
    /// Port on 127.0.0.1; 0 picks a free one.
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }
    /// Events kept per resource; watches and Exact lists older than this get 410.
    pub fn history_window(mut self, events: usize) -> Self {
        self.history_window = events;
        self
    }
    /// Interval of periodic watch bookmarks (the real watch cache uses about a minute).
    pub fn bookmark_interval(mut self, d: Duration) -> Self {
        self.bookmark_interval = d;
        self
    }
    /// Serve the `/_emulator/` admin paths (faults and stats over HTTP).
    pub fn admin(mut self, on: bool) -> Self {
        self.admin = on;
        self
    }

    /// Do in every namespace, as it is created, what kube-controller-manager does within a
    /// second of it: create its `default` ServiceAccount and its `kube-root-ca.crt`
    /// ConfigMap. With it on, the ServiceAccount admission plugin refuses a Pod whose
    /// ServiceAccount does not exist (403), as a real cluster's does; off (the default: tests
    /// and examples written against the emulator count a namespace's ConfigMaps), a Pod's
    /// ServiceAccount is not looked up.
    pub fn namespace_controller(mut self, on: bool) -> Self {
        self.namespace_controller = on;
        self
    }

    /// Bind, seed the default namespaces and start serving.
    pub async fn start(self) -> Result<EmulatorHandle, EmulatorError> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port))
            .await
            .map_err(|source| EmulatorError::Bind {
                port: self.port,
                source,
            })?;
        let addr = listener.local_addr()?;
        self.start_with(listener, addr)
    }

    /// Seeds the default namespaces and serves the connections `listener` accepts, as the
    /// server at `addr` (what its URLs and kubeconfigs name): a simulated network's listener,
    /// where [`EmulatorBuilder::start`] binds a TCP port.
    pub fn start_with(
        self,
        listener: impl server::Listener,
        addr: SocketAddr,
    ) -> Result<EmulatorHandle, EmulatorError> {
        let (acceptor, cert_pem) = if self.tls {
            let (a, pem) = server::tls_acceptor().map_err(EmulatorError::Tls)?;
            (Some(a), Some(pem))
        } else {
            (None, None)
        };
        let store = Arc::new(Store::new(self.history_window));
        let mut users = self.users;
        if let Some(path) = &self.token_file {
            let text =
                std::fs::read_to_string(path).map_err(|source| EmulatorError::TokenFileRead {
                    path: path.clone(),
                    source,
                })?;
            let from_file =
                authn::parse_token_file(&text).map_err(|source| EmulatorError::TokenFile {
                    path: path.clone(),
                    source,
                })?;
            users.extend(from_file);
        }
        let authorize = self.authorize || !users.is_empty() || self.token_file.is_some();
        let (token, auth) = if authorize {
            let tokens = authn::Tokens::default();
            let admin = self
                .token
                .unwrap_or_else(|| format!("admin.{}", util::new_uid().replace('-', "")));
            tokens.add(&admin, authn::UserInfo::new("admin", &[authn::MASTERS]));
            for (t, u) in users {
                tokens.add(&t, u);
            }
            (Some(admin), Some(tokens))
        } else {
            (self.token, None)
        };
        let shared = Arc::new(Shared {
            faults: Faults::new(store.clone()),
            store,
            registry: Registry::new(),
            counters: Arc::new(Counters::default()),
            token,
            auth,
            addr,
            tls: self.tls,
            bookmark_interval: self.bookmark_interval,
            admin: self.admin,
            clock: self.clock.map(|c| c.0),
            allocator: strategy::Allocator::default(),
            root_ca: cert_pem.clone().unwrap_or_default(),
            namespace_controller: self.namespace_controller,
            crd_schemas: strategy::Schemas::default(),
        });
        seed_default_namespaces(&shared).map_err(|s| EmulatorError::Rejected {
            index: 0,
            status: s.message,
        })?;
        if authorize {
            authz::seed_bootstrap_policy(&shared).map_err(|s| EmulatorError::Rejected {
                index: 0,
                status: s.message,
            })?;
        }
        let (stop_tx, stop_rx) = tokio_watch::channel(false);
        let task = tokio::spawn(server::serve(listener, acceptor, shared.clone(), stop_rx));
        tracing::info!(%addr, tls = self.tls, "emulator listening");
        Ok(EmulatorHandle {
            shared,
            cert_pem,
            stop: Arc::new(stop_tx),
            task: Arc::new(Mutex::new(Some(task))),
        })
    }
}

/// A running emulator. Cheap to clone; [`EmulatorHandle::shutdown`] stops it.
#[derive(Clone)]
pub struct EmulatorHandle {
    shared: Arc<Shared>,
    cert_pem: Option<String>,
    stop: Arc<tokio_watch::Sender<bool>>,
    task: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl std::fmt::Debug for EmulatorHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmulatorHandle")
            .field("addr", &self.shared.addr)
            .finish()
    }
}

impl EmulatorHandle {
    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// `http://127.0.0.1:port` or `https://…`.
    pub fn base_url(&self) -> String {
        let scheme = if self.shared.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.shared.addr)
    }

    /// The self-signed server certificate (PEM) when TLS is on.
    pub fn certificate_pem(&self) -> Option<&str> {
        self.cert_pem.as_deref()
    }

    /// A kubeconfig for this emulator (TLS with insecure-skip-tls-verify, the token if any:
    /// with authorization on, an admin's).
    pub fn kubeconfig(&self) -> String {
        self.kubeconfig_for(self.shared.token.as_deref())
    }

    /// A client of this emulator, configured as [`Self::kubeconfig`] would configure it: what
    /// tests of code built on `kwh-client` start from.
    pub fn client(&self) -> Result<kwh_client::Client, kwh_client::Error> {
        let config = kwh_client::Config::from_kubeconfig_str(
            &self.kubeconfig(),
            &std::env::temp_dir(),
            &kwh_client::config::KubeconfigOptions::default(),
        )?;
        kwh_client::Client::new(config)
    }

    /// A kubeconfig that authenticates with `token` (a user's or a ServiceAccount's).
    pub fn kubeconfig_with_token(&self, token: &str) -> String {
        self.kubeconfig_for(Some(token))
    }

    /// Accept `token` as `user` from now on; false (and nothing done) when authorization is off.
    pub fn add_user_token(&self, token: &str, user: authn::UserInfo) -> bool {
        match &self.shared.auth {
            Some(t) => {
                t.add(token, user);
                true
            }
            None => false,
        }
    }

    /// A token for the ServiceAccount `namespace/name`, as the TokenRequest API issues one
    /// (404 if it does not exist; with authorization off the token is not checked).
    pub fn issue_service_account_token(
        &self,
        namespace: &str,
        name: &str,
        ttl: Duration,
    ) -> Result<String, kwh_client::Error> {
        Ok(token::issue(&self.shared, namespace, name, ttl)?)
    }

    fn kubeconfig_for(&self, token: Option<&str>) -> String {
        let mut s = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: emulator\n  cluster:\n    server: {}\n",
            self.base_url()
        );
        if self.shared.tls {
            s.push_str("    insecure-skip-tls-verify: true\n");
        }
        s.push_str("users:\n- name: emulator\n  user:");
        match token {
            Some(t) => s.push_str(&format!("\n    token: {t:?}\n")),
            None => s.push_str(" {}\n"),
        }
        s.push_str("contexts:\n- name: emulator\n  context:\n    cluster: emulator\n    user: emulator\n    namespace: default\ncurrent-context: emulator\n");
        s
    }

    /// Write [`EmulatorHandle::kubeconfig`] to `path`.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig())
    }

    /// Fault injection.
    pub fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    /// Counters: requests by verb, open watches by resource.
    pub fn stats(&self) -> Stats {
        self.shared.counters.snapshot()
    }

    /// Wait until exactly `n` watches are open on `resource` (`group/plural`, e.g.
    /// `/configmaps` or `apps/deployments`); false when `timeout` passes first. Lets a test
    /// write only after its client's watch is established, without sleeping.
    pub async fn wait_for_open_watches(&self, resource: &str, n: u64, timeout: Duration) -> bool {
        let counters = &self.shared.counters;
        tokio::time::timeout(timeout, async {
            loop {
                let changed = counters.watches_changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                let open = counters
                    .snapshot()
                    .open_watches
                    .get(resource)
                    .copied()
                    .unwrap_or(0);
                if open == n {
                    return;
                }
                changed.await;
            }
        })
        .await
        .is_ok()
    }

    /// Change how many events per resource the history keeps (shrinking takes effect at the
    /// next write). Benchmarks widen it so that a long update stream can be replayed.
    pub fn set_history_window(&self, events: usize) {
        self.shared.store.set_window(events);
    }

    /// The latest resourceVersion.
    pub fn current_resource_version(&self) -> u64 {
        self.shared.store.current_rv()
    }

    /// Create an object (any served kind) as a POST would; returns the stored object.
    pub fn create(&self, obj: Value) -> Result<Value, kwh_client::Error> {
        Ok(write::create_value(&self.shared, obj, "emulator").and_then(to_value)?)
    }

    /// Replace an object as a PUT would (stale `metadata.resourceVersion` → 409).
    pub fn update(&self, obj: Value) -> Result<Value, kwh_client::Error> {
        Ok(write::update_value(&self.shared, obj, "emulator").and_then(to_value)?)
    }

    /// Delete an object as a DELETE without options would.
    pub fn delete(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, kwh_client::Error> {
        let def = write::def_for(&self.shared, api_version, kind)?;
        Ok(write::delete(
            &self.shared,
            &def,
            namespace,
            name,
            &write::DeleteOptions::default(),
        )
        .and_then(to_value)?)
    }

    /// Read an object.
    pub fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let def = write::def_for(&self.shared, api_version, kind).ok()?;
        write::get(&self.shared, &def, namespace, name)
            .ok()
            .and_then(|o| o.to_value().ok())
    }

    /// Every object of a kind, in one namespace or all (`None`), ordered by namespace and name.
    pub fn list(&self, api_version: &str, kind: &str, namespace: Option<&str>) -> Vec<Value> {
        let Ok(def) = write::def_for(&self.shared, api_version, kind) else {
            return Vec::new();
        };
        let prefix = match namespace {
            Some(ns) if def.namespaced => format!("{ns}/"),
            _ => String::new(),
        };
        let (_, items) = self.shared.store.snapshot(&def.store_key, &prefix);
        items
            .into_iter()
            .filter_map(|o| events::serve(&def, o).to_value().ok())
            .collect()
    }

    /// Create every object of a multi-document YAML text (`kind: List` documents are unpacked).
    /// Returns how many objects were created.
    pub fn seed_yaml(&self, text: &str) -> Result<usize, EmulatorError> {
        seed_yaml(&self.shared, text, "emulator-seed").map(|objs| objs.len())
    }

    /// Stop accepting, close every connection and wait for the server task.
    pub async fn shutdown(self) {
        self.stop.send_replace(true);
        let task = self.task.lock().take();
        if let Some(t) = task {
            let _ = t.await;
        }
    }
}

/// Create every object of a multi-document YAML (or JSON) text as `manager`, unpacking `List`
/// documents and creating missing namespaces first. Returns the stored objects in order.
pub fn seed_yaml(
    shared: &Shared,
    text: &str,
    manager: &str,
) -> Result<Vec<kwh_client::Object>, EmulatorError> {
    let mut out = Vec::new();
    for (index, doc) in yaml_serde::Deserializer::from_str(text).enumerate() {
        let v: Value = serde::Deserialize::deserialize(doc).map_err(|e| EmulatorError::Yaml {
            index,
            message: e.to_string(),
        })?;
        if v.is_null() {
            continue;
        }
        let items = match v.get("kind").and_then(Value::as_str) {
            Some(k) if k == "List" || k.ends_with("List") && v.get("items").is_some() => v
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            _ => vec![v],
        };
        for item in items {
            let o = seed_value(shared, item, manager).map_err(|s| EmulatorError::Rejected {
                index,
                status: s.message,
            })?;
            out.push(o);
        }
    }
    Ok(out)
}

/// Create one seed object, creating its namespace first when it is missing (so a seed file
/// need not list namespaces).
pub fn seed_value(
    shared: &Shared,
    item: Value,
    manager: &str,
) -> Result<kwh_client::Object, Status> {
    match write::create_value(shared, item.clone(), manager) {
        Err(s) if s.code == 404 && s.details.as_ref().is_some_and(|d| d.kind == "namespaces") => {
            let ns = s
                .details
                .as_ref()
                .map(|d| d.name.clone())
                .unwrap_or_default();
            let v = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            write::create_value(shared, v, manager)?;
            write::create_value(shared, item, manager)
        }
        r => r,
    }
}

fn to_value(o: kwh_client::Object) -> Result<Value, Status> {
    o.to_value()
        .map_err(|e| response::internal(&format!("stored object is not JSON: {e}")))
}
