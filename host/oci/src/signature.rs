//! Cosign signatures by key: a module may be required to carry one, made by a given ECDSA P-256
//! public key, before it runs.
//!
//! What cosign writes, and so what is read here: beside the signed manifest, in the same
//! repository, a manifest tagged `sha256-<hex>.sig` whose layers (media type
//! `application/vnd.dev.cosign.simplesigning.v1+json`) are "simple signing" payloads naming the
//! signed manifest's digest, each with its ECDSA signature (ASN.1 DER, base64) in the annotation
//! `dev.cosignproject.cosign/signature`. A signature counts when it verifies over its payload's
//! bytes with one of the keys and the payload names the manifest being pulled (a signature copied
//! from another image does not). Transparency-log entries (Rekor) are not checked: this is
//! `cosign verify --key … --insecure-ignore-tlog`'s rule.
//!
//! Why `ring` and not the `sigstore` crate: `ring` is already the TLS stack's crypto, and key
//! verification is one call on it; `sigstore` brings its own TLS, HTTP and crypto trees (keyless
//! signing, Fulcio, Rekor, TUF) that a key-based check does not use.

use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{
    EcdsaKeyPair, KeyPair, UnparsedPublicKey, ECDSA_P256_SHA256_ASN1,
    ECDSA_P256_SHA256_ASN1_SIGNING,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{PrivatePkcs8KeyDer, SubjectPublicKeyInfoDer};
use serde_json::{json, Value};

use crate::error::OciError;

pub const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";

/// The DER prefix of an ECDSA P-256 SubjectPublicKeyInfo (id-ecPublicKey, prime256v1), before
/// the 65-byte uncompressed point.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// A public key signatures are checked against.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey {
    /// The uncompressed point (`04 || X || Y`).
    point: Vec<u8>,
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({})", self.fingerprint())
    }
}

impl PublicKey {
    /// A `-----BEGIN PUBLIC KEY-----` PEM of an ECDSA P-256 key (what `cosign generate-key-pair`
    /// writes to `cosign.pub`).
    pub fn from_pem(pem: &str) -> Result<Self, OciError> {
        let bad = |why: &str| OciError::Signature(format!("public key: {why}"));
        let der = SubjectPublicKeyInfoDer::from_pem_slice(pem.as_bytes())
            .map_err(|e| bad(&format!("no PUBLIC KEY in PEM data ({e})")))?;
        let bytes: &[u8] = der.as_ref();
        match bytes.strip_prefix(&P256_SPKI_PREFIX[..]) {
            Some(point) if point.len() == 65 && point[0] == 4 => Ok(PublicKey {
                point: point.to_vec(),
            }),
            _ => Err(bad("not an ECDSA P-256 key (the only kind cosign makes)")),
        }
    }

    /// The first 8 bytes of the key's SHA-256, in hex: how errors and logs name it.
    pub fn fingerprint(&self) -> String {
        let d = crate::blobs::digest_of(&self.point);
        d["sha256:".len().."sha256:".len() + 16].to_owned()
    }

    fn verifies(&self, payload: &[u8], signature: &[u8]) -> bool {
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, &self.point)
            .verify(payload, signature)
            .is_ok()
    }
}

/// A private key signatures are made with (`host push --sign-key`).
pub struct SigningKey {
    pair: EcdsaKeyPair,
}

impl SigningKey {
    /// A `-----BEGIN PRIVATE KEY-----` PEM (PKCS#8, unencrypted) of an ECDSA P-256 key.
    pub fn from_pem(pem: &str) -> Result<Self, OciError> {
        let der = PrivatePkcs8KeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| {
            OciError::Signature(format!(
                "signing key: no unencrypted PKCS#8 PRIVATE KEY in PEM data ({e})"
            ))
        })?;
        let pair = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_ASN1_SIGNING,
            der.secret_pkcs8_der(),
            &SystemRandom::new(),
        )
        .map_err(|e| OciError::Signature(format!("signing key: not an ECDSA P-256 key ({e})")))?;
        Ok(SigningKey { pair })
    }

    pub fn public_key(&self) -> PublicKey {
        PublicKey {
            point: self.pair.public_key().as_ref().to_vec(),
        }
    }

    /// The ASN.1 DER signature of `payload`.
    pub fn sign(&self, payload: &[u8]) -> Result<Vec<u8>, OciError> {
        self.pair
            .sign(&SystemRandom::new(), payload)
            .map(|s| s.as_ref().to_vec())
            .map_err(|_| OciError::Signature("signing failed".into()))
    }
}

/// The tag cosign keeps the signatures of manifest `digest` under.
pub fn signature_tag(digest: &str) -> String {
    digest.replacen(':', "-", 1) + ".sig"
}

/// The simple-signing payload for manifest `digest` of repository `docker_reference`
/// (`registry/repository`).
pub fn payload(docker_reference: &str, digest: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "critical": {
            "identity": {"docker-reference": docker_reference},
            "image": {"docker-manifest-digest": digest},
            "type": "cosign container image signature",
        },
        "optional": null,
    }))
    .unwrap_or_default()
}

/// Whether `payload` (a layer's bytes) with `signature_b64` is a signature of manifest `digest`
/// by one of `keys`; the reason when not.
pub fn check(
    payload: &[u8],
    signature_b64: &str,
    digest: &str,
    keys: &[PublicKey],
) -> Result<(), String> {
    let signature = base64::engine::general_purpose::STANDARD
        .decode(signature_b64.trim())
        .map_err(|_| "a signature annotation that is not base64".to_owned())?;
    let Some(key) = keys.iter().find(|k| k.verifies(payload, &signature)) else {
        return Err("a signature by none of the keys".into());
    };
    let v: Value = serde_json::from_slice(payload)
        .map_err(|e| format!("a signed payload that is not JSON ({e})"))?;
    let signed = v
        .pointer("/critical/image/docker-manifest-digest")
        .and_then(Value::as_str)
        .unwrap_or("");
    if signed != digest {
        return Err(format!(
            "a signature by key {} of another manifest ({signed})",
            key.fingerprint()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SigningKey {
        let rng = SystemRandom::new();
        let pkcs8 =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).expect("generate");
        let pem = format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            base64::engine::general_purpose::STANDARD.encode(pkcs8.as_ref())
        );
        SigningKey::from_pem(&pem).expect("signing key")
    }

    fn public_pem(k: &PublicKey) -> String {
        let mut der = P256_SPKI_PREFIX.to_vec();
        der.extend_from_slice(&k.point);
        format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
            base64::engine::general_purpose::STANDARD.encode(der)
        )
    }

    #[test]
    fn a_signature_counts_for_its_key_and_its_manifest_only() {
        let (a, b) = (key(), key());
        let a_pub = PublicKey::from_pem(&public_pem(&a.public_key())).expect("parses");
        assert_eq!(a_pub, a.public_key());
        let digest = "sha256:".to_owned() + &"ab".repeat(32);
        let p = payload("r.io/team/ctl", &digest);
        let sig = base64::engine::general_purpose::STANDARD.encode(a.sign(&p).expect("sign"));
        assert_eq!(
            check(&p, &sig, &digest, std::slice::from_ref(&a_pub)),
            Ok(())
        );
        assert_eq!(
            check(&p, &sig, &digest, &[b.public_key()]),
            Err("a signature by none of the keys".into())
        );
        let other = "sha256:".to_owned() + &"cd".repeat(32);
        let e = check(&p, &sig, &other, std::slice::from_ref(&a_pub)).expect_err("other manifest");
        assert!(e.contains("of another manifest"), "{e}");
        let mut tampered = p.clone();
        tampered[5] ^= 1;
        assert!(check(&tampered, &sig, &digest, &[a_pub]).is_err());
        assert_eq!(
            signature_tag(&digest),
            format!("sha256-{}.sig", "ab".repeat(32))
        );
    }

    #[test]
    fn keys_that_are_not_p256_are_refused_with_the_reason() {
        let e = PublicKey::from_pem("nothing").expect_err("no PEM");
        assert!(e.to_string().contains("no PUBLIC KEY"), "{e}");
        // An Ed25519 SubjectPublicKeyInfo.
        let mut der = vec![
            0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
        ];
        der.extend_from_slice(&[7; 32]);
        let pem = format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
            base64::engine::general_purpose::STANDARD.encode(der)
        );
        let e = PublicKey::from_pem(&pem).expect_err("not P-256");
        assert!(e.to_string().contains("not an ECDSA P-256 key"), "{e}");
    }
}
