//! `host shadow report`: what a running host's shadow revisions would have done differently,
//! grouped by kind of change, read from its `/statusz`.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use clap::{Args, Subcommand};
use http_body_util::Full;
use kwh_client::clip::clip;
use kwh_plugin::backend::shadow::{kind_of, Outcome};
use kwh_plugin::ApiError;
use serde_json::Value;

#[derive(Args, Debug)]
pub struct ShadowArgs {
    #[command(subcommand)]
    command: ShadowCommand,
}

#[derive(Subcommand, Debug)]
enum ShadowCommand {
    /// Print each plugin's shadow: its counts, then its newest differences grouped by kind of
    /// change (operation, kind, the paths the patch touches, or the refusal's reason).
    Report {
        /// The host's metrics address (its `--metrics-addr`), e.g. http://127.0.0.1:9090.
        #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:9090")]
        url: String,
        /// Only this plugin.
        #[arg(long, value_name = "NAME")]
        plugin: Option<String>,
    },
}

pub async fn shadow(args: ShadowArgs) -> anyhow::Result<()> {
    let ShadowCommand::Report { url, plugin } = args.command;
    let web = kwh_client::WebClient::new(None, Duration::from_secs(10))?;
    let target = format!("{}/statusz", url.trim_end_matches('/'));
    let req = http::Request::get(&target)
        .body(Full::new(Bytes::new()))
        .with_context(|| format!("{target}: not a URL"))?;
    let resp = web.send(req).await.with_context(|| target.clone())?;
    let status = resp.status();
    let body = web.body(resp, 64 << 20).await?;
    anyhow::ensure!(status.is_success(), "{target}: answered {status}");
    let doc: Value =
        serde_json::from_slice(&body).with_context(|| format!("{target}: not JSON"))?;
    print!("{}", report(&doc, plugin.as_deref()));
    Ok(())
}

/// The report of a `/statusz` document.
pub fn report(statusz: &Value, only: Option<&str>) -> String {
    let mut out = String::new();
    let plugins = statusz["plugins"].as_array().cloned().unwrap_or_default();
    let mut any = false;
    for p in plugins {
        let name = p["name"].as_str().unwrap_or("?");
        if only.is_some_and(|o| o != name) || p["shadow"].is_null() {
            continue;
        }
        any = true;
        let s = &p["shadow"];
        let n = |k: &str| s[k].as_u64().unwrap_or(0);
        out.push_str(&format!(
            "plugin {name}: shadow {} ({} reconciles; {} agreements, {} differences, {} refusals)\n",
            s["module"].as_str().unwrap_or("?"),
            n("reconciles"),
            n("agreements"),
            n("differences"),
            n("refusals")
        ));
        let mut groups: BTreeMap<String, (Vec<String>, Value, &Value)> = BTreeMap::new();
        for d in s["lastDifferences"].as_array().into_iter().flatten() {
            let outcome = match d["outcome"].as_str() {
                Some("changes") => Outcome::Changes(d["patch"].clone()),
                Some("refused") => Outcome::Refused(ApiError::new(
                    u16::try_from(d["refusal"]["code"].as_u64().unwrap_or(0)).unwrap_or(0),
                    d["refusal"]["reason"].as_str().unwrap_or(""),
                    d["refusal"]["message"].as_str().unwrap_or(""),
                )),
                _ => continue,
            };
            let kind = kind_of(
                d["op"].as_str().unwrap_or("?"),
                d["kind"].as_str().unwrap_or("?"),
                &outcome,
            );
            let object = match d["namespace"].as_str() {
                Some(ns) => format!("{ns}/{}", d["name"].as_str().unwrap_or("")),
                None => d["name"].as_str().unwrap_or("").to_owned(),
            };
            let example = match &outcome {
                Outcome::Changes(p) => p.clone(),
                _ => d["refusal"].clone(),
            };
            let e = groups
                .entry(kind)
                .or_insert_with(|| (Vec::new(), example, d));
            if !e.0.contains(&object) {
                e.0.push(object);
            }
        }
        if groups.is_empty() {
            out.push_str("  no differences\n");
        }
        for (kind, (objects, example, first)) in groups {
            out.push_str(&format!(
                "  {kind}: {} object(s): {}\n    {example}\n",
                objects.len(),
                objects.join(", ")
            ));
            // The first object's context: what the live revision last wrote to it, and what
            // the shadow's reconcile logged.
            let w = &first["liveWrite"];
            if !w.is_null() {
                out.push_str(&format!(
                    "    live revision's last write: {} {}\n",
                    w["op"].as_str().unwrap_or("?"),
                    clip(w["body"].as_str().unwrap_or(""))
                ));
            }
            for line in first["logs"].as_array().into_iter().flatten() {
                out.push_str(&format!(
                    "    shadow log: {}\n",
                    line.as_str().unwrap_or("")
                ));
            }
        }
    }
    if !any {
        out.push_str("no shadow revision runs\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn differences_are_grouped_by_kind_of_change() {
        let doc = json!({"plugins": [
            {"name": "a", "shadow": {"module": "/m/b.wasm", "reconciles": 5, "agreements": 2,
              "differences": 3, "refusals": 1, "lastDifferences": [
                {"op": "patch", "kind": "ConfigMap", "namespace": "default", "name": "x",
                 "outcome": "changes", "patch": [{"op": "add", "path": "/data/k", "value": "1"}],
                 "liveWrite": {"op": "patch", "body": "{\"data\":{\"k\":\"0\"}}"},
                 "logs": ["INFO x: k is 1 now"]},
                {"op": "patch", "kind": "ConfigMap", "namespace": "default", "name": "y",
                 "outcome": "changes", "patch": [{"op": "add", "path": "/data/k", "value": "2"}]},
                {"op": "create", "kind": "Pod", "namespace": "ns", "name": "p",
                 "outcome": "refused", "refusal": {"code": 422, "reason": "Invalid",
                 "message": "bad"}}
            ]}},
            {"name": "b", "shadow": null}
        ]});
        let r = report(&doc, None);
        assert!(r.starts_with("plugin a: shadow /m/b.wasm (5 reconciles; 2 agreements, 3 differences, 1 refusals)\n"), "{r}");
        assert!(
            r.contains("  patch ConfigMap /data/k: 2 object(s): default/x, default/y\n"),
            "{r}"
        );
        assert!(
            r.contains("    live revision's last write: patch {\"data\":{\"k\":\"0\"}}\n    shadow log: INFO x: k is 1 now\n"),
            "{r}"
        );
        assert!(
            r.contains("  create Pod refused Invalid: 1 object(s): ns/p\n"),
            "{r}"
        );
        assert_eq!(report(&doc, Some("b")), "no shadow revision runs\n");
    }
}
