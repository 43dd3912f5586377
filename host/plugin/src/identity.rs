//! The host's identity: who wrote an Event (`reportingInstance`), and later who holds a Lease.
//!
//! Replicas of one Deployment share their image and configuration, so the identity is the
//! hostname (the pod's name in a cluster) plus a random suffix, as client-go's leader election
//! examples build theirs: two processes on one machine, or a restarted pod that reuses its
//! name, never pass for each other.

use rand::Rng;

/// `<hostname>_<8 hex digits>`, at most 128 bytes (an Event's `reportingInstance` limit).
pub fn default_identity() -> String {
    let suffix: u32 = rand::thread_rng().gen();
    let mut host = hostname();
    // 128 bytes in all: the suffix takes 9. `truncate` needs a character boundary.
    let mut end = host.len().min(119);
    while !host.is_char_boundary(end) {
        end -= 1;
    }
    host.truncate(end);
    format!("{host}_{suffix:08x}")
}

/// The hostname as the kernel reports it, `HOSTNAME` when that cannot be read, else `host`.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "host".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_differ_and_fit_the_event_limit() {
        let (a, b) = (default_identity(), default_identity());
        assert_ne!(a, b, "the random suffix tells two processes apart");
        assert!(a.len() <= 128, "{a}");
        let (host, suffix) = a.rsplit_once('_').expect("host_suffix");
        assert!(!host.is_empty());
        assert_eq!(suffix.len(), 8);
        assert!(suffix.chars().all(|c| c.is_ascii_hexdigit()));
    }
}
