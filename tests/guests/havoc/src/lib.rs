//! Misbehaves in ways no test of a real controller would, for the hostile-guest tests and the
//! reliability table. Each ConfigMap `X` (not `X-…` reports) is enqueued; its reconcile does
//! what the ConfigMap's `data.mode` says:
//! - `recurse`: recursion without end (the host's stack limit must stop it);
//! - `bigreturn`: returns an error message of 24 MiB (within its memory cap);
//! - `storm`: enqueues 10,000,000 distinct keys `storm/<i>` (the queue's bound must hold);
//! - anything else: nothing.

use kube_guest::{Action, Api, Controller, Error, Manifest, Result, Watch};

struct Havoc;

/// Recursion the optimiser cannot turn into a loop: each frame keeps a value past the call.
#[inline(never)]
#[allow(unconditional_recursion)] // on purpose: the host must stop it
fn deeper(n: u64) -> u64 {
    let keep = std::hint::black_box([n; 8]);
    deeper(n + 1).wrapping_add(keep[n as usize % 8])
}

impl Controller for Havoc {
    type Config = ();

    fn manifest() -> Manifest {
        Manifest::new("havoc").watch(Watch::new("v1", "ConfigMap"))
    }

    fn reconcile(key: &str) -> Result<Action> {
        if key.starts_with("storm/") {
            return Ok(Action::Done);
        }
        let (ns, name) = kube_guest::split_key(key);
        let Some(cm) = Api::namespaced("v1", "ConfigMap", ns.unwrap_or("default")).get(name)?
        else {
            return Ok(Action::Done);
        };
        let mode = cm
            .value()
            .pointer("/data/mode")
            .and_then(|m| m.as_str())
            .unwrap_or("")
            .to_string();
        match mode.as_str() {
            "recurse" => {
                let n = deeper(std::hint::black_box(0));
                Err(Error::from(format!("recursion returned {n}")))
            }
            "bigreturn" => Err(Error::from("z".repeat(24 << 20))),
            "storm" => {
                for i in 0..10_000_000u32 {
                    kube_guest::enqueue(&format!("storm/{i}"));
                }
                Ok(Action::Done)
            }
            _ => Ok(Action::Done),
        }
    }
}

kube_guest::export_controller!(Havoc);
