//! The reflector's view of the API: list and watch one resource scope.
//!
//! Why a trait: the reflector's state machine (spec §1) is tested against scripted fakes, and
//! runs in production against `kube::client` over HTTP, with the same code.

use std::future::Future;
use std::pin::Pin;

use futures_util::Stream;

use crate::kube::params::{ListParams, WatchParams};
use crate::kube::watch::{ObjectList, WatchEvent};
use crate::kube::Error;

/// A stream of decoded watch events; it ends when the server closes the watch.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchEvent, Error>> + Send>>;

/// List and watch one (resource, namespace, selectors) scope. Selectors are part of the
/// implementor's scope; the reflector fills the RV, paging and watch options.
pub trait ListerWatcher: Send + Sync + 'static {
    fn list(&self, params: &ListParams) -> impl Future<Output = Result<ObjectList, Error>> + Send;
    fn watch(
        &self,
        params: &WatchParams,
    ) -> impl Future<Output = Result<WatchStream, Error>> + Send;
}
