//! The admin HTTP paths of an emulator run as a process (`host emulator`): statistics and fault
//! commands, so tests in another process can drive what in-process tests call directly.

use http::{Method, Response, StatusCode};
use serde::Deserialize;
use serde_json::json;

use super::response::{self, Body};
use super::Shared;

/// A fault command for `POST /_emulator/faults`, e.g. `{"failNext":{"count":2,"code":429}}`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum FaultCommand {
    CloseWatchesAfter(u64),
    InjectExpired(bool),
    /// `verbs` (e.g. `["list","watch"]`) limits it to those requests and replaces only what
    /// was armed for the same verbs; without, it applies to all and replaces everything armed.
    FailNext {
        count: u64,
        code: u16,
        #[serde(default = "one", rename = "retryAfter")]
        retry_after: u32,
        #[serde(default)]
        verbs: Vec<String>,
    },
    /// The next `count` requests (of `verbs`, as for `failNext`) served `ms` late.
    DelayNext {
        count: u64,
        ms: u64,
        #[serde(default)]
        verbs: Vec<String>,
    },
    /// Seconds.
    StallStreams(f64),
    /// An etcd compaction: old Exact lists and continue tokens 410, watches still served.
    CompactHistory(bool),
    /// A compaction before each of the next N LISTs that carry a continue token.
    CompactBeforeContinue(u64),
    /// The watch cache's history dropped: watches from older RVs get an in-stream 410.
    ExpireWatchHistory(bool),
    DropConnections(bool),
    /// Watch-list streams leave out the initial-events-end bookmark while on.
    OmitInitialEventsEnd(bool),
    /// Watches with `sendInitialEvents` get 422 while on.
    RefuseWatchList(bool),
    Clear(bool),
}

fn one() -> u32 {
    1
}

/// The admin paths: `GET /_emulator/stats` (requests by verb, open watches, the current RV,
/// and under `faults` where each fault took effect, [`Delivered`](super::faults::Delivered)),
/// `POST /_emulator/faults`.
pub(crate) fn admin(
    shared: &Shared,
    method: &Method,
    rest: &[String],
    body: &[u8],
) -> Response<Body> {
    match (method, rest.first().map(String::as_str)) {
        (&Method::GET, Some("stats")) => {
            let s = shared.counters.snapshot();
            response::value(
                StatusCode::OK,
                &json!({
                    "requests": s.requests,
                    "openWatches": s.open_watches,
                    "resourceVersion": shared.store.current_rv(),
                    "faults": shared.faults.delivered(),
                }),
            )
        }
        (&Method::POST, Some("faults")) => {
            let cmd: FaultCommand = match serde_json::from_slice(body) {
                Ok(c) => c,
                Err(e) => {
                    return response::status(&response::bad_request(format!(
                        "bad fault command: {e}"
                    )))
                }
            };
            let f = &shared.faults;
            match cmd {
                FaultCommand::CloseWatchesAfter(n) => f.close_watches_after(n),
                FaultCommand::InjectExpired(_) => f.inject_expired(),
                FaultCommand::FailNext {
                    count,
                    code,
                    retry_after,
                    verbs,
                } => {
                    let verbs: Vec<&str> = verbs.iter().map(String::as_str).collect();
                    if verbs.is_empty() {
                        f.fail_next(count, code, retry_after);
                    } else if let Err(e) = f.fail_next_for(count, code, retry_after, &verbs) {
                        return response::status(&response::bad_request(format!(
                            "bad fault command: {e}"
                        )));
                    }
                }
                FaultCommand::DelayNext { count, ms, verbs } => {
                    let verbs: Vec<&str> = verbs.iter().map(String::as_str).collect();
                    let by = std::time::Duration::from_millis(ms.min(3_600_000));
                    if let Err(e) = f.delay_next(count, by, &verbs) {
                        return response::status(&response::bad_request(format!(
                            "bad fault command: {e}"
                        )));
                    }
                }
                FaultCommand::StallStreams(s) => {
                    f.stall_streams(std::time::Duration::from_secs_f64(s.clamp(0.0, 86_400.0)))
                }
                FaultCommand::CompactHistory(_) => f.compact_history(),
                FaultCommand::CompactBeforeContinue(n) => f.compact_before_continue(n),
                FaultCommand::ExpireWatchHistory(_) => f.expire_watch_history(),
                FaultCommand::DropConnections(_) => f.drop_connections(),
                FaultCommand::OmitInitialEventsEnd(on) => f.omit_initial_events_end(on),
                FaultCommand::RefuseWatchList(on) => f.refuse_watch_list(on),
                FaultCommand::Clear(_) => f.clear(),
            }
            response::value(StatusCode::OK, &json!({"ok": true}))
        }
        _ => response::status(&response::no_route()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_commands_parse() {
        let c: FaultCommand =
            serde_json::from_str(r#"{"failNext":{"count":2,"code":429}}"#).unwrap();
        assert!(matches!(
            c,
            FaultCommand::FailNext {
                count: 2,
                code: 429,
                retry_after: 1,
                ..
            }
        ));
        let c: FaultCommand =
            serde_json::from_str(r#"{"failNext":{"count":1,"code":500,"verbs":["list","watch"]}}"#)
                .unwrap();
        assert!(
            matches!(&c, FaultCommand::FailNext { code: 500, verbs, .. } if verbs == &["list", "watch"])
        );
        let c: FaultCommand = serde_json::from_str(r#"{"compactBeforeContinue":2}"#).unwrap();
        assert!(matches!(c, FaultCommand::CompactBeforeContinue(2)));
        let c: FaultCommand = serde_json::from_str(r#"{"closeWatchesAfter":3}"#).unwrap();
        assert!(matches!(c, FaultCommand::CloseWatchesAfter(3)));
        let c: FaultCommand = serde_json::from_str(r#"{"refuseWatchList":true}"#).unwrap();
        assert!(matches!(c, FaultCommand::RefuseWatchList(true)));
        let c: FaultCommand = serde_json::from_str(r#"{"omitInitialEventsEnd":false}"#).unwrap();
        assert!(matches!(c, FaultCommand::OmitInitialEventsEnd(false)));
        assert!(serde_json::from_str::<FaultCommand>(r#"{"nope":1}"#).is_err());
    }
}
