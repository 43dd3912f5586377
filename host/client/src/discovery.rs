//! Discovery: which resource serves a kind, whether it is namespaced, which verbs it allows.
//!
//! Why cached with targeted refresh: plugins name kinds (`apps/v1 Deployment`); resolving them
//! must not cost a round trip each time, yet a CRD installed after start must resolve without
//! a restart. A miss fetches that one group-version document again, at most once per
//! `min_refresh_interval`, so a typo in a manifest cannot hammer the server.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use http::Method;
use parking_lot::RwLock;
use serde::Deserialize;
use tokio::time::Instant;

use super::client::Client;
use super::error::{Error, Status};
use super::resource::{split_api_version, ApiResource};

#[derive(Deserialize)]
struct ApiVersions {
    #[serde(default)]
    versions: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GroupList {
    #[serde(default)]
    groups: Vec<Group>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Group {
    #[serde(default)]
    versions: Vec<GroupVersion>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GroupVersion {
    group_version: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResourceList {
    group_version: String,
    #[serde(default)]
    resources: Vec<ResourceEntry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResourceEntry {
    name: String,
    #[serde(default)]
    namespaced: bool,
    kind: String,
    #[serde(default)]
    verbs: Vec<String>,
}

fn decode<'a, T: Deserialize<'a>>(body: &'a [u8], what: &str) -> Result<T, Error> {
    serde_json::from_slice(body).map_err(|e| Error::Decode(format!("{what}: {e}")))
}

/// `/api` (APIVersions) → the core versions, as apiVersions (`v1`).
pub fn parse_api_versions(body: &[u8]) -> Result<Vec<String>, Error> {
    Ok(decode::<ApiVersions>(body, "APIVersions")?.versions)
}

/// `/apis` (APIGroupList) → every served `group/version`.
pub fn parse_group_list(body: &[u8]) -> Result<Vec<String>, Error> {
    let l: GroupList = decode(body, "APIGroupList")?;
    Ok(l.groups
        .into_iter()
        .flat_map(|g| g.versions.into_iter().map(|v| v.group_version))
        .collect())
}

/// `/api/{v}` or `/apis/{g}/{v}` (APIResourceList) → resources, with their subresources
/// (`deployments/status`) folded into `subresources`.
pub fn parse_resource_list(body: &[u8]) -> Result<Vec<ApiResource>, Error> {
    let l: ResourceList = decode(body, "APIResourceList")?;
    let (group, version) = split_api_version(&l.group_version);
    let mut out: Vec<ApiResource> = Vec::new();
    let mut subs: Vec<(String, String)> = Vec::new();
    for r in l.resources {
        if let Some((parent, sub)) = r.name.split_once('/') {
            subs.push((parent.to_owned(), sub.to_owned()));
            continue;
        }
        out.push(ApiResource {
            group: group.to_owned(),
            version: version.to_owned(),
            api_version: l.group_version.clone(),
            kind: r.kind,
            plural: r.name,
            namespaced: r.namespaced,
            verbs: r.verbs,
            subresources: Vec::new(),
        });
    }
    for (parent, sub) in subs {
        if let Some(p) = out.iter_mut().find(|r| r.plural == parent) {
            p.subresources.push(sub);
        }
    }
    Ok(out)
}

#[derive(Default)]
struct Cache {
    /// group-version → its resources.
    by_gv: HashMap<String, Arc<[ApiResource]>>,
}

impl Cache {
    fn find(&self, api_version: &str, kind: &str) -> Option<ApiResource> {
        self.by_gv
            .get(api_version)?
            .iter()
            .find(|r| r.kind == kind)
            .cloned()
    }
}

/// Cached discovery against one server.
pub struct Discovery {
    client: Client,
    cache: RwLock<Cache>,
    /// Per group-version: the time of its last targeted fetch, behind a lock that makes the
    /// fetch single-flight. Why one lock per group-version: a miss on an aggregated API that
    /// is down waits out its request timeout, and must not hold up misses elsewhere.
    attempts: parking_lot::Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Instant>>>>>,
    min_refresh_interval: Duration,
}

impl Discovery {
    pub fn new(client: Client) -> Self {
        Discovery {
            client,
            cache: RwLock::new(Cache::default()),
            attempts: parking_lot::Mutex::new(HashMap::new()),
            min_refresh_interval: Duration::from_secs(5),
        }
    }

    /// How often a miss may fetch the same group-version again (default 5 s).
    pub fn with_min_refresh_interval(mut self, d: Duration) -> Self {
        self.min_refresh_interval = d;
        self
    }

    /// Fetch every group-version. A group-version that fails (e.g. an aggregated API that is
    /// down) is logged and skipped, as kubectl does; failing `/api` or `/apis` is an error.
    pub async fn refresh(&self) -> Result<(), Error> {
        let core = self.get("/api").await?;
        let groups = self.get("/apis").await?;
        let mut gvs = parse_api_versions(&core)?;
        gvs.extend(parse_group_list(&groups)?);
        let fetched = join_all(gvs.iter().map(|gv| self.fetch_gv(gv))).await;
        let mut cache = self.cache.write();
        // Group-versions no longer served are dropped; one that failed keeps what we knew.
        let mut by_gv = HashMap::with_capacity(gvs.len());
        for (gv, r) in gvs.iter().zip(fetched) {
            match r {
                Ok(list) => {
                    by_gv.insert(gv.clone(), list.into());
                }
                Err(e) => {
                    tracing::warn!(group_version = %gv, error = %e, "discovery failed");
                    if let Some(old) = cache.by_gv.get(gv) {
                        by_gv.insert(gv.clone(), old.clone());
                    }
                }
            }
        }
        cache.by_gv = by_gv;
        Ok(())
    }

    async fn get(&self, path: &str) -> Result<bytes::Bytes, Error> {
        self.client.request_raw(Method::GET, path, None).await
    }

    async fn fetch_gv(&self, gv: &str) -> Result<Vec<ApiResource>, Error> {
        let path = if gv.contains('/') {
            format!("/apis/{gv}")
        } else {
            format!("/api/{gv}")
        };
        parse_resource_list(&self.get(&path).await?)
    }

    /// The resource for (apiVersion, kind) if it is cached.
    pub fn cached(&self, api_version: &str, kind: &str) -> Option<ApiResource> {
        self.cache.read().find(api_version, kind)
    }

    /// Every cached resource.
    pub fn resources(&self) -> Vec<ApiResource> {
        let c = self.cache.read();
        c.by_gv.values().flat_map(|l| l.iter().cloned()).collect()
    }

    /// Resolve (apiVersion, kind), fetching its group-version on a miss (rate-limited).
    /// Unknown kinds are a 404 NotFound [`Error::Api`].
    pub async fn resolve(&self, api_version: &str, kind: &str) -> Result<ApiResource, Error> {
        if let Some(r) = self.cached(api_version, kind) {
            return Ok(r);
        }
        let flight = self
            .attempts
            .lock()
            .entry(api_version.to_owned())
            .or_default()
            .clone();
        let mut last = flight.lock().await;
        // Another caller may have fetched it while we waited.
        if let Some(r) = self.cached(api_version, kind) {
            return Ok(r);
        }
        let due = last.is_none_or(|t| t.elapsed() >= self.min_refresh_interval);
        if due {
            // Only an answer counts as a refresh, and it is recorded only once it has come:
            // after a failed request (server unreachable), or one whose caller gave up waiting
            // (a timeout, an aborted task: the future dropped at the await), the next caller
            // asks again instead of reading the stale miss as a 404.
            let asked = Instant::now();
            match self.fetch_gv(api_version).await {
                Ok(list) => {
                    self.cache
                        .write()
                        .by_gv
                        .insert(api_version.to_owned(), list.into());
                }
                Err(e) if e.code() == Some(404) => {
                    self.cache.write().by_gv.remove(api_version);
                }
                Err(e) => return Err(e),
            }
            *last = Some(asked);
        }
        drop(last);
        self.cached(api_version, kind).ok_or_else(|| {
            Error::Api(Box::new(Status::failure(
                404,
                "NotFound",
                format!(
                    "the server doesn't have a resource type for kind {kind:?} in {api_version:?}"
                ),
            )))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIR: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/apiserver-samples"
    );

    fn read(name: &str) -> Vec<u8> {
        std::fs::read(format!("{DIR}/{name}")).unwrap()
    }

    #[test]
    fn golden_discovery_api() {
        assert_eq!(
            parse_api_versions(&read("discovery-api.json")).unwrap(),
            ["v1"]
        );
    }

    #[test]
    fn golden_discovery_apis_lists_every_group_version() {
        let gvs = parse_group_list(&read("discovery-apis.json")).unwrap();
        assert!(gvs.contains(&"apps/v1".to_owned()));
        assert!(gvs.contains(&"apiregistration.k8s.io/v1".to_owned()));
        let v: serde_json::Value = serde_json::from_slice(&read("discovery-apis.json")).unwrap();
        let n: usize = v["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["versions"].as_array().unwrap().len())
            .sum();
        assert_eq!(gvs.len(), n);
    }

    #[test]
    fn golden_discovery_api_v1_resources() {
        let rs = parse_resource_list(&read("discovery-api-v1.json")).unwrap();
        let cm = rs.iter().find(|r| r.kind == "ConfigMap").unwrap();
        assert_eq!(
            (
                cm.plural.as_str(),
                cm.namespaced,
                cm.api_version.as_str(),
                cm.group.as_str()
            ),
            ("configmaps", true, "v1", "")
        );
        assert!(cm.supports("watch") && cm.supports("patch"));
        let ns = rs.iter().find(|r| r.kind == "Namespace").unwrap();
        assert!(!ns.namespaced);
        assert!(ns.has_subresource("status") && ns.has_subresource("finalize"));
        let pod = rs.iter().find(|r| r.plural == "pods").unwrap();
        for sub in ["status", "log", "exec", "binding", "eviction"] {
            assert!(pod.has_subresource(sub), "pods/{sub}");
        }
        let binding = rs.iter().find(|r| r.plural == "bindings").unwrap();
        assert!(!binding.supports("watch"));
        assert!(rs.iter().all(|r| !r.plural.contains('/')));
        // Every top-level entry of the sample is one resource.
        let v: serde_json::Value = serde_json::from_slice(&read("discovery-api-v1.json")).unwrap();
        let top = v["resources"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| !r["name"].as_str().unwrap().contains('/'))
            .count();
        assert_eq!(rs.len(), top);
    }

    #[test]
    fn bad_discovery_documents_are_decode_errors() {
        assert!(matches!(parse_resource_list(b"{"), Err(Error::Decode(_))));
        assert!(matches!(
            parse_group_list(br#"{"groups":7}"#),
            Err(Error::Decode(_))
        ));
    }
}
