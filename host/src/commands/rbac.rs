//! `host rbac`: the Roles, ClusterRoles and bindings the plugins need.

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use kwh_client::{Client, Discovery};
use kwh_plugin::rbac::{guess, OfflineKinds, Resolved};
use kwh_plugin::{Compiler, Limits, Manifest};
use kwh_sandbox::DEFAULT_MAX_MEMORY;

use super::{engine, kube_config};
use crate::plugins_file;

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("leases").args(["leader_elect", "shards"]).multiple(true)))]
pub struct RbacArgs {
    /// The components.
    #[arg(
        value_name = "FILE.wasm",
        required_unless_present_any = ["plugins_file", "plugins_from_cluster"]
    )]
    plugins: Vec<PathBuf>,
    /// Also grant what `--plugins-from-cluster` needs: `get`, `list` and `watch` on
    /// `WasmController` resources, `get`, `patch` and `update` on their status (the plugins
    /// they name are granted only as the components given here are).
    #[arg(long)]
    plugins_from_cluster: bool,
    /// A plugins file (as `host --plugins`): each plugin's own `namespace` confines it there,
    /// so it gets a Role in that namespace.
    #[arg(long = "plugins", value_name = "FILE")]
    plugins_file: Option<PathBuf>,
    /// Name of the roles and their bindings.
    #[arg(long, default_value = "kube-wasm-host")]
    role_name: String,
    /// The namespace the host will run with (`--namespace` of the run): watches that name none
    /// are confined to it.
    #[arg(long)]
    namespace: Option<String>,
    /// Namespace of the host's service account.
    #[arg(long = "service-account-namespace", default_value = "kube-system")]
    sa_namespace: String,
    /// Name of the host's service account.
    #[arg(long, default_value = "kube-wasm-host")]
    service_account: String,
    /// Resolve kinds by discovery against this kubeconfig's cluster (else built-in kinds are
    /// resolved as a kube-apiserver serves them, custom kinds from `--crd` files, and any
    /// other kind is guessed from its name, with a warning).
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// A YAML file holding CustomResourceDefinitions (other documents are skipped): their
    /// kinds resolve to the plural and scope they declare, without a cluster. Repeatable.
    #[arg(long = "crd", value_name = "FILE.yaml")]
    crds: Vec<PathBuf>,
    /// Kubeconfig context (implies discovery).
    #[arg(long)]
    context: Option<String>,
    /// Compile cache directory.
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    #[command(flatten)]
    registry: super::RegistryArgs,
    /// Also grant what the host's leader election (`host --leader-elect`) needs: a Role in the
    /// lease namespace with `create` on Leases and `get` and `update` on the one Lease named by
    /// `--leader-elect-lease-name`.
    #[arg(long)]
    leader_elect: bool,
    /// Also grant what sharding (`host --shards`) needs: a Role in the lease namespace with
    /// `get`, `list`, `watch`, `create`, `update` and `delete` on its Leases (each replica's
    /// membership Lease is named after its pod).
    #[arg(long)]
    shards: bool,
    /// Namespace of the Leases (`--leader-elect-namespace` of the run; default: the service
    /// account's namespace, which is the pod's and so the run's default).
    #[arg(long, value_name = "NS", requires = "leases")]
    leader_elect_namespace: Option<String>,
    /// Name of the leader-election Lease, and of the shard group (`--leader-elect-lease-name`
    /// of the run).
    #[arg(
        long,
        value_name = "NAME",
        default_value = "kube-wasm-host",
        requires = "leases"
    )]
    leader_elect_lease_name: String,
}

pub async fn rbac(args: RbacArgs) -> anyhow::Result<()> {
    // Checked before any plugin is compiled: a mistake here is one line, at once.
    let leases = kwh_plugin::rbac::Leases::new(
        args.leader_elect_namespace
            .as_deref()
            .unwrap_or(&args.sa_namespace),
        &args.leader_elect_lease_name,
        args.leader_elect,
        args.shards,
    )?;
    let engine = engine(
        args.cache_dir.clone(),
        DEFAULT_MAX_MEMORY,
        0,
        Compiler::InProcess,
    )?;
    // Each component with the namespace it will run with: `--namespace`, or its own in the
    // plugins file.
    let mut plugins: Vec<(PathBuf, Option<String>)> = args
        .plugins
        .iter()
        .map(|p| (p.clone(), args.namespace.clone()))
        .collect();
    if let Some(file) = &args.plugins_file {
        let limits = Limits::default();
        let defaults = plugins_file::Defaults {
            limits: &limits,
            namespace: args.namespace.as_deref(),
        };
        let specs =
            plugins_file::read(file, "plugins file", &defaults).map_err(anyhow::Error::msg)?;
        plugins.extend(specs.into_iter().map(|s| (s.path, s.namespace)));
    }
    let paths = super::push::pulled(
        plugins.iter().map(|(p, _)| p.clone()).collect(),
        args.cache_dir.as_deref(),
        &args.registry,
    )
    .await?;
    for ((p, _), pulled) in plugins.iter_mut().zip(paths) {
        *p = pulled;
    }
    let mut manifests = Vec::new();
    for (p, ns) in &plugins {
        let manifest = engine
            .load_for_inspection(p, Limits::default())
            .await?
            .manifest()
            .clone();
        manifests.push((manifest, ns.as_deref()));
    }
    let mut offline = OfflineKinds::new();
    for f in &args.crds {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("CRD file {}", f.display()))?;
        let n = offline
            .add_crds(&text)
            .with_context(|| format!("CRD file {}", f.display()))?;
        if n == 0 {
            anyhow::bail!(
                "CRD file {}: holds no CustomResourceDefinition",
                f.display()
            );
        }
    }
    let discovery = if args.kubeconfig.is_some() || args.context.is_some() {
        Some(Discovery::new(Client::new(kube_config(
            args.kubeconfig.as_deref(),
            args.context.as_deref(),
        )?)?))
    } else {
        None
    };
    let resolved = resolve_kinds(&manifests, &offline, discovery.as_ref()).await?;
    let subject = kwh_plugin::rbac::Subject {
        role_name: &args.role_name,
        namespace: &args.sa_namespace,
        service_account: &args.service_account,
    };
    let yaml = kwh_plugin::rbac::rbac_yaml(
        manifests.iter().map(|(m, ns)| (m, *ns)),
        |av, k| resolved.get(&(av.to_string(), k.to_string())).cloned(),
        &subject,
        leases.as_ref(),
        &if args.plugins_from_cluster {
            crate::cluster_plugins::rbac_rules()
        } else {
            Vec::new()
        },
    )?;
    print!("{yaml}");
    Ok(())
}

/// Every kind a manifest names, resolved once: from the CRD files first (the kind they define
/// is what the cluster will serve, whether or not it does yet), then by discovery when a
/// cluster is given, else from the built-in resources, else guessed as kubectl would (and
/// said).
async fn resolve_kinds(
    manifests: &[(Manifest, Option<&str>)],
    offline: &OfflineKinds,
    discovery: Option<&Discovery>,
) -> anyhow::Result<HashMap<(String, String), Resolved>> {
    let mut resolved = HashMap::new();
    for (m, _) in manifests {
        let kinds = m
            .watches
            .iter()
            .map(|w| (&w.api_version, &w.kind))
            .chain(m.writes.iter().map(|w| (&w.api_version, &w.kind)));
        for (av, k) in kinds {
            if resolved.contains_key(&(av.clone(), k.clone())) {
                continue;
            }
            let from_crd = offline.resolve_from_crds(av, k);
            let r = match (discovery, from_crd) {
                (_, Some(r)) => r,
                (Some(d), None) => {
                    let r = d
                        .resolve(av, k)
                        .await
                        .with_context(|| format!("plugin {:?}: kind {k} ({av})", m.name))?;
                    Resolved {
                        resource: r.plural,
                        namespaced: r.namespaced,
                    }
                }
                (None, None) => offline.resolve(av, k).unwrap_or_else(|| {
                    let g = guess(k);
                    eprintln!(
                        "warning: plugin {:?}: kind {k} ({av}) is not built in and no --crd file \
                         defines it; guessed resource {:?}, namespaced (give its CRD with --crd, \
                         or --kubeconfig to ask the cluster)",
                        m.name, g.resource
                    );
                    g
                }),
            };
            resolved.insert((av.clone(), k.clone()), r);
        }
    }
    Ok(resolved)
}
