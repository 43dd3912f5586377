//! Expires ConfigMaps by a TTL computed from `SystemTime::now()` (so the harness's virtual clock
//! is observable), and performs one write of each kind on request, for the harness tests.
//!
//! Keys: `ns/name` → a ConfigMap with `data.ttl-seconds` is deleted (uid precondition) once
//! `creationTimestamp + ttl` has passed, else merge-patched with `ttl.example.com/checked-at`
//! (virtual epoch seconds) and requeued for the time left; each call logs the monotonic time
//! since the instance's first call. `create/ns/name`, `replace/ns/name`, `json-patch/ns/name`,
//! `sm-patch/ns/name`, `status/ns/name`, `patch-status/ns/name`, `apply-status/ns/name` (a
//! Service; the last two also try to change its spec and labels, which a status write must drop)
//! write once; `cm-patch-status/ns/name` patches a ConfigMap's status, which the manifest does not
//! allow; `enqueue/ms/key` adds `key` now and again after `ms`; `panic/…` traps.
use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use kube_guest::{
    client, lister, log, queue, split_key, watch_all, DeleteOptions, Level, Manifest, Outcome,
    PatchType, Preconditions, Verb, Write,
};
use serde_json::{json, Value};

struct Ttl;

fn err(e: kube_guest::ApiError) -> String {
    format!("{} {}: {}", e.code, e.reason, e.message)
}

/// Seconds since the epoch of `YYYY-MM-DDTHH:MM:SSZ`.
fn parse_time(s: &str) -> Option<u64> {
    let n = |a: usize, b: usize| s.get(a..b)?.parse::<i64>().ok();
    let (y, m, d) = (n(0, 4)?, n(5, 7)?, n(8, 10)?);
    let (hh, mm, ss) = (n(11, 13)?, n(14, 16)?, n(17, 19)?);
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + hh * 3600 + mm * 60 + ss).ok()
}

fn get_cm(ns: Option<&str>, name: &str) -> Result<Option<Value>, String> {
    Ok(lister::get("v1", "ConfigMap", ns, name)
        .map_err(err)?
        .and_then(|b| serde_json::from_slice(&b).ok()))
}

fn expire(ns: Option<&str>, name: &str) -> Result<Outcome, String> {
    static FIRST: OnceLock<Instant> = OnceLock::new();
    let since_first = FIRST.get_or_init(Instant::now).elapsed();
    log::log(
        Level::Debug,
        &format!("mono +{}ms", since_first.as_millis()),
    );
    let Some(cm) = get_cm(ns, name)? else {
        return Ok(Outcome::Done);
    };
    let Some(ttl) = cm["data"]["ttl-seconds"]
        .as_str()
        .and_then(|s| s.parse::<u64>().ok())
    else {
        return Ok(Outcome::Done);
    };
    let created = cm["metadata"]["creationTimestamp"]
        .as_str()
        .and_then(parse_time)
        .ok_or("no creationTimestamp")?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|e| e.to_string())?;
    let expiry = created + ttl;
    if now.as_secs() >= expiry {
        let opts = DeleteOptions {
            preconditions: Some(Preconditions {
                uid: cm["metadata"]["uid"].as_str().map(str::to_string),
                resource_version: None,
            }),
            propagation_policy: None,
            grace_period_seconds: None,
        };
        client::delete("v1", "ConfigMap", ns, name, &opts).map_err(err)?;
        log::log(Level::Info, &format!("expired {name} at {}", now.as_secs()));
        return Ok(Outcome::Done);
    }
    let patch = json!({"metadata": {"annotations": {"ttl.example.com/checked-at": now.as_secs().to_string()}}});
    client::patch(
        "v1",
        "ConfigMap",
        ns,
        name,
        PatchType::Merge,
        patch.to_string().as_bytes(),
    )
    .map_err(err)?;
    let left_ms = (expiry * 1000).saturating_sub(now.as_millis() as u64);
    log::log(Level::Info, &format!("{name} expires in {left_ms}ms"));
    Ok(Outcome::RequeueAfter(left_ms))
}

fn write_once(op: &str, ns: Option<&str>, name: &str) -> Result<Outcome, String> {
    match op {
        "create" => {
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": ns}, "data": {"made": "yes"}});
            client::create("v1", "ConfigMap", ns, cm.to_string().as_bytes()).map_err(err)?;
        }
        "replace" => {
            let mut cm = get_cm(ns, name)?.ok_or("not cached")?;
            cm["data"] = json!({"replaced": "true"});
            client::replace("v1", "ConfigMap", ns, name, cm.to_string().as_bytes()).map_err(err)?;
        }
        "json-patch" => {
            let p = json!([{"op": "add", "path": "/data", "value": {"patched": "json"}}]);
            client::patch(
                "v1",
                "ConfigMap",
                ns,
                name,
                PatchType::Json,
                p.to_string().as_bytes(),
            )
            .map_err(err)?;
        }
        "sm-patch" => {
            let p = json!({"metadata": {"labels": {"patched": "strategic"}}});
            let t = PatchType::StrategicMerge;
            client::patch("v1", "ConfigMap", ns, name, t, p.to_string().as_bytes()).map_err(err)?;
        }
        "status" => {
            let svc = lister::get("v1", "Service", ns, name)
                .map_err(err)?
                .ok_or("no service")?;
            let mut svc: Value = serde_json::from_slice(&svc).map_err(|e| e.to_string())?;
            svc["status"] = json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.7"}]}});
            client::replace_status("v1", "Service", ns, name, svc.to_string().as_bytes())
                .map_err(err)?;
        }
        "patch-status" => {
            let p = json!({"metadata": {"labels": {"patched": "status"}},
                "spec": {"sessionAffinity": "ClientIP"},
                "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.8"}]}}});
            let t = PatchType::Merge;
            client::patch_status("v1", "Service", ns, name, t, p.to_string().as_bytes())
                .map_err(err)?;
        }
        "apply-status" => {
            let obj = json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "namespace": ns, "labels": {"applied": "status"}},
                "spec": {"sessionAffinity": "ClientIP"},
                "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.9"}]}}});
            client::apply_status("v1", "Service", ns, name, obj.to_string().as_bytes(), false)
                .map_err(err)?;
        }
        "cm-patch-status" => {
            let p = json!({"status": {"seen": true}});
            let t = PatchType::Merge;
            client::patch_status("v1", "ConfigMap", ns, name, t, p.to_string().as_bytes())
                .map_err(err)?;
        }
        other => return Err(format!("unknown operation {other}")),
    }
    log::log(Level::Info, &format!("{op} {name} ok"));
    Ok(Outcome::Done)
}

impl kube_guest::Guest for Ttl {
    fn manifest() -> Manifest {
        let write = |kind: &str, verbs: Vec<Verb>| Write {
            api_version: "v1".into(),
            kind: kind.into(),
            verbs,
        };
        Manifest {
            name: "ttl".into(),
            watches: vec![watch_all("v1", "ConfigMap"), watch_all("v1", "Service")],
            writes: vec![
                write(
                    "ConfigMap",
                    vec![Verb::Create, Verb::Update, Verb::Patch, Verb::Delete],
                ),
                write("Service", vec![Verb::UpdateStatus]),
            ],
            resync_period_ms: 0,
            workers: 1,
        }
    }
    fn validate_config(_config: Vec<u8>) -> Result<(), String> {
        Ok(())
    }
    fn on_add(watch: u32, obj: kube_guest::CachedObject) {
        let obj = obj.json;
        let v: Value = serde_json::from_slice(&obj).unwrap_or(Value::Null);
        if watch == 0 && v["data"]["ttl-seconds"].is_string() {
            let name = v["metadata"]["name"].as_str().unwrap_or("");
            let ns = v["metadata"]["namespace"].as_str().unwrap_or("");
            queue::add(&format!("{ns}/{name}"));
        }
    }
    fn on_update(_watch: u32, _old: kube_guest::CachedObject, _new: kube_guest::CachedObject) {}
    fn on_delete(_watch: u32, _obj: kube_guest::CachedObject, _tombstone: bool) {}
    fn reconcile(key: String) -> Result<Outcome, String> {
        if let Some(rest) = key.strip_prefix("panic/") {
            panic!("asked to panic for {rest}");
        }
        if let Some(rest) = key.strip_prefix("enqueue/") {
            let (ms, target) = rest.split_once('/').ok_or("enqueue/ms/key")?;
            queue::add(target);
            queue::add_after(target, ms.parse().map_err(|_| "bad ms")?);
            return Ok(Outcome::Done);
        }
        for op in [
            "create",
            "replace",
            "json-patch",
            "sm-patch",
            "status",
            "patch-status",
            "apply-status",
            "cm-patch-status",
        ] {
            if let Some(rest) = key.strip_prefix(op).and_then(|r| r.strip_prefix('/')) {
                let (ns, name) = split_key(rest);
                return write_once(op, ns, name);
            }
        }
        let (ns, name) = split_key(&key);
        expire(ns, name)
    }
}

kube_guest::export!(Ttl);
