//! Host-side bindings generated from the WIT contract, one module per version served.
//!
//! Exports are async so guest calls run on tokio and yield at epoch ticks instead of blocking a
//! worker thread; only the `client` imports are async on the host (they do network I/O), the
//! lister, queue, log, config and events imports answer from memory and stay synchronous.
//!
//! 0.1.0's `types` are mapped onto 0.2.0's (`with`): 0.2.0 only added types, so every shared one
//! is the same record or enum, field for field, and one Rust type serves both versions. The 0.1.0
//! import traits then forward to the 0.2.0 ones (see `imports`).

/// `kube:controller@0.2.0` (`wit/controller.wit`), through its `controller-base` world: the host
/// links every import and requires every export but the optional `validate-config`.
pub mod v0_2 {
    wasmtime::component::bindgen!({
        path: "wit",
        world: "kube:controller/controller-base",
        imports: {
            "kube:controller/client": async,
        },
        exports: {
            default: async,
        },
    });
}

/// `kube:controller@0.1.0` (`wit/0.1.0/controller.wit`), frozen.
pub mod v0_1 {
    wasmtime::component::bindgen!({
        path: "wit/0.1.0",
        world: "kube:controller/controller",
        imports: {
            "kube:controller/client": async,
        },
        exports: {
            default: async,
        },
        with: {
            "kube:controller/types": super::v0_2::kube::controller::types,
        },
    });
}
