//! In-memory backends: a lister over a fixed set of objects, a client that records writes, and a
//! queue that records adds.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kwh_client::object::Object;
use kwh_plugin::backend::BoxFuture;
use kwh_plugin::events::NewEvent;
use kwh_plugin::{
    ApiError, Backends, ClientBackend, EventBackend, ListerBackend, QueueBackend, WriteRequest,
};
use parking_lot::Mutex;

#[derive(Default)]
pub struct FakeLister {
    pub objects: Mutex<Vec<(String, String, Object)>>,
}

impl FakeLister {
    pub fn insert(&self, api_version: &str, kind: &str, json: &str) {
        let obj = Object::from_bytes(Bytes::copy_from_slice(json.as_bytes())).expect("object");
        self.objects
            .lock()
            .push((api_version.to_string(), kind.to_string(), obj));
    }
}

impl ListerBackend for FakeLister {
    fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Object>, ApiError> {
        Ok(self
            .objects
            .lock()
            .iter()
            .find(|(a, k, o)| {
                a == api_version && k == kind && o.namespace() == namespace && o.name() == name
            })
            .map(|(_, _, o)| o.clone()))
    }
    /// Not wired to any manifest (no watch number names a kind here): the object of that key,
    /// of whatever kind, as a plugin watching one kind reads it. Tests of `get-by-key` proper
    /// run in the harness, over real stores.
    fn get_by_key(&self, _: u32, key: &str) -> Result<Option<Object>, ApiError> {
        Ok(self
            .objects
            .lock()
            .iter()
            .find(|(_, _, o)| o.key() == key)
            .map(|(_, _, o)| o.clone()))
    }
    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        _label_selector: Option<&str>,
    ) -> Result<Vec<Object>, ApiError> {
        Ok(self
            .objects
            .lock()
            .iter()
            .filter(|(a, k, o)| {
                a == api_version && k == kind && (namespace.is_none() || o.namespace() == namespace)
            })
            .map(|(_, _, o)| o.clone())
            .collect())
    }
    fn by_index(&self, _: &str, _: &str, index: &str, _: &str) -> Result<Vec<Object>, ApiError> {
        Err(ApiError::bad_request(format!("no index {index:?}")))
    }
}

#[derive(Default)]
pub struct FakeClient {
    pub writes: Mutex<Vec<WriteRequest>>,
    /// When set, writes never complete (a stalled API server).
    pub hang: std::sync::atomic::AtomicBool,
}

impl ClientBackend for FakeClient {
    fn write(&self, req: WriteRequest) -> BoxFuture<'static, Result<Option<Bytes>, ApiError>> {
        let body = Bytes::from(req.body.clone());
        self.writes.lock().push(req);
        if self.hang.load(std::sync::atomic::Ordering::Relaxed) {
            return Box::pin(std::future::pending());
        }
        Box::pin(async move { Ok(Some(body)) })
    }
}

#[derive(Default)]
pub struct FakeQueue {
    pub added: Mutex<Vec<(String, Duration)>>,
}

impl QueueBackend for FakeQueue {
    fn add(&self, key: &str) {
        self.added.lock().push((key.to_owned(), Duration::ZERO));
    }
    fn add_after(&self, key: &str, delay: Duration) {
        self.added.lock().push((key.to_owned(), delay));
    }
}

/// Records every `events.record` call with its reporting controller.
#[derive(Default)]
pub struct FakeEvents {
    pub recorded: Mutex<Vec<(String, NewEvent)>>,
}

impl EventBackend for FakeEvents {
    fn record(&self, reporting_controller: &str, event: NewEvent) {
        self.recorded
            .lock()
            .push((reporting_controller.to_string(), event));
    }
}

pub struct Fakes {
    pub lister: Arc<FakeLister>,
    pub client: Arc<FakeClient>,
    pub queue: Arc<FakeQueue>,
    pub events: Arc<FakeEvents>,
}

impl Fakes {
    pub fn new() -> Self {
        Fakes {
            lister: Arc::default(),
            client: Arc::default(),
            queue: Arc::default(),
            events: Arc::default(),
        }
    }
    pub fn backends(&self) -> Backends {
        Backends {
            lister: self.lister.clone(),
            client: self.client.clone(),
            queue: self.queue.clone(),
            events: self.events.clone(),
        }
    }
}
