//! Logs far more than a controller should, for the tests of the host's log budget: each
//! reconcile of a ConfigMap named `chatter-*` logs 20,000 lines through the `log` import
//! (`chatter line <i>`), then one message of 1 MiB, then prints a 1 MiB line on stdout.

use kube_guest::{log, Action, Controller, Level, Manifest, Result, Watch};

struct Chatter;

impl Controller for Chatter {
    type Config = ();

    fn manifest() -> Manifest {
        Manifest::new("chatter").watch(Watch::new("v1", "ConfigMap"))
    }

    fn reconcile(key: &str) -> Result<Action> {
        if !key.contains("/chatter-") {
            return Ok(Action::Done);
        }
        for i in 0..20_000 {
            log::log(Level::Info, &format!("chatter line {i}"));
        }
        log::log(Level::Warn, &"x".repeat(1 << 20));
        println!("{}", "y".repeat(1 << 20));
        Ok(Action::Done)
    }
}

kube_guest::export_controller!(Chatter);
