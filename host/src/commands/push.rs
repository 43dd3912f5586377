//! `host push`: a component published to an OCI registry, in the CNCF Wasm artifact layout
//! (or `wasm-to-oci`'s older one), so that `module: oci://…` can name it.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use kwh_oci::{Credentials, Layout, Reference, SigningKey};
use kwh_plugin::{Compiler, Limits};
use kwh_sandbox::DEFAULT_MAX_MEMORY;
use serde_json::json;

use super::{engine, RegistryArgs};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LayoutArg {
    /// Config `application/vnd.wasm.config.v0+json`, one `application/wasm` layer (what
    /// `wkg oci push` writes).
    Cncf,
    /// `wasm-to-oci`'s: config `application/vnd.wasm.config.v1+json`, one
    /// `application/vnd.wasm.content.layer.v1+wasm` layer.
    WasmToOci,
}

#[derive(Args, Debug)]
pub struct PushArgs {
    /// The component.
    #[arg(value_name = "FILE.wasm")]
    file: PathBuf,
    /// Where to: `oci://registry/repository:tag`.
    #[arg(value_name = "REFERENCE")]
    reference: String,
    /// The artifact layout.
    #[arg(long, value_enum, default_value = "cncf")]
    layout: LayoutArg,
    /// Also sign the pushed manifest with this key (PEM, unencrypted PKCS#8 ECDSA P-256), as
    /// `cosign sign --key` does: hosts given the public key with `--verify-key` (or a
    /// `WasmController`'s `publicKey`) then accept it.
    #[arg(long, value_name = "FILE.pem")]
    sign_key: Option<PathBuf>,
    /// Compile cache directory (the component is loaded to check it is a plugin first).
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    #[command(flatten)]
    registry: RegistryArgs,
}

pub async fn push(args: PushArgs) -> anyhow::Result<()> {
    let reference = Reference::parse(&args.reference)?;
    // Read before anything is pushed: a key that cannot sign is one line, and nothing changes.
    let signing = match &args.sign_key {
        Some(f) => {
            let pem = std::fs::read_to_string(f)
                .with_context(|| format!("--sign-key {}", f.display()))?;
            Some(
                SigningKey::from_pem(&pem)
                    .with_context(|| format!("--sign-key {}", f.display()))?,
            )
        }
        None => None,
    };
    let bytes = std::fs::read(&args.file)
        .with_context(|| format!("{}: cannot read the file", args.file.display()))?;
    // Only plugins are pushed: a file this host could not run is refused here, not at a pull.
    let engine = engine(
        args.cache_dir.clone(),
        DEFAULT_MAX_MEMORY,
        0,
        Compiler::InProcess,
    )?;
    let loaded = engine
        .load_for_inspection(&args.file, Limits::default())
        .await
        .with_context(|| format!("{}", args.file.display()))?;
    let component = engine
        .sandbox()
        .component(&bytes)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.file.display()))?
        .0;
    let (imports, exports) = kwh_sandbox::component::world_names(&component, engine.engine());
    let modules = super::modules(args.cache_dir.as_deref(), &args.registry)?;
    let layout = match args.layout {
        LayoutArg::Cncf => Layout::Cncf,
        LayoutArg::WasmToOci => Layout::Legacy,
    };
    let digest = modules
        .registry()
        .push(
            &reference,
            &Credentials::none(),
            bytes.into(),
            layout,
            json!({"exports": exports, "imports": imports, "target": null}),
        )
        .await?;
    println!(
        "{} pushed: oci://{}/{}@{digest} (plugin {})",
        args.file.display(),
        reference.registry,
        reference.repository,
        loaded.manifest().name
    );
    if let Some(key) = signing {
        modules
            .registry()
            .sign(&reference, &Credentials::none(), &digest, &key)
            .await?;
        println!(
            "signed by key {} (tag {})",
            key.public_key().fingerprint(),
            kwh_oci::signature::signature_tag(&digest)
        );
    }
    Ok(())
}

/// Each of `paths` as a file: `oci://` references pulled into the blob cache beside the
/// compile cache at `cache_dir`.
pub async fn pulled(
    paths: Vec<PathBuf>,
    cache_dir: Option<&Path>,
    registry: &RegistryArgs,
) -> anyhow::Result<Vec<PathBuf>> {
    if !paths.iter().any(|p| crate::modules::is_reference(p)) {
        return Ok(paths);
    }
    let modules = super::modules(cache_dir, registry)?;
    let mut out = Vec::with_capacity(paths.len());
    for p in paths {
        match p.to_str().filter(|s| Reference::is_reference(s)) {
            Some(s) => {
                let r = Reference::parse(s)?;
                let pulled = modules
                    .pull(&r, &Credentials::none(), modules.pull_interval(), &[])
                    .await?;
                out.push(pulled.path);
            }
            None => out.push(p),
        }
    }
    Ok(out)
}
