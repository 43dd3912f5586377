//! Threads of lower CPU priority for the work of shadow revisions.
//!
//! A shadow does as much work per event as the live revision it shadows, and more: each of its
//! writes is a dry run sent to the API server and compared. That work must not make the live
//! revision slower. On the live runtime's threads its tasks would take turns with the live
//! ones; on threads of their own at the lowest priority (nice +19 from the process's, on
//! Linux), the kernel runs them on what the live work leaves idle and preempts them as soon as
//! a live thread wakes. One thread: however many shadows run, together they take at most one
//! core. A shadow is best effort: on a host whose cores are saturated it falls behind (its
//! queue folds repeated keys), and the live revisions do not.
//!
//! A shadow's handler calls, reconciles and dry runs run here (their tasks are spawned on
//! [`Background::handle`]), on connections of their own
//! ([`Client::with_own_connections`](kwh_client::Client::with_own_connections)).

use tokio::runtime::{Handle, Runtime};

/// How much the background threads' `nice` value is raised: to the lowest priority, whose
/// CPU share beside a live thread wanting the same core is about 1.5 % (the kernel's weights
/// 15 and 1024). Measured: at +10 the live revision's p99 still moved by up to 14 % with a
/// writing shadow beside it; at +19, 1–8 % (docs/benchmarks-history.md, "Shadow runs").
pub const NICE: i32 = 19;

/// A tokio runtime on low-priority threads; shut down (without waiting) when dropped.
pub struct Background {
    rt: Option<Runtime>,
}

impl Background {
    /// Starts `threads` worker threads named `name`, each lowering its own priority first.
    pub fn start(name: &str, threads: usize) -> std::io::Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name(name)
            .on_thread_start(lower_priority)
            .enable_all()
            .build()?;
        Ok(Background { rt: Some(rt) })
    }

    /// Where to spawn the background work.
    pub fn handle(&self) -> Handle {
        match &self.rt {
            Some(rt) => rt.handle().clone(),
            // Only `drop` takes the runtime out.
            None => Handle::current(),
        }
    }
}

impl Drop for Background {
    /// Dropping a runtime waits for its blocking threads, which an async context may not do:
    /// the runtime is let go of instead, its tasks cancelled.
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// Lowers the calling thread's priority by [`NICE`] from the process's (at most to 19; Linux:
/// `setpriority` on a thread id is per thread). A refusal only leaves the thread at the
/// process's priority; it is logged, not fatal.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        let nice = (current_nice() + NICE).min(19);
        // SAFETY: a plain system call on the calling thread's own id.
        let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid(), nice) };
        if r != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "background thread keeps the process's priority");
        }
    }
}

#[cfg(target_os = "linux")]
fn tid() -> libc::id_t {
    // SAFETY: gettid takes no argument and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as libc::id_t }
}

/// The calling thread's nice value (-1 is also what a failure returns; the thread's own id
/// cannot fail).
#[cfg(target_os = "linux")]
fn current_nice() -> i32 {
    // SAFETY: a plain system call on the calling thread's own id.
    unsafe { libc::getpriority(libc::PRIO_PROCESS, tid()) }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn background_threads_run_at_a_lower_priority_than_the_callers() {
        let ours = current_nice();
        let bg = Background::start("kwh-test-bg", 1).expect("runtime");
        let theirs = bg
            .handle()
            .spawn(async { current_nice() })
            .await
            .expect("task");
        assert_eq!(theirs, (ours + NICE).min(19), "ours {ours}");
        assert_eq!(current_nice(), ours, "the caller's priority is untouched");
        drop(bg);
    }
}
