//! SIGINT/SIGTERM handling for the binaries.
//!
//! The handlers are installed when [`ShutdownSignal::install`] returns, not when the first
//! `.await` happens: a process that prints "listening" and only then starts waiting would die
//! from the default signal action if a supervisor (or a test) signals it in between.

use std::io;

/// Both stop signals, listened for from construction on.
pub struct ShutdownSignal {
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl ShutdownSignal {
    /// Installs the handlers. Needs a tokio runtime with I/O enabled.
    pub fn install() -> io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(ShutdownSignal {
                int: signal(SignalKind::interrupt())?,
                term: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(ShutdownSignal {})
        }
    }

    /// Waits for SIGINT or SIGTERM (Ctrl-C elsewhere).
    pub async fn recv(&mut self) {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.int.recv() => {}
                _ = self.term.recv() => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
