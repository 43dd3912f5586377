//! The manifest's watches as the SDK knows them inside an instance, so that
//! [`Api::get_by_key`](crate::Api::get_by_key) can read a kind the manifest watches once through
//! `lister.get-by-key` (the watch's number and the key: one string across) instead of `get`
//! (four strings, each validated by the host, the key split here and rebuilt there).
//!
//! The host calls `manifest` once at load, in an instance of its own; a worker's instance never
//! sees that call. So the [`Controller`](crate::Controller) glue registers how to build the
//! manifest, and the table is built from it at the first read by key, once per instance.

use std::sync::OnceLock;

use crate::Manifest;

static MANIFEST: OnceLock<fn() -> Manifest> = OnceLock::new();
static WATCHED: OnceLock<Vec<(String, String)>> = OnceLock::new();

/// Remembers how to build this component's manifest (every export of the glue calls it first:
/// one check of an initialised cell after the first).
pub(crate) fn register(manifest: fn() -> Manifest) {
    let _ = MANIFEST.set(manifest);
}

/// The number of the only watch of `api_version`/`kind`; none when there is no such watch (the
/// host refuses the read, as `get` reports it), when there are several (several caches of the
/// kind, which `get` reads together) or when no manifest is registered (raw bindings).
pub(crate) fn only_watch_of(api_version: &str, kind: &str) -> Option<u32> {
    let watched = WATCHED.get_or_init(|| {
        MANIFEST.get().map_or_else(Vec::new, |manifest| {
            manifest()
                .watches
                .into_iter()
                .map(|w| (w.api_version, w.kind))
                .collect()
        })
    });
    only_match(watched, api_version, kind)
}

fn only_match(watched: &[(String, String)], api_version: &str, kind: &str) -> Option<u32> {
    let mut matching = watched
        .iter()
        .enumerate()
        .filter(|(_, (a, k))| a == api_version && k == kind)
        .map(|(i, _)| i);
    let first = matching.next()?;
    if matching.next().is_some() {
        return None;
    }
    u32::try_from(first).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, k)| (a.to_string(), k.to_string()))
            .collect()
    }

    #[test]
    fn a_kind_watched_once_is_read_by_its_watch_number() {
        let t = table(&[("apps/v1", "Deployment"), ("v1", "ConfigMap")]);
        assert_eq!(only_match(&t, "v1", "ConfigMap"), Some(1));
        assert_eq!(only_match(&t, "apps/v1", "Deployment"), Some(0));
    }

    #[test]
    fn a_kind_watched_twice_or_not_at_all_has_no_single_watch() {
        let t = table(&[("v1", "ConfigMap"), ("v1", "Secret"), ("v1", "ConfigMap")]);
        assert_eq!(only_match(&t, "v1", "ConfigMap"), None);
        assert_eq!(only_match(&t, "v1", "Pod"), None);
        // The group/version is part of the kind's identity.
        assert_eq!(only_match(&t, "v2", "Secret"), None);
        assert_eq!(only_match(&[], "v1", "Secret"), None);
    }
}
