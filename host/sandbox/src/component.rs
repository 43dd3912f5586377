//! What a file must be before it is compiled: a WebAssembly component, not a core module.

/// Why bytes are not a component, told apart by the 8-byte preamble so that the common
/// mistake (a `wasm32-unknown-unknown` or wasip1 core module) gets an actionable message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotComponent {
    /// Not WebAssembly at all.
    #[error("not a WebAssembly file (missing the \\0asm header)")]
    NotWasm,
    /// A core module: only components run here.
    #[error("a core WebAssembly module, not a component; build it with `--target wasm32-wasip2` or wrap it with `wasm-tools component new`")]
    CoreModule,
    /// A WebAssembly binary of an unknown version or layer.
    #[error("unsupported WebAssembly binary (version/layer bytes {0:02x?})")]
    UnknownVersion([u8; 4]),
}

/// The content digest of a component's bytes, as OCI registries and `sha256sum` write it
/// (`sha256:<hex>`): what names a revision of a plugin, whatever file or reference it came from.
pub fn digest(bytes: &[u8]) -> String {
    use sha2::{Digest as _, Sha256};
    format!("sha256:{}", crate::cache::hex(&Sha256::digest(bytes)))
}

/// The names `component` imports and exports (`kube:controller/lister@0.2.0`, `on-add`…), in
/// its own order: what an OCI artifact's config lists for registries and tools to show.
pub fn world_names(
    component: &wasmtime::component::Component,
    engine: &wasmtime::Engine,
) -> (Vec<String>, Vec<String>) {
    let ty = component.component_type();
    (
        ty.imports(engine).map(|(n, _)| n.to_owned()).collect(),
        ty.exports(engine).map(|(n, _)| n.to_owned()).collect(),
    )
}

/// Checks the preamble of `bytes`: `\0asm`, then a component's version and layer.
pub fn check_header(bytes: &[u8]) -> Result<(), NotComponent> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(NotComponent::NotWasm);
    }
    let version = [bytes[4], bytes[5], bytes[6], bytes[7]];
    match version {
        [1, 0, 0, 0] => Err(NotComponent::CoreModule),
        [_, _, 1, 0] => Ok(()),
        other => Err(NotComponent::UnknownVersion(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_is_the_sha256_of_the_bytes_as_registries_write_it() {
        // `printf abc | sha256sum`
        assert_eq!(
            digest(b"abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn garbage_core_modules_and_unknown_layers_are_told_apart() {
        assert_eq!(check_header(b"\0asm\x0d\0\x01\0"), Ok(()));
        assert_eq!(check_header(b"\0asm"), Err(NotComponent::NotWasm));
        assert_eq!(check_header(b"not wasm"), Err(NotComponent::NotWasm));
        assert_eq!(
            check_header(b"\0asm\x01\0\0\0"),
            Err(NotComponent::CoreModule)
        );
        assert_eq!(
            check_header(b"\0asm\x01\0\x02\0"),
            Err(NotComponent::UnknownVersion([1, 0, 2, 0]))
        );
    }
}
