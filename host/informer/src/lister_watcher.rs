//! The reflector's view of the API: list and watch one resource scope.
//!
//! Why a trait: the reflector's state machine (spec §1) is tested against scripted fakes, and
//! runs in production against `kube::client` over HTTP, with the same code.

use std::future::Future;
use std::sync::Arc;

use kwh_client::client::ResourceClient;
use kwh_client::decode::ObjectPool;
use kwh_client::params::{ListParams, WatchParams};
use kwh_client::watch::ObjectList;
pub use kwh_client::watch::WatchStream;
use kwh_client::Error;

/// List and watch one (resource, namespace, selectors) scope. Selectors are part of the
/// implementor's scope; the reflector fills the RV, paging and watch options.
pub trait ListerWatcher: Send + Sync + 'static {
    fn list(&self, params: &ListParams) -> impl Future<Output = Result<ObjectList, Error>> + Send;
    /// A LIST that may return `pool`'s object for an item of the same version instead of a
    /// new copy (a relist: see [`ObjectPool`]). The default ignores the pool.
    fn list_reusing(
        &self,
        params: &ListParams,
        pool: Arc<dyn ObjectPool>,
    ) -> impl Future<Output = Result<ObjectList, Error>> + Send {
        drop(pool);
        self.list(params)
    }
    fn watch(
        &self,
        params: &WatchParams,
    ) -> impl Future<Output = Result<WatchStream, Error>> + Send;
    /// The `(apiVersion, kind)` of the objects in this scope, when known. A watch event whose
    /// object names another type (a Table, another version) is skipped rather than cached
    /// under the scope, as client-go's expected-GVK check does (spec 1.7).
    fn expected_type(&self) -> Option<(&str, &str)> {
        None
    }
}

/// Production: the scope's selectors ANDed with the reflector's options, over HTTP.
impl ListerWatcher for ResourceClient {
    fn expected_type(&self) -> Option<(&str, &str)> {
        Some((&self.resource.api_version, &self.resource.kind))
    }

    async fn list(&self, params: &ListParams) -> Result<ObjectList, Error> {
        ResourceClient::list(self, params).await
    }

    async fn list_reusing(
        &self,
        params: &ListParams,
        pool: Arc<dyn ObjectPool>,
    ) -> Result<ObjectList, Error> {
        ResourceClient::list_reusing(self, params, pool).await
    }

    async fn watch(&self, params: &WatchParams) -> Result<WatchStream, Error> {
        ResourceClient::watch(self, params).await
    }
}
