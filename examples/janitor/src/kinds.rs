//! The kinds the janitor cleans up, and the workqueue keys that name an object of one of them.
//!
//! Why the kind is in the key: a plugin has one workqueue, and `namespace/name` alone does not
//! say whether `default/cache` is a ConfigMap or a Job. Keys are `Kind:namespace/name`.

/// One kind the janitor watches and may delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    pub api_version: &'static str,
    pub kind: &'static str,
}

/// Watched in this order: a handler's `watch` index is the position here.
pub const KINDS: [Kind; 4] = [
    Kind {
        api_version: "v1",
        kind: "ConfigMap",
    },
    Kind {
        api_version: "v1",
        kind: "Secret",
    },
    Kind {
        api_version: "batch/v1",
        kind: "Job",
    },
    Kind {
        api_version: "v1",
        kind: "Pod",
    },
];

/// The kind of watch number `watch`.
pub fn of_watch(watch: u32) -> Option<&'static Kind> {
    KINDS.get(watch as usize)
}

/// The workqueue key of the object with key `object_key` (`namespace/name`) of `kind`.
pub fn key(kind: &Kind, object_key: &str) -> String {
    format!("{}:{object_key}", kind.kind)
}

/// Splits a workqueue key into its kind and object key; none for a key the janitor never makes.
pub fn parse_key(key: &str) -> Option<(&'static Kind, &str)> {
    let (kind, object_key) = key.split_once(':')?;
    let k = KINDS.iter().find(|k| k.kind == kind)?;
    (!object_key.is_empty()).then_some((k, object_key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_for_every_kind() {
        for (i, k) in KINDS.iter().enumerate() {
            assert_eq!(of_watch(i as u32), Some(k));
            let key = key(k, "ns/name");
            assert_eq!(parse_key(&key), Some((k, "ns/name")));
        }
        assert_eq!(of_watch(4), None);
        assert_eq!(parse_key("Deployment:ns/name"), None);
        assert_eq!(parse_key("ns/name"), None);
        assert_eq!(parse_key("Job:"), None);
    }
}
