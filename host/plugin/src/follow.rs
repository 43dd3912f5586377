//! How a shadow revision follows the live one: it reconciles a key after the live revision's
//! reconcile of that key has finished and the writes it made have reached the caches, so both
//! act on the same state (issue "Shadow runs", 2).
//!
//! The live revision's workers hand each key on to the shadow's queue as they finish with it
//! ([`Follow::hand_on`]), and its client backend notes each write made while reconciling a key:
//! the object and the resourceVersion the server answered with ([`Follow::wrote`]). A shadow
//! worker asks [`Follow::turn`] before each key:
//! - the live revision has the key queued or in hand: not now, and not later either (the
//!   key is dropped): the live revision hands it on again when it is done with it, and a
//!   shadow reconciles once per settled state, not once per live attempt;
//! - a noted write is not in the caches yet: again in [`POLL`];
//! - otherwise now.
//!
//! Why resourceVersions are compared as numbers here, where client-go treats them as opaque
//! (spec 1.7): this client already refuses any that is not an etcd revision, a decimal
//! `uint64` (`kwh_client::resource_version`), and etcd revisions are one increasing sequence,
//! so "the cache holds this object at this revision or a later one" is what the comparison
//! means. A write that no cache of the shadow can show (a kind it does not watch, a namespace
//! outside its watches) is not waited for; one the caches never show (deleted meanwhile,
//! filtered away by a selector) is waited for [`PATIENCE`] at most.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;

use super::backend::informer::InformerLister;
use super::backend::ListerBackend;
use kwh_client::object::Object;
use kwh_informer::workqueue::RateLimitingQueue;

/// A plugin's workqueue (as [`crate::reconcile::PluginQueue`]).
type PluginQueue = RateLimitingQueue<Arc<str>>;

/// The link to a plugin's shadow revision, when one runs: each reconcile of the live revision
/// hands its key on to it, and each write made while reconciling is noted there. Shared by
/// every revision's workers and client backends, set and cleared as the shadow starts and
/// stops.
pub type Mirror = Arc<Mutex<Option<Arc<Follow>>>>;

/// How long a shadow's key waits before its caches are asked again about a noted write.
pub const POLL: Duration = Duration::from_millis(10);

/// The longest a noted write is waited for.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// Objects whose last live write is kept, to show beside a shadow's difference on them; the
/// oldest goes first.
const LAST_WRITES: usize = 1024;

/// The longest request body kept of a live write (bytes; longer ones are clipped).
const BODY_KEPT: usize = 4096;

/// The live revision's last write of one object, shown beside a shadow's difference on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveWrite {
    /// As a difference names it (`patch`, `create`…).
    pub op: &'static str,
    /// The request's body (clipped to 4 KiB): the object, or the patch, it sent.
    pub body: String,
    /// The resourceVersion it was stored at (none: answered with a `Status`).
    pub resource_version: Option<String>,
    pub at: SystemTime,
}

/// An object, as a write names it: apiVersion, kind, namespace, name.
type ObjectId = (String, String, Option<String>, String);

/// Writes noted per key: a live revision re-reconciling one key while the shadow waits keeps
/// only this many (each object's last).
const WRITES_PER_KEY: usize = 64;

/// One write of the live revision, as the server answered it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Written {
    api_version: String,
    kind: String,
    namespace: Option<String>,
    name: String,
    /// The revision the server stored it at (none: it answered with a `Status`, the object is
    /// gone).
    revision: Option<u64>,
    /// A delete: the object is expected gone (or, while finalizers hold it, at `revision`).
    delete: bool,
    at: Instant,
}

/// What a shadow worker does with a key now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// Reconcile it.
    Now,
    /// Drop it: the live revision has it and hands it on again.
    Drop,
    /// Queue it again after this long: the caches have not shown a live write yet.
    Later(Duration),
}

/// The link from a live revision to its shadow: the shadow's queue and the live writes it
/// waits for.
pub struct Follow {
    shadow: PluginQueue,
    writes: Mutex<HashMap<Arc<str>, Vec<Written>>>,
    last: Mutex<HashMap<ObjectId, LiveWrite>>,
}

impl Follow {
    /// A link handing keys on to `shadow`.
    pub fn new(shadow: PluginQueue) -> Arc<Self> {
        Arc::new(Follow {
            shadow,
            writes: Mutex::new(HashMap::new()),
            last: Mutex::new(HashMap::new()),
        })
    }

    /// The shadow's queue.
    pub fn queue(&self) -> &PluginQueue {
        &self.shadow
    }

    /// The live revision is done with `key`: the shadow's turn. Through the shadow queue's
    /// timer task ([`add_soon`](kwh_informer::workqueue::DelayingQueue::add_soon)): the live
    /// worker never takes a lock the shadow's low-priority thread may hold.
    pub fn hand_on(&self, key: &Arc<str>) {
        self.shadow.add_soon(key.clone());
    }

    /// Notes a write the live revision made while reconciling `key`: `target` as the request
    /// named it (a create names its object in the answer only), and the server's answer (none:
    /// a `Status`).
    pub fn wrote(&self, key: &Arc<str>, target: WriteTarget, answer: Option<&[u8]>) {
        let stored = answer.and_then(|b| Object::from_bytes(bytes::Bytes::copy_from_slice(b)).ok());
        let (namespace, name, revision) = match &stored {
            Some(o) => (
                o.namespace().map(str::to_owned),
                o.name().to_owned(),
                o.resource_version().parse().ok(),
            ),
            None => match target.name {
                Some(n) => (target.namespace, n, None),
                None => return,
            },
        };
        self.keep_last(
            (
                target.api_version.clone(),
                target.kind.clone(),
                namespace.clone(),
                name.clone(),
            ),
            LiveWrite {
                op: target.op,
                body: target.body,
                resource_version: revision.map(|r: u64| r.to_string()),
                at: SystemTime::now(),
            },
        );
        if revision.is_none() && !target.delete {
            // An answer without a revision to wait for.
            return;
        }
        let w = Written {
            api_version: target.api_version,
            kind: target.kind,
            namespace,
            name,
            revision,
            delete: target.delete,
            at: Instant::now(),
        };
        let mut writes = self.writes.lock();
        let list = writes.entry(key.clone()).or_default();
        list.retain(|o| {
            !(o.api_version == w.api_version
                && o.kind == w.kind
                && o.namespace == w.namespace
                && o.name == w.name)
        });
        if list.len() >= WRITES_PER_KEY {
            list.remove(0);
        }
        list.push(w);
    }

    /// Whether the shadow may reconcile `key` now (see the module's documentation): `live` is
    /// the live revision's queue, `caches` the shadow's.
    pub fn turn(&self, key: &str, live: &PluginQueue, caches: &InformerLister) -> Turn {
        if live.is_pending(key) {
            return Turn::Drop;
        }
        let mut writes = self.writes.lock();
        let Some(list) = writes.get_mut(key) else {
            return Turn::Now;
        };
        let now = Instant::now();
        list.retain(|w| !shown(w, caches) && now.saturating_duration_since(w.at) < PATIENCE);
        if list.is_empty() {
            writes.remove(key);
            Turn::Now
        } else {
            Turn::Later(POLL)
        }
    }

    /// The live revision's last write of an object, if one is kept.
    pub fn last_write(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<LiveWrite> {
        let id = (
            api_version.to_owned(),
            kind.to_owned(),
            namespace.map(str::to_owned),
            name.to_owned(),
        );
        self.last.lock().get(&id).cloned()
    }

    fn keep_last(&self, id: ObjectId, w: LiveWrite) {
        let mut last = self.last.lock();
        if last.len() >= LAST_WRITES && !last.contains_key(&id) {
            let oldest = last
                .iter()
                .min_by_key(|(_, w)| w.at)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                last.remove(&k);
            }
        }
        last.insert(id, w);
    }

    /// Keys with writes still waited for (tests, status).
    pub fn waiting(&self) -> usize {
        self.writes.lock().len()
    }
}

/// The request's side of a noted write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteTarget {
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
    /// None for a create.
    pub name: Option<String>,
    pub delete: bool,
    /// As a difference names it (`patch`, `create`…).
    pub op: &'static str,
    /// The request's body, clipped ([`WriteTarget::body_of`]).
    pub body: String,
}

impl WriteTarget {
    /// A request body as kept: text, at most 4 KiB (cut at a character boundary).
    pub fn body_of(body: &[u8]) -> String {
        let s = String::from_utf8_lossy(&body[..body.len().min(BODY_KEPT)]);
        s.trim_end_matches('\u{FFFD}').to_owned()
    }
}

/// Whether the caches show `w`: the object at its revision or a later one, or gone after a
/// delete. A write no cache covers counts as shown: there is nothing to wait for.
fn shown(w: &Written, caches: &InformerLister) -> bool {
    if !caches.covers(&w.api_version, &w.kind, w.namespace.as_deref()) {
        return true;
    }
    let cached = caches
        .get(&w.api_version, &w.kind, w.namespace.as_deref(), &w.name)
        .ok()
        .flatten();
    match (cached, w.revision) {
        (None, _) => w.delete,
        (Some(_), None) => false,
        (Some(o), Some(rev)) => o.resource_version().parse::<u64>().is_ok_and(|c| c >= rev),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kwh_informer::store::Store;
    use kwh_informer::workqueue::default_controller_rate_limiter;

    fn cm(name: &str, rv: u64) -> Object {
        Object::from_bytes(bytes::Bytes::from(format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"namespace":"ns","name":"{name}","resourceVersion":"{rv}"}}}}"#
        )))
        .expect("object")
    }

    fn queue() -> PluginQueue {
        RateLimitingQueue::new(default_controller_rate_limiter::<Arc<str>>())
    }

    fn target(name: Option<&str>, delete: bool) -> WriteTarget {
        WriteTarget {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("ns".into()),
            name: name.map(str::to_owned),
            delete,
            op: if delete { "delete" } else { "patch" },
            body: "{}".into(),
        }
    }

    fn caches() -> (InformerLister, Arc<Store>) {
        let store = Arc::new(Store::new());
        let lister = InformerLister::new();
        lister.add_store("v1", "ConfigMap", None, store.clone());
        (lister, store)
    }

    #[test]
    fn a_key_waits_until_the_cache_shows_the_live_write_at_its_revision() {
        let (lister, store) = caches();
        store.add(cm("a", 5));
        let live = queue();
        let f = Follow::new(queue());
        let key: Arc<str> = Arc::from("ns/a");
        f.wrote(&key, target(Some("a"), false), Some(cm("a", 7).raw()));
        assert_eq!(f.turn("ns/a", &live, &lister), Turn::Later(POLL));
        store.update(cm("a", 6));
        assert_eq!(f.turn("ns/a", &live, &lister), Turn::Later(POLL), "older");
        store.update(cm("a", 9));
        assert_eq!(
            f.turn("ns/a", &live, &lister),
            Turn::Now,
            "a later one will do"
        );
        assert_eq!(f.waiting(), 0);
        assert_eq!(f.turn("ns/a", &live, &lister), Turn::Now);
    }

    #[test]
    fn a_create_is_named_by_the_answer_and_a_delete_waits_for_absence() {
        let (lister, store) = caches();
        let live = queue();
        let f = Follow::new(queue());
        let key: Arc<str> = Arc::from("ns/a");
        f.wrote(&key, target(None, false), Some(cm("made", 3).raw()));
        assert_eq!(f.turn("ns/a", &live, &lister), Turn::Later(POLL));
        store.add(cm("made", 3));
        assert_eq!(f.turn("ns/a", &live, &lister), Turn::Now);
        // A delete answered with a Status: gone once the cache no longer has it.
        f.wrote(&key, target(Some("made"), true), None);
        assert_eq!(f.turn("ns/a", &live, &lister), Turn::Later(POLL));
        store.delete_key("ns/made");
        assert_eq!(f.turn("ns/a", &live, &lister), Turn::Now);
    }

    #[tokio::test]
    async fn a_key_the_live_revision_holds_is_dropped_and_uncovered_writes_are_not_waited_for() {
        let (lister, _store) = caches();
        let live = queue();
        let f = Follow::new(queue());
        let key: Arc<str> = Arc::from("ns/a");
        live.add(key.clone());
        assert_eq!(f.turn("ns/a", &live, &lister), Turn::Drop);
        let got = live.get().await.expect("queued");
        assert_eq!(f.turn("ns/a", &live, &lister), Turn::Drop, "in hand");
        live.done(&got);
        let secret = WriteTarget {
            kind: "Secret".into(),
            ..target(Some("s"), false)
        };
        f.wrote(&key, secret, Some(cm("s", 4).raw()));
        assert_eq!(
            f.turn("ns/a", &live, &lister),
            Turn::Now,
            "no cache of Secrets"
        );
    }

    #[test]
    fn the_live_revisions_last_write_of_each_object_is_kept() {
        let f = Follow::new(queue());
        let key: Arc<str> = Arc::from("ns/a");
        let t = |body: &str| WriteTarget {
            body: WriteTarget::body_of(body.as_bytes()),
            ..target(Some("a"), false)
        };
        f.wrote(&key, t(r#"{"v":1}"#), Some(cm("a", 3).raw()));
        f.wrote(&key, t(r#"{"v":2}"#), Some(cm("a", 4).raw()));
        let w = f
            .last_write("v1", "ConfigMap", Some("ns"), "a")
            .expect("kept");
        assert_eq!((w.op, w.body.as_str()), ("patch", r#"{"v":2}"#));
        assert_eq!(w.resource_version.as_deref(), Some("4"));
        assert!(f.last_write("v1", "ConfigMap", Some("ns"), "b").is_none());
        assert_eq!(WriteTarget::body_of(&vec![b'x'; 10_000]).len(), BODY_KEPT);
    }

    #[test]
    fn each_object_keeps_its_last_noted_write() {
        let (lister, store) = caches();
        let live = queue();
        let f = Follow::new(queue());
        let key: Arc<str> = Arc::from("ns/a");
        for rv in [3, 8, 5] {
            f.wrote(&key, target(Some("a"), false), Some(cm("a", rv).raw()));
        }
        store.add(cm("a", 5));
        assert_eq!(
            f.turn("ns/a", &live, &lister),
            Turn::Now,
            "the last write noted, at 5"
        );
    }
}
