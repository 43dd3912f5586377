//! What a handler is asked: the decoded query and the resource a request names. Apart from
//! the router that builds them, so that the handlers it calls need not import it back.

use std::sync::Arc;

use super::registry::ResourceDef;

/// Query parameters, decoded once.
#[derive(Debug, Default)]
pub struct Query(Vec<(String, String)>);

impl Query {
    /// Parse a raw query string.
    pub fn parse(q: Option<&str>) -> Self {
        Query(
            form_urlencoded::parse(q.unwrap_or("").as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }
    /// The first value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
    /// A boolean parameter the way the server reads it (`1`, `true` → true).
    pub fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("1" | "true" | "True" | "TRUE"))
    }
    /// `watch=` present and not false (spec 6.1).
    pub fn is_watch(&self) -> bool {
        matches!(self.get("watch"), Some(v) if !matches!(v, "0" | "false" | "False" | "FALSE"))
    }
}

/// A request for a resource (collection or one object).
#[derive(Debug, Clone)]
pub struct ResourceRequest {
    pub def: Arc<ResourceDef>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
    /// Reached through the deprecated `/watch/` path prefix (a watch without `watch=1`).
    pub watch_path: bool,
}

impl ResourceRequest {
    /// Store-key prefix for the collection: `ns/` or "" (all namespaces, cluster-scoped).
    pub fn prefix(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/"),
            None => String::new(),
        }
    }
}
