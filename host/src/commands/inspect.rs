//! `host inspect`: a plugin's manifest, as YAML.

use std::path::PathBuf;

use clap::Args;
use kwh_plugin::Manifest;

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The component: a file, or `oci://registry/repository:tag` (or `@sha256:…`).
    #[arg(value_name = "FILE.wasm")]
    plugin: PathBuf,
    /// Compile cache directory.
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    #[command(flatten)]
    registry: super::RegistryArgs,
}

pub async fn inspect(args: InspectArgs) -> anyhow::Result<()> {
    let plugin = super::push::pulled(vec![args.plugin], args.cache_dir.as_deref(), &args.registry)
        .await?
        .remove(0);
    let loaded = super::inspected(&plugin, args.cache_dir).await?;
    let mut v = manifest_value(loaded.manifest());
    v["contract"] = loaded.contract().version().into();
    // Unset optional fields are left out, as kubectl prints objects.
    if let Some(watches) = v["watches"].as_array_mut() {
        for w in watches {
            if let Some(o) = w.as_object_mut() {
                o.retain(|_, v| !v.is_null());
            }
        }
    }
    let yaml = yaml_serde::to_string(&v)?;
    print!("{yaml}");
    Ok(())
}

pub fn manifest_value(m: &Manifest) -> serde_json::Value {
    use serde_json::json;
    json!({
        "name": m.name,
        "watches": m.watches.iter().map(|w| json!({
            "apiVersion": w.api_version,
            "kind": w.kind,
            "namespace": w.namespace,
            "labelSelector": w.label_selector,
            "fieldSelector": w.field_selector,
            // Left out when there are none (null is dropped like the other unset fields).
            "indexes": (!w.indexes.is_empty()).then(|| w.indexes.iter().map(|i| json!({
                "name": i.name,
                "paths": i.paths,
                "namespaced": i.namespaced,
            })).collect::<Vec<_>>()),
        })).collect::<Vec<_>>(),
        "writes": m.writes.iter().map(|w| json!({
            "apiVersion": w.api_version,
            "kind": w.kind,
            "verbs": w.verbs.iter().map(|v| match v.subresource() {
                Some(s) => format!("{}/{s}", v.rbac()),
                None => v.rbac().to_string(),
            }).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "resyncPeriodMs": m.resync_period.map_or(0, |d| d.as_millis() as u64),
        "workers": m.workers,
        "recordsEvents": m.records_events,
    })
}
