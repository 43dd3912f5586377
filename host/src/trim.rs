//! Giving memory the host freed back to the system.
//!
//! glibc's allocator keeps the pages a burst freed: after a backlog (an unpaced stream of
//! updates queued in the informers and listeners, old object versions held until delivered)
//! a host's resident memory stays at that high-water mark, though nothing holds it. In the
//! chaos soak every standby ended 13–20 % above its level after the first sync, flat after its
//! first ~100,000 updates. So a thread of its own asks glibc every [`TRIM_EVERY`] to return
//! free pages (`malloc_trim`), as Go's scavenger does for Go programs: what `ps` and a
//! container's memory limit see is then what the host holds. Elsewhere (musl, other systems)
//! nothing is done.

use std::time::Duration;

/// How often free pages are given back.
pub const TRIM_EVERY: Duration = Duration::from_secs(10);

/// Starts the trimming thread (once, for the life of the process).
pub fn start() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let spawned = std::thread::Builder::new()
            .name("malloc-trim".into())
            .spawn(|| loop {
                std::thread::sleep(TRIM_EVERY);
                // SAFETY: malloc_trim takes no pointers; it only returns free pages of the
                // allocator's arenas to the system and may be called from any thread.
                unsafe {
                    libc::malloc_trim(0);
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the thread that returns freed memory; resident memory keeps its high-water mark");
        }
    }
}
