//! The runtime's host-wide settings, apart from the runtime so that a plugin's spec, which
//! takes its defaults from them, need not import the runtime that runs it.

use std::time::Duration;

use kwh_informer::backoff::Backoff;

use super::dispatch::RetryPolicy;
use super::health::QuarantinePolicy;
use super::instance::Limits;
use kwh_coordination::ownership::Ownership;

/// Host-wide settings of the plugin runtime.
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    /// Sandbox limits of every plugin started without its own ([`PluginSpec::with_defaults`](crate::PluginSpec::with_defaults)).
    pub limits: Limits,
    /// Restricts watches that name no namespace to this one (namespaced kinds only), for every
    /// plugin started without its own.
    pub namespace: Option<String>,
    /// Stop at the first plugin that fails to start, including one whose kinds do not
    /// resolve yet (instead of waiting for them).
    pub fail_fast: bool,
    /// When a plugin whose instances keep failing is quarantined, and for how long.
    pub quarantine: QuarantinePolicy,
    /// How a notification whose handler failed in the sandbox is retried.
    pub handler_retry: RetryPolicy,
    /// The waits between attempts to start a plugin whose kinds do not resolve yet.
    pub start_retry: Backoff,
    /// The shortest interval between two discovery requests for one group-version.
    pub discovery_refresh: Duration,
    /// Who this host is: the `reportingInstance` of the Events its plugins record.
    pub identity: String,
    /// Which work this replica may do (leader election, shards); everything when alone.
    pub ownership: Ownership,
    /// The page size of every informer's LISTs (client-go's `WatchListPageSize`); `None`
    /// pages only where client-go does (see [`kwh_informer::reflector::ReflectorOptions::page_size`]).
    pub list_page_size: Option<u32>,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            limits: Limits::default(),
            namespace: None,
            fail_fast: false,
            quarantine: QuarantinePolicy::default(),
            handler_retry: RetryPolicy::default(),
            // client-go's reflector backoff: 0.8 s doubling to 30 s, with jitter.
            start_retry: Backoff::default(),
            discovery_refresh: Duration::from_secs(5),
            identity: crate::identity::default_identity(),
            ownership: Ownership::single(),
            list_page_size: None,
        }
    }
}
