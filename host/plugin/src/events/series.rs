//! A series of isomorphic Events as the recorder keeps it, and the bodies written for it:
//! the Event (in the field order of client-go's requests) and the patch of its count.

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde::Serialize;

use super::model::{EventType, ObjectRef};
use kwh_client::time::micro_time;

/// What makes events isomorphic: client-go's `tools/events` `getKey` field by field (type,
/// action, reason, reporting controller, reporting instance, regarding, related), checked
/// against its source. The note is not in it there either: a series keeps its first note. The
/// reporting instance is one per recorder (the host's identity) and no recorded Event names a
/// related object, so neither needs a field here.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct SeriesKey {
    pub(super) controller: String,
    pub(super) regarding: ObjectRef,
    pub(super) event_type: EventType,
    pub(super) reason: String,
    pub(super) action: String,
}

/// One Event on the server and the occurrences counted into it.
pub(super) struct Series {
    pub(super) key: Arc<SeriesKey>,
    pub(super) name: String,
    pub(super) namespace: String,
    pub(super) event_time: SystemTime,
    pub(super) note: Option<String>,
    pub(super) count: u64,
    /// The count last written (or being written); `count > sent` means a patch is due.
    pub(super) sent: u64,
    pub(super) last_observed: SystemTime,
    /// Monotonic twin of `last_observed`, for expiry.
    pub(super) last_seen: Instant,
    /// The create went through (or found the Event already there).
    pub(super) created: bool,
    /// Still the series new occurrences join; a finished one only waits for its last write.
    pub(super) live: bool,
}

impl Series {
    pub(super) fn dirty(&self) -> bool {
        self.count > self.sent
    }
}

/// The body of an `events.k8s.io/v1` Event, in the field order of client-go's requests.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EventBody<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: BodyMeta<'a>,
    event_time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    series: Option<SeriesBody>,
    reporting_controller: &'a str,
    reporting_instance: &'a str,
    action: &'a str,
    reason: &'a str,
    #[serde(rename = "type")]
    event_type: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<&'a str>,
    regarding: BodyRef<'a>,
}

#[derive(Serialize)]
struct BodyMeta<'a> {
    name: &'a str,
    namespace: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BodyRef<'a> {
    api_version: &'a str,
    kind: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<&'a str>,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    uid: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SeriesBody {
    count: u64,
    last_observed_time: String,
}

#[derive(Serialize)]
struct SeriesPatch {
    series: SeriesBody,
}

pub(super) fn event_body(
    s: &Series,
    reporting_instance: &str,
    with_series: bool,
) -> Result<Bytes, serde_json::Error> {
    let k = &*s.key;
    let body = EventBody {
        api_version: "events.k8s.io/v1",
        kind: "Event",
        metadata: BodyMeta {
            name: &s.name,
            namespace: &s.namespace,
        },
        event_time: micro_time(s.event_time),
        series: (with_series && s.count > 1).then(|| SeriesBody {
            count: s.count,
            last_observed_time: micro_time(s.last_observed),
        }),
        reporting_controller: &k.controller,
        reporting_instance,
        action: &k.action,
        reason: &k.reason,
        event_type: k.event_type.as_str(),
        note: s.note.as_deref(),
        regarding: BodyRef {
            api_version: &k.regarding.api_version,
            kind: &k.regarding.kind,
            namespace: k.regarding.namespace.as_deref(),
            name: &k.regarding.name,
            uid: k.regarding.uid.as_deref(),
        },
    };
    serde_json::to_vec(&body).map(Bytes::from)
}

/// The merge patch that sets a series' count (client-go sends the same fields).
pub(super) fn series_patch(
    count: u64,
    last_observed: SystemTime,
) -> Result<Bytes, serde_json::Error> {
    let patch = SeriesPatch {
        series: SeriesBody {
            count,
            last_observed_time: micro_time(last_observed),
        },
    };
    serde_json::to_vec(&patch).map(Bytes::from)
}

/// client-go's Event name: the object's name and the creation time in hex nanoseconds, unique
/// per object without a round trip for `generateName`.
pub(super) fn event_name(object: &str, unix_nanos: u64) -> String {
    format!("{object}.{unix_nanos:x}")
}

pub(super) fn unix_nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
