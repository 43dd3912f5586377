//! Query parameters of LIST and WATCH requests.

use std::fmt::Write as _;

/// Options of a LIST (spec 1.3, 6.8).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListParams {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    /// `None` = unset (Most Recent), `Some("0")` = Any, `Some(n)` = Not older than / Exact.
    pub resource_version: Option<String>,
    /// `NotOlderThan` or `Exact`; requires `resource_version`.
    pub resource_version_match: Option<String>,
    pub limit: Option<u32>,
    pub continue_token: Option<String>,
}

/// Options of a WATCH (spec 1.6, 1.12).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchParams {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    pub allow_watch_bookmarks: bool,
    pub send_initial_events: bool,
    pub timeout_seconds: Option<u32>,
}

impl ListParams {
    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.label_selector = Some(selector.into());
        self
    }
    pub fn fields(mut self, selector: impl Into<String>) -> Self {
        self.field_selector = Some(selector.into());
        self
    }
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }
    pub fn continue_from(mut self, token: impl Into<String>) -> Self {
        self.continue_token = Some(token.into());
        self
    }
    pub fn at(mut self, resource_version: impl Into<String>) -> Self {
        self.resource_version = Some(resource_version.into());
        self
    }
    pub fn matching(mut self, resource_version_match: impl Into<String>) -> Self {
        self.resource_version_match = Some(resource_version_match.into());
        self
    }

    /// The URL query string (without `?`), keys in a fixed order.
    pub fn to_query(&self) -> String {
        let mut q = Query::default();
        q.opt("labelSelector", self.label_selector.as_deref());
        q.opt("fieldSelector", self.field_selector.as_deref());
        q.opt("resourceVersion", self.resource_version.as_deref());
        q.opt(
            "resourceVersionMatch",
            self.resource_version_match.as_deref(),
        );
        if let Some(l) = self.limit {
            q.pair("limit", &l.to_string());
        }
        q.opt("continue", self.continue_token.as_deref());
        q.0
    }
}

impl WatchParams {
    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.label_selector = Some(selector.into());
        self
    }
    pub fn fields(mut self, selector: impl Into<String>) -> Self {
        self.field_selector = Some(selector.into());
        self
    }
    pub fn at(mut self, resource_version: impl Into<String>) -> Self {
        self.resource_version = Some(resource_version.into());
        self
    }
    pub fn matching(mut self, resource_version_match: impl Into<String>) -> Self {
        self.resource_version_match = Some(resource_version_match.into());
        self
    }
    pub fn bookmarks(mut self, on: bool) -> Self {
        self.allow_watch_bookmarks = on;
        self
    }
    pub fn initial_events(mut self, on: bool) -> Self {
        self.send_initial_events = on;
        self
    }
    pub fn timeout(mut self, seconds: u32) -> Self {
        self.timeout_seconds = Some(seconds);
        self
    }

    /// The URL query string (without `?`), starting with `watch=true` (spec 6.1).
    pub fn to_query(&self) -> String {
        let mut q = Query::default();
        q.pair("watch", "true");
        q.opt("labelSelector", self.label_selector.as_deref());
        q.opt("fieldSelector", self.field_selector.as_deref());
        q.opt("resourceVersion", self.resource_version.as_deref());
        q.opt(
            "resourceVersionMatch",
            self.resource_version_match.as_deref(),
        );
        if self.allow_watch_bookmarks {
            q.pair("allowWatchBookmarks", "true");
        }
        if self.send_initial_events {
            q.pair("sendInitialEvents", "true");
        }
        if let Some(t) = self.timeout_seconds {
            q.pair("timeoutSeconds", &t.to_string());
        }
        q.0
    }
}

/// A form-encoded query string builder.
#[derive(Default)]
pub(crate) struct Query(pub(crate) String);

impl Query {
    pub(crate) fn pair(&mut self, k: &str, v: &str) {
        if !self.0.is_empty() {
            self.0.push('&');
        }
        let _ = write!(
            self.0,
            "{}={}",
            form_urlencoded::byte_serialize(k.as_bytes()).collect::<String>(),
            form_urlencoded::byte_serialize(v.as_bytes()).collect::<String>()
        );
    }
    pub(crate) fn opt(&mut self, k: &str, v: Option<&str>) {
        if let Some(v) = v {
            self.pair(k, v);
        }
    }
}

/// Join a scope's selector with a per-request one (both must hold).
pub(crate) fn and_selectors(scope: Option<&str>, request: Option<&str>) -> Option<String> {
    match (
        scope.filter(|s| !s.is_empty()),
        request.filter(|s| !s.is_empty()),
    ) {
        (Some(a), Some(b)) if a != b => Some(format!("{a},{b}")),
        (Some(a), _) => Some(a.to_owned()),
        (None, Some(b)) => Some(b.to_owned()),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_query_spec_6_8() {
        let q = ListParams::default()
            .labels("app in (a,b),!x")
            .limit(500)
            .at("0")
            .to_query();
        assert_eq!(
            q,
            "labelSelector=app+in+%28a%2Cb%29%2C%21x&resourceVersion=0&limit=500"
        );
        let q = ListParams::default().continue_from("tok=").to_query();
        assert_eq!(q, "continue=tok%3D");
        assert_eq!(ListParams::default().to_query(), "");
    }

    #[test]
    fn watch_query_spec_6_1() {
        let q = WatchParams::default()
            .at("10")
            .bookmarks(true)
            .initial_events(true)
            .matching("NotOlderThan")
            .timeout(290)
            .fields("metadata.name=a")
            .to_query();
        assert_eq!(
            q,
            "watch=true&fieldSelector=metadata.name%3Da&resourceVersion=10&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&sendInitialEvents=true&timeoutSeconds=290"
        );
    }

    #[test]
    fn selectors_combine() {
        assert_eq!(
            and_selectors(Some("a=b"), Some("c")).as_deref(),
            Some("a=b,c")
        );
        assert_eq!(and_selectors(None, Some("c")).as_deref(), Some("c"));
        assert_eq!(and_selectors(Some(""), None), None);
    }
}
