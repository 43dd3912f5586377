//! The plugin's configuration: what the operator wrote under `config:` for this plugin in the
//! host's plugins file, read once per instance.
//!
//! A controller names its settings type as [`Controller::Config`](crate::Controller::Config)
//! (any `serde::Deserialize` type with a [`Default`]); `Self::config()` returns it parsed. When
//! no configuration was given the host hands over `null`, which reads as the default, so a
//! plugin run with `--plugin x.wasm` keeps today's behaviour. A configuration that does not
//! parse is refused at load (`validate-config`), so `config()` never sees one.
//!
//! ```
//! #[derive(serde::Deserialize, Default)]
//! #[serde(rename_all = "camelCase", deny_unknown_fields)]
//! struct Settings { ttl_seconds: Option<u64> }
//! let s: Settings = kube_guest::config::parse(br#"{"ttlSeconds": 30}"#).unwrap();
//! assert_eq!(s.ttl_seconds, Some(30));
//! let d: Settings = kube_guest::config::parse(b"null").unwrap();
//! assert_eq!(d.ttl_seconds, None);
//! assert!(kube_guest::config::parse::<Settings>(br#"{"ttl": 1}"#).is_err());
//! ```

use std::any::Any;
use std::sync::OnceLock;

use serde::de::DeserializeOwned;

/// The configuration's JSON as the host hands it over (`null` when none was given).
pub fn raw() -> &'static [u8] {
    static RAW: OnceLock<Vec<u8>> = OnceLock::new();
    RAW.get_or_init(crate::bindings::kube::controller::config::get)
}

/// Parses a configuration: `null` (or nothing) is `C::default()`, anything else must decode as
/// `C`. The error is serde's, naming the field and position.
pub fn parse<C: DeserializeOwned + Default>(json: &[u8]) -> Result<C, String> {
    let trimmed = json.trim_ascii();
    if trimmed.is_empty() || trimmed == b"null" {
        return Ok(C::default());
    }
    serde_json::from_slice(trimmed).map_err(|e| format!("invalid configuration: {e}"))
}

/// The configuration as `C`, parsed on first use and kept for the life of the instance.
///
/// One component holds one controller, so one settings type: the value is kept behind `Any`.
/// Should it not parse (the host validates it at load, so it does), the default is used and an
/// error logged.
pub fn get<C: DeserializeOwned + Default + Send + Sync + 'static>() -> &'static C {
    static CONFIG: OnceLock<Box<dyn Any + Send + Sync>> = OnceLock::new();
    let stored = CONFIG.get_or_init(|| {
        let parsed = parse::<C>(raw()).unwrap_or_else(|e| {
            crate::log_at(crate::Level::Error, &format!("{e}; using the defaults"));
            C::default()
        });
        Box::new(parsed)
    });
    match stored.downcast_ref::<C>() {
        Some(c) => c,
        // A second settings type in one component: parse it anew each time rather than fail.
        None => Box::leak(Box::new(parse::<C>(raw()).unwrap_or_default())),
    }
}
