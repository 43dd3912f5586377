//! The resourceVersions this client accepts from a server, checked where they arrive.
//!
//! Why check what clients treat as opaque (spec 1.7, 6.8: RVs are only compared for equality):
//! the reflector sends back every RV it keeps (`?resourceVersion=` of the next list or watch).
//! kube-apiserver writes etcd revisions, decimal `uint64`s, and parses every RV a client sends
//! back as one, refusing anything else (a watch at `notanumber` is a 500, see the captured
//! samples). A bookmark at `zzz` once adopted left an informer relisting at `zzz` forever while
//! it reported ready, and a 1 MiB RV failed every request locally ("uri too long"). client-go
//! keeps RVs opaque and would loop the same way; here an RV that could never be sent back is
//! refused where it arrives, so the last good one stays in use.

use crate::clip::clip;

/// The longest decimal `uint64` (`18446744073709551615`).
const MAX_DIGITS: usize = 20;

/// A resourceVersion that is not an unsigned decimal 64-bit integer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("resourceVersion {} is not an unsigned 64-bit decimal integer", .0)]
pub struct InvalidResourceVersion(String);

/// `Ok` for an RV the API server could take back: empty (absent), or a decimal `uint64`.
pub fn check(rv: &str) -> Result<(), InvalidResourceVersion> {
    let digits = rv.len() <= MAX_DIGITS && rv.bytes().all(|c| c.is_ascii_digit());
    if rv.is_empty() || (digits && rv.parse::<u64>().is_ok()) {
        Ok(())
    } else {
        Err(InvalidResourceVersion(format!("{:?}", clip(rv))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_uint64s_and_absence_pass_anything_else_is_refused_briefly() {
        for ok in ["", "0", "50478", "007", "18446744073709551615"] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        for bad in [
            "zzz",
            "-1",
            "+1",
            " 1",
            "1.0",
            "1e3",
            "18446744073709551616",
            "١",
        ] {
            assert!(check(bad).is_err(), "{bad}");
        }
        let huge = "9".repeat(1 << 20);
        let e = check(&huge).unwrap_err().to_string();
        assert!(
            e.len() < 400,
            "the error quotes the RV briefly: {} bytes",
            e.len()
        );
    }
}
