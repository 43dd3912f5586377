//! What the client needs to know about a resource type, and its URL paths (spec 6.1).

use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};

/// Characters escaped in one path segment.
const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}');

/// A resource type as discovery describes it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApiResource {
    /// API group; empty for the core group.
    pub group: String,
    pub version: String,
    /// `v1` or `group/version`.
    pub api_version: String,
    pub kind: String,
    /// The resource name in URLs, e.g. `configmaps`.
    pub plural: String,
    pub namespaced: bool,
    pub verbs: Vec<String>,
    /// Subresources served, e.g. `status`, `scale`.
    pub subresources: Vec<String>,
}

impl ApiResource {
    /// A resource from its apiVersion (`v1`, `apps/v1`), kind and plural name.
    pub fn new(api_version: &str, kind: &str, plural: &str, namespaced: bool) -> Self {
        let (group, version) = split_api_version(api_version);
        ApiResource {
            group: group.to_owned(),
            version: version.to_owned(),
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            plural: plural.to_owned(),
            namespaced,
            verbs: Vec::new(),
            subresources: Vec::new(),
        }
    }

    /// Whether discovery lists `verb` (an empty verb list, as for hand-built resources, allows
    /// everything).
    pub fn supports(&self, verb: &str) -> bool {
        self.verbs.is_empty() || self.verbs.iter().any(|v| v == verb)
    }

    pub fn has_subresource(&self, name: &str) -> bool {
        self.subresources.iter().any(|s| s == name)
    }

    /// `/api/v1` for the core group, `/apis/{group}/{version}` otherwise.
    pub fn group_version_path(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }

    /// The collection: `…/namespaces/{ns}/{plural}` for a namespaced resource in a namespace,
    /// `…/{plural}` across all namespaces or for a cluster-scoped resource.
    pub fn collection_path(&self, namespace: Option<&str>) -> String {
        let mut p = self.group_version_path();
        if let Some(ns) = namespace.filter(|n| self.namespaced && !n.is_empty()) {
            p.push_str("/namespaces/");
            p.extend(utf8_percent_encode(ns, SEGMENT));
        }
        p.push('/');
        p.push_str(&self.plural);
        p
    }

    /// One object: the collection path plus `/{name}`.
    pub fn object_path(&self, namespace: Option<&str>, name: &str) -> String {
        let mut p = self.collection_path(namespace);
        p.push('/');
        p.extend(utf8_percent_encode(name, SEGMENT));
        p
    }

    /// A subresource of one object, e.g. `…/{name}/status`.
    pub fn subresource_path(&self, namespace: Option<&str>, name: &str, sub: &str) -> String {
        let mut p = self.object_path(namespace, name);
        p.push('/');
        p.extend(utf8_percent_encode(sub, SEGMENT));
        p
    }
}

/// `apps/v1` → (`apps`, `v1`); `v1` → (``, `v1`).
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_and_group_paths_spec_6_1() {
        let cm = ApiResource::new("v1", "ConfigMap", "configmaps", true);
        assert_eq!(
            cm.collection_path(Some("ns")),
            "/api/v1/namespaces/ns/configmaps"
        );
        assert_eq!(cm.collection_path(None), "/api/v1/configmaps");
        assert_eq!(
            cm.object_path(Some("ns"), "a"),
            "/api/v1/namespaces/ns/configmaps/a"
        );
        assert_eq!(
            cm.subresource_path(Some("ns"), "a", "status"),
            "/api/v1/namespaces/ns/configmaps/a/status"
        );
        let dep = ApiResource::new("apps/v1", "Deployment", "deployments", true);
        assert_eq!(dep.group, "apps");
        assert_eq!(
            dep.object_path(Some("n"), "d"),
            "/apis/apps/v1/namespaces/n/deployments/d"
        );
        let crb = ApiResource::new(
            "rbac.authorization.k8s.io/v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
            false,
        );
        // A namespace is ignored for cluster-scoped resources.
        assert_eq!(
            crb.object_path(Some("ns"), "x"),
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/x"
        );
        assert_eq!(
            cm.object_path(None, "a b/c"),
            "/api/v1/configmaps/a%20b%2Fc"
        );
    }
}
