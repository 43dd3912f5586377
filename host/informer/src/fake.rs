//! A scripted in-memory ListerWatcher for tests: replays responses in order and records every
//! request, so tests can assert the exact parameters the reflector sent.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream;
use parking_lot::Mutex;
use tokio::sync::Notify;

use super::lister_watcher::{ListerWatcher, WatchStream};
use kwh_client::error::{Status, StatusCause, StatusDetails};
use kwh_client::params::{ListParams, WatchParams};
use kwh_client::watch::{ObjectList, WatchEvent};
use kwh_client::{Error, Object};

/// One item of a scripted watch stream.
#[allow(clippy::large_enum_variant)] // test-only; mirrors WatchEvent's shape
pub enum Item {
    Ev(WatchEvent),
    Err(Error),
    /// Wait this long (on tokio's clock) before the next item.
    Sleep(Duration),
}

/// One scripted response.
pub enum Step {
    List(Result<ObjectList, Error>),
    /// The stream ends after its items, unless `hang` keeps it open forever.
    Watch(Result<(Vec<Item>, bool), Error>),
}

/// A recorded request.
#[derive(Debug, Clone, PartialEq)]
pub enum Req {
    List(ListParams),
    Watch(WatchParams),
}

/// Request time (tokio clock, since the fake was made) and parameters.
pub type Recorded = (Duration, Req);

pub struct FakeLw {
    script: Mutex<VecDeque<Step>>,
    reqs: Mutex<Vec<Recorded>>,
    notify: Notify,
    t0: tokio::time::Instant,
    expected: std::sync::OnceLock<(String, String)>,
}

impl FakeLw {
    pub fn new(steps: Vec<Step>) -> Arc<Self> {
        Arc::new(FakeLw {
            script: Mutex::new(steps.into()),
            reqs: Mutex::new(Vec::new()),
            notify: Notify::new(),
            expected: std::sync::OnceLock::new(),
            t0: tokio::time::Instant::now(),
        })
    }

    /// Declare the scope's object type, as a real resource client does (spec 1.7).
    pub fn expect_type(&self, api_version: &str, kind: &str) {
        let _ = self.expected.set((api_version.into(), kind.into()));
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.reqs.lock().clone()
    }

    /// Wait (bounded) until at least `n` requests were made.
    pub async fn wait_requests(&self, n: usize) -> Vec<Recorded> {
        tokio::time::timeout(Duration::from_secs(24 * 3600), async {
            loop {
                let notified = self.notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if self.reqs.lock().len() >= n {
                    return self.requests();
                }
                notified.await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("fewer than {n} requests: {:?}", self.requests()))
    }

    fn record(&self, r: Req) -> Option<Step> {
        self.reqs.lock().push((self.t0.elapsed(), r));
        self.notify.notify_waiters();
        self.script.lock().pop_front()
    }
}

impl ListerWatcher for FakeLw {
    fn expected_type(&self) -> Option<(&str, &str)> {
        self.expected.get().map(|(a, k)| (a.as_str(), k.as_str()))
    }

    async fn list(&self, params: &ListParams) -> Result<ObjectList, Error> {
        match self.record(Req::List(params.clone())) {
            Some(Step::List(r)) => r,
            Some(Step::Watch(_)) => panic!("script expected a watch, got list {params:?}"),
            None => std::future::pending().await,
        }
    }

    async fn watch(&self, params: &WatchParams) -> Result<WatchStream, Error> {
        match self.record(Req::Watch(params.clone())) {
            Some(Step::Watch(r)) => {
                let (items, hang) = r?;
                Ok(script_stream(items, hang))
            }
            Some(Step::List(_)) => panic!("script expected a list, got watch {params:?}"),
            None => Ok(script_stream(Vec::new(), true)),
        }
    }
}

fn script_stream(items: Vec<Item>, hang: bool) -> WatchStream {
    let s = stream::unfold(VecDeque::from(items), |mut q| async move {
        loop {
            match q.pop_front()? {
                Item::Sleep(d) => tokio::time::sleep(d).await,
                Item::Ev(e) => return Some((Ok(e), q)),
                Item::Err(e) => return Some((Err(e), q)),
            }
        }
    });
    if hang {
        Box::pin(futures_util::StreamExt::chain(s, stream::pending()))
    } else {
        Box::pin(s)
    }
}

pub fn list(rv: &str, cont: Option<&str>, items: Vec<Object>) -> Step {
    Step::List(Ok(ObjectList {
        resource_version: rv.into(),
        continue_token: cont.map(Into::into),
        remaining_item_count: None,
        items,
    }))
}

pub fn watch(items: Vec<Item>) -> Step {
    Step::Watch(Ok((items, false)))
}

pub fn watch_hang(items: Vec<Item>) -> Step {
    Step::Watch(Ok((items, true)))
}

pub fn api_err(code: u16, reason: &str) -> Error {
    Status::failure(code, reason, format!("{reason} (scripted)")).into()
}

pub fn expired() -> Error {
    api_err(410, "Expired")
}

pub fn too_large_rv() -> Error {
    let mut s = Status::failure(
        504,
        "Timeout",
        "Too large resource version: 99, current: 10",
    );
    s.details = Some(StatusDetails {
        causes: vec![StatusCause {
            reason: "ResourceVersionTooLarge".into(),
            message: "Too large resource version".into(),
            field: String::new(),
        }],
        retry_after_seconds: Some(1),
        ..Default::default()
    });
    s.into()
}

pub fn refused() -> Error {
    Error::Connect {
        url: "https://127.0.0.1:1".into(),
        message: "connection refused".into(),
        refused: true,
    }
}

pub fn bookmark(rv: &str, end: bool) -> Item {
    Item::Ev(WatchEvent::Bookmark {
        resource_version: rv.into(),
        initial_events_end: end,
    })
}

/// Lets tests keep a handle on the fake while an informer owns it.
impl ListerWatcher for Arc<FakeLw> {
    async fn list(&self, params: &ListParams) -> Result<ObjectList, Error> {
        FakeLw::list(self, params).await
    }
    async fn watch(&self, params: &WatchParams) -> Result<WatchStream, Error> {
        FakeLw::watch(self, params).await
    }
}
