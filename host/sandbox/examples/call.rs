//! Calls the export `run: func() -> string` of the component named on the command line, in a
//! store with nothing ambient, 16 MiB of memory and a one-second deadline, and says how the
//! call failed if it did (`cargo run -p kwh-sandbox --example call -- guest.wasm`).

use std::time::Duration;

use kwh_sandbox::{Engine, EngineConfig, Instance, InstanceStats, StoreLimits};
use wasmtime::component::TypedFunc;
use wasmtime_wasi::WasiCtx;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: call COMPONENT.wasm")?;
    let engine = Engine::new(EngineConfig {
        cache_dir: None,
        pooling: false,
        ..EngineConfig::default()
    })?;
    let bytes = std::fs::read(&path)?;
    kwh_sandbox::component::check_header(&bytes)?;
    let (component, _) = engine.component_off_thread(bytes.into()).await?;
    // WASI only: a guest importing anything else fails here, naming the import.
    let pre = engine.linker::<()>()?.instantiate_pre(&component)?;
    let limits = StoreLimits {
        memory_bytes: 16 << 20,
        table_elements: 10_000,
    };
    let stats = InstanceStats::default();
    let deadline = Duration::from_secs(1);
    let store = engine.store(&limits, WasiCtx::builder(), ());
    let mut inst = Instance::new(&engine, &pre, store, deadline, &stats).await?;
    let exports = *inst.component();
    let run: TypedFunc<(), (String,)> = exports.get_typed_func(inst.store_mut(), "run")?;
    inst.arm(deadline);
    let (store, engine) = inst.parts();
    match engine.watch(run.call_async(store, ())).await {
        Ok((out,)) => println!("{out}"),
        Err(e) => {
            let fault = inst.fault(&e, deadline);
            stats.count(&fault);
            eprintln!("{path}: {fault}");
            inst.discard();
        }
    }
    Ok(())
}
