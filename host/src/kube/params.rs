//! Query parameters of LIST and WATCH requests.

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
