//! Blobs and manifests cached by digest: `<dir>/blobs/sha256/<hex>`, written only after their
//! bytes hash to the digest, so a file there is always what its name says.
//!
//! Why beside the compile cache: a module pulled once is compiled once (the compile cache is
//! keyed by the module's own digest), and a revision pinned by digest, or rolled back to, starts
//! from these files with no request to the registry.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::OciError;
use crate::reference::check_digest;

/// The cache directory.
#[derive(Debug, Clone)]
pub struct BlobStore {
    dir: PathBuf,
}

/// `sha256:<hex>` of `bytes`.
pub fn digest_of(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(71);
    s.push_str("sha256:");
    for b in Sha256::digest(bytes) {
        use std::fmt::Write as _;
        let _ = write!(s, "{b:02x}");
    }
    s
}

impl BlobStore {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        BlobStore { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the blob of `digest` is (or would be) kept.
    pub fn path(&self, digest: &str) -> Result<PathBuf, OciError> {
        let hex = check_digest(digest).map_err(OciError::Reference)?;
        Ok(self.dir.join("blobs").join("sha256").join(hex))
    }

    /// The cached blob's path, if it is there.
    pub fn get(&self, digest: &str) -> Option<PathBuf> {
        self.path(digest).ok().filter(|p| p.is_file())
    }

    /// Verifies `bytes` against `digest` and keeps them; `what` names them in the error.
    pub fn put(
        &self,
        reference: &str,
        what: &str,
        digest: &str,
        bytes: &[u8],
    ) -> Result<PathBuf, OciError> {
        let actual = digest_of(bytes);
        if actual != digest {
            return Err(OciError::DigestMismatch {
                reference: reference.to_owned(),
                what: what.to_owned(),
                expected: digest.to_owned(),
                actual,
            });
        }
        let path = self.path(digest)?;
        if path.is_file() {
            return Ok(path);
        }
        let parent = path.parent().unwrap_or(&self.dir);
        std::fs::create_dir_all(parent).map_err(OciError::io(format!(
            "creating the blob cache {}",
            parent.display()
        )))?;
        // Written to a file of its own, then renamed: a reader never sees half a blob.
        let tmp = parent.join(format!(
            ".{}.{}.tmp",
            path.file_name().and_then(|n| n.to_str()).unwrap_or("blob"),
            std::process::id()
        ));
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            OciError::Io {
                what: format!("writing {}", path.display()),
                source: e,
            }
        })?;
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_bytes_that_match_their_digest() {
        let dir = std::env::temp_dir().join(format!("kwh-oci-blobs-{}", std::process::id()));
        let store = BlobStore::new(&dir);
        let d = digest_of(b"hello");
        assert_eq!(
            d,
            "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert!(store.get(&d).is_none());
        let e = store
            .put("oci://r/x:1", "layer", &d, b"hellO")
            .expect_err("mismatch");
        assert!(matches!(e, OciError::DigestMismatch { .. }), "{e}");
        assert!(store.get(&d).is_none(), "nothing kept");
        let p = store
            .put("oci://r/x:1", "layer", &d, b"hello")
            .expect("kept");
        assert_eq!(store.get(&d), Some(p.clone()));
        assert_eq!(std::fs::read(p).expect("read"), b"hello");
        let _ = std::fs::remove_dir_all(dir);
    }
}
