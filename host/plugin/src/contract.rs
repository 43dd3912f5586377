//! The versions of the `kube:controller` contract a component may be built against, and its
//! exports as each version has them.

use wasmtime::component::types::{ComponentItem, Type};
use wasmtime::component::{Component, ComponentExportIndex};
use wasmtime::Engine;

/// The version of the `kube:controller` contract a component was built against. The host
/// serves each side by side; the version decides the notifications' shape (0.2.0 passes the
/// object's metadata beside its JSON) and whether `validate-config` may exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contract {
    /// `kube:controller@0.1.0`.
    V0_1,
    /// `kube:controller@0.2.0`.
    V0_2,
}

impl Contract {
    /// The version as WIT spells it.
    pub fn version(self) -> &'static str {
        match self {
            Contract::V0_1 => "0.1.0",
            Contract::V0_2 => "0.2.0",
        }
    }

    /// Reads the version off the component's imports (`kube:controller/lister@0.2.0`), or, for a
    /// guest that imports none of the contract's interfaces, off the shape of its `on-add` (a
    /// `cached-object` record in 0.2.0, bare JSON bytes in 0.1.0).
    pub(crate) fn of(component: &Component, engine: &Engine) -> Result<Contract, String> {
        let ty = component.component_type();
        for (name, _) in ty.imports(engine) {
            let Some(rest) = name.strip_prefix("kube:controller/") else {
                continue;
            };
            return match rest.rsplit_once('@').map(|(_, v)| v) {
                Some("0.1.0") => Ok(Contract::V0_1),
                Some("0.2.0") => Ok(Contract::V0_2),
                _ => Err(format!(
                    "it imports `{name}`, a version of the contract this host does not serve"
                )),
            };
        }
        match ty.get_export(engine, "on-add").map(|e| e.ty) {
            Some(ComponentItem::ComponentFunc(f)) => match f.params().nth(1) {
                Some((_, Type::Record(_))) => Ok(Contract::V0_2),
                _ => Ok(Contract::V0_1),
            },
            _ => Err("no export named `on-add`".into()),
        }
    }
}

/// Export indices resolved once per component, so instantiation does no name lookups.
pub(crate) struct ExportIndices {
    pub(crate) contract: Contract,
    pub(crate) manifest: ComponentExportIndex,
    pub(crate) on_add: ComponentExportIndex,
    pub(crate) on_update: ComponentExportIndex,
    pub(crate) on_delete: ComponentExportIndex,
    pub(crate) reconcile: ComponentExportIndex,
    /// 0.2.0's optional export.
    pub(crate) validate_config: Option<ComponentExportIndex>,
}
