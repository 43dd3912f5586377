//! Host-side bindings generated from `wit/controller.wit`.
//!
//! Exports are async so guest calls run on tokio and yield at epoch ticks instead of blocking a
//! worker thread; only the `client` imports are async on the host (they do network I/O), the
//! lister, queue and log imports answer from memory and stay synchronous.

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "kube:controller/controller",
    imports: {
        "kube:controller/client": async,
    },
    exports: {
        default: async,
    },
});
