//! Lists and watches per shared informer, counted where they leave the host, with the last
//! error each informer met.
//!
//! Why a wrapper around the lister-watcher: it sees every LIST and WATCH the reflector makes,
//! so relists (after 410 Gone, errors, or watch-list fallback) and watch restarts are counted,
//! and `/readyz` can say why an informer has not synced (a 403 from RBAC, a refused
//! connection), without the informer having to know about metrics or readiness. It also sees
//! every LIST response and watch event the server got wrong (undecodable), which relists and
//! watch restarts count only together with everything else that causes them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use futures_util::StreamExt;
use kwh_client::clip::clip;
use kwh_client::decode::ObjectPool;
use kwh_client::params::{ListParams, WatchParams};
use kwh_client::watch::ObjectList;
use kwh_client::{Error, ResourceClient};
use kwh_informer::lister_watcher::{ListerWatcher, WatchStream};

/// Counters of one informer's requests.
#[derive(Debug, Default)]
pub struct LwCounters {
    /// Full lists started (first pages only; a paginated list counts once).
    pub lists: AtomicU64,
    /// Watch requests started.
    pub watches: AtomicU64,
    /// LIST responses (pages) and watch events that could not be decoded: malformed JSON, a
    /// value over the size bound, a resourceVersion that is not an integer.
    pub decode_errors: AtomicU64,
    /// The last failed LIST or WATCH request, cleared by the next successful one.
    last_error: Mutex<Option<String>>,
}

impl LwCounters {
    /// Lists after the first one.
    pub fn relists(&self) -> u64 {
        self.lists.load(Ordering::Relaxed).saturating_sub(1)
    }
    /// Watches after the first one.
    pub fn watch_restarts(&self) -> u64 {
        self.watches.load(Ordering::Relaxed).saturating_sub(1)
    }
    /// The last request error, as one line (`403 Forbidden: configmaps is forbidden: …`),
    /// unless a request succeeded since.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().clone()
    }

    /// Undecodable LIST responses and watch events so far.
    pub fn decode_errors(&self) -> u64 {
        self.decode_errors.load(Ordering::Relaxed)
    }

    fn count_decode_error<T>(&self, r: &Result<T, Error>) {
        if matches!(r, Err(Error::Decode(_))) {
            self.decode_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn record<T>(&self, r: &Result<T, Error>) {
        self.count_decode_error(r);
        let mut last = self.last_error.lock();
        match r {
            Ok(_) => *last = None,
            Err(e) => *last = Some(one_line(e)),
        }
    }
}

/// An API error as a person reads it: `403 Forbidden: <the server's message>`, the message
/// quoted briefly (it is the server's, of any length).
fn one_line(e: &Error) -> String {
    let line = match e.status() {
        Some(s) => {
            let reason = if s.reason.is_empty() {
                http::StatusCode::from_u16(s.code)
                    .ok()
                    .and_then(|c| c.canonical_reason())
                    .unwrap_or("")
            } else {
                s.reason.as_str()
            };
            format!("{} {reason}: {}", s.code, s.message)
        }
        None => e.to_string(),
    };
    clip(&line).to_string()
}

/// Counters of every informer the runtime created, by informer key (as displayed). Held
/// weakly: an informer that stopped (its last plugin gone) drops its counters with it, and its
/// series leave `/metrics` instead of being exported frozen for good.
pub type CounterMap = Arc<Mutex<BTreeMap<String, Weak<LwCounters>>>>;

/// The counters of the informers still running, by key; forgets the others.
pub fn live_counters(map: &CounterMap) -> Vec<(String, Arc<LwCounters>)> {
    let mut g = map.lock();
    g.retain(|_, c| c.strong_count() > 0);
    g.iter()
        .filter_map(|(k, c)| c.upgrade().map(|c| (k.clone(), c)))
        .collect()
}

/// A [`ResourceClient`] that counts its lists and watches.
pub struct CountingLw {
    inner: ResourceClient,
    counters: Arc<LwCounters>,
}

impl CountingLw {
    /// Wraps `inner`, registering fresh counters under `key` in `map` (replacing those of an
    /// earlier informer of the same key, which has stopped).
    pub fn new(inner: ResourceClient, key: String, map: &CounterMap) -> Self {
        let counters = Arc::new(LwCounters::default());
        map.lock().insert(key, Arc::downgrade(&counters));
        CountingLw { inner, counters }
    }

    /// This informer's counters.
    pub fn counters(&self) -> &Arc<LwCounters> {
        &self.counters
    }
}

impl ListerWatcher for CountingLw {
    async fn list(&self, params: &ListParams) -> Result<ObjectList, Error> {
        if params.continue_token.is_none() {
            self.counters.lists.fetch_add(1, Ordering::Relaxed);
        }
        let r = self.inner.list(params).await;
        self.counters.record(&r);
        r
    }

    // Forwarded, not left to the trait's default: a relist must reuse the cached objects
    // (memory), and the type check of watch events (spec 1.7) needs the scope's type.
    async fn list_reusing(
        &self,
        params: &ListParams,
        pool: Arc<dyn ObjectPool>,
    ) -> Result<ObjectList, Error> {
        if params.continue_token.is_none() {
            self.counters.lists.fetch_add(1, Ordering::Relaxed);
        }
        let r = self.inner.list_reusing(params, pool).await;
        self.counters.record(&r);
        r
    }

    fn expected_type(&self) -> Option<(&str, &str)> {
        self.inner.expected_type()
    }

    async fn watch(&self, params: &WatchParams) -> Result<WatchStream, Error> {
        // A watch-list stream (initial events) replaces a list.
        if params.send_initial_events {
            self.counters.lists.fetch_add(1, Ordering::Relaxed);
        }
        self.counters.watches.fetch_add(1, Ordering::Relaxed);
        let r = self.inner.watch(params).await;
        self.counters.record(&r);
        let counters = self.counters.clone();
        r.map(|s| -> WatchStream { Box::pin(s.inspect(move |ev| counters.count_decode_error(ev))) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kwh_client::Status;

    /// A loopback server answering a LIST with a body that does not decode, and a WATCH with
    /// one good event and then one that does not.
    async fn broken_server() -> String {
        use http_body_util::Full;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let svc = hyper::service::service_fn(
                    |req: http::Request<hyper::body::Incoming>| {
                        let watch = req.uri().query().is_some_and(|q| q.contains("watch="));
                        let body: &'static [u8] = if watch {
                            b"{\"type\":\"ADDED\",\"object\":{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"5\"}}}\n{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"zzz\"}}}\n"
                        } else {
                            b"{\"kind\":\"ConfigMapList\",\"items\":[}"
                        };
                        async move {
                            Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                                bytes::Bytes::from_static(body),
                            )))
                        }
                    },
                );
                tokio::spawn(async move {
                    let http = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    );
                    let _ = http
                        .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                        .await;
                });
            }
        });
        format!("http://{addr}")
    }

    async fn bounded<F: std::future::Future>(f: F) -> F::Output {
        tokio::time::timeout(std::time::Duration::from_secs(20), f)
            .await
            .expect("bounded in time")
    }

    /// Reported from outside: decode errors had no metric of their own, only the relists and
    /// watch restarts they cause (with everything else that causes them) counted them.
    #[tokio::test]
    async fn undecodable_lists_and_watch_events_are_counted() {
        use futures_util::StreamExt;
        use kwh_client::resource::ApiResource;
        let url = broken_server().await;
        let client =
            kwh_client::Client::new(kwh_client::Config::new(url.parse().unwrap())).unwrap();
        let res = ApiResource::new("v1", "ConfigMap", "configmaps", true);
        let map = CounterMap::default();
        let lw = CountingLw::new(ResourceClient::new(client, res, None), "cm".into(), &map);
        assert!(matches!(
            bounded(lw.list(&ListParams::default())).await,
            Err(Error::Decode(_))
        ));
        assert_eq!(lw.counters().decode_errors(), 1);
        let events: Vec<_> = bounded(
            lw.watch(&WatchParams::default())
                .await
                .unwrap()
                .collect::<Vec<_>>(),
        )
        .await;
        assert!(
            matches!(events[..], [Ok(_), Err(Error::Decode(_))]),
            "{events:?}"
        );
        // One lock at a time: the map's mutex is not reentrant.
        let c = map.lock()["cm"]
            .upgrade()
            .expect("the informer's counters, alive with it");
        assert_eq!(c.decode_errors(), 2);
        assert_eq!((c.relists(), c.watch_restarts()), (0, 0));
    }

    #[test]
    fn errors_read_as_code_reason_and_message_and_clear_on_success() {
        let c = LwCounters::default();
        let forbidden = Status::failure(
            403,
            "Forbidden",
            "configmaps is forbidden: User \"nobody\" cannot list resource \"configmaps\" in API group \"\" at the cluster scope",
        );
        c.record::<()>(&Err(Error::from(forbidden)));
        assert_eq!(
            c.last_error().as_deref(),
            Some("403 Forbidden: configmaps is forbidden: User \"nobody\" cannot list resource \"configmaps\" in API group \"\" at the cluster scope")
        );
        // The apply-create refusal has an empty reason: the code's own name stands in.
        c.record::<()>(&Err(Error::from(Status::failure(500, "", "boom"))));
        assert_eq!(
            c.last_error().as_deref(),
            Some("500 Internal Server Error: boom")
        );
        c.record(&Ok(()));
        assert_eq!(c.last_error(), None);
    }

    #[test]
    fn a_stopped_informers_counters_leave_with_it() {
        let map = CounterMap::default();
        let res = kwh_client::ApiResource::new("v1", "ConfigMap", "configmaps", true);
        let client = kwh_client::Client::new(
            kwh_client::Config::from_kubeconfig_str(
                "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n\
                 contexts: [{name: c, context: {cluster: c}}]\ncurrent-context: c\n",
                &std::env::temp_dir(),
                &Default::default(),
            )
            .expect("kubeconfig"),
        )
        .expect("client");
        let a = CountingLw::new(
            ResourceClient::new(client.clone(), res.clone(), None),
            "a".into(),
            &map,
        );
        let b = CountingLw::new(ResourceClient::new(client, res, None), "b".into(), &map);
        a.counters().lists.fetch_add(1, Ordering::Relaxed);
        let keys = |m: &CounterMap| {
            live_counters(m)
                .into_iter()
                .map(|(k, _)| k)
                .collect::<Vec<_>>()
        };
        assert_eq!(keys(&map), ["a", "b"]);
        drop(a);
        assert_eq!(keys(&map), ["b"]);
        assert_eq!(map.lock().len(), 1, "forgotten, not only skipped");
        drop(b);
        assert!(keys(&map).is_empty());
    }
}
