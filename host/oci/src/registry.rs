//! The distribution API, as much of it as pulling and pushing one component takes: manifests,
//! blobs, monolithic uploads, and the Bearer and Basic challenges in front of them.
//!
//! Why by hand rather than `oci-client`: that crate brings a second HTTP client (reqwest), a
//! second TLS crypto provider (aws-lc, a C build), JWT and builder macros, 44 crates in all
//! beside ours; the requests below are a dozen, over the connection code the host already has.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, LOCATION, WWW_AUTHENTICATE};
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use kwh_client::WebClient;
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::blobs::{digest_of, BlobStore};
use crate::credentials::{Credential, Credentials};
use crate::error::OciError;
use crate::reference::{check_digest, Reference};
use crate::signature::{self, PublicKey, SigningKey};

pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// The CNCF Wasm artifact layout (what `wkg oci push` writes).
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
pub const WASM_LAYER: &str = "application/wasm";
/// The older layout of `wasm-to-oci`.
pub const LEGACY_CONFIG: &str = "application/vnd.wasm.config.v1+json";
pub const LEGACY_LAYER: &str = "application/vnd.wasm.content.layer.v1+wasm";

/// The largest manifest read (a manifest is a few hundred bytes; an index of many platforms a
/// few kilobytes).
const MAX_MANIFEST: usize = 4 << 20;
/// The largest module pulled (the CPython component of the examples is 18 MB).
pub const MAX_MODULE: usize = 512 << 20;
/// Redirects followed for one blob (registries send blob GETs to a storage host).
const MAX_REDIRECTS: usize = 5;

/// Which layout a push writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Config `application/vnd.wasm.config.v0+json`, one `application/wasm` layer.
    Cncf,
    /// `wasm-to-oci`'s: config `…wasm.config.v1+json`, layer `…wasm.content.layer.v1+wasm`.
    Legacy,
}

/// A module pulled into the blob cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pulled {
    /// The reference pinned to the manifest's digest.
    pub pinned: Reference,
    pub manifest_digest: String,
    /// The layer's digest: the module's own bytes' digest, as the compile cache keys it.
    pub layer_digest: String,
    pub layer_media_type: String,
    /// The module's file in the blob cache.
    pub path: std::path::PathBuf,
    /// Whether anything was fetched from the registry (false: everything came from the cache).
    pub fetched: bool,
}

/// Talks to registries; keeps their tokens and the digests tags resolved to.
pub struct Registry {
    /// Made at the first request: loading the system's roots costs milliseconds that a module
    /// already in the cache (a digest reference) need not pay.
    web: std::sync::OnceLock<WebClient>,
    store: BlobStore,
    credentials: Credentials,
    /// `(registry, scope)` → `Authorization` value, from the last challenge answered.
    tokens: Mutex<HashMap<(String, String), String>>,
    /// Tag references → the manifest digest they resolved to, and when.
    tags: Mutex<HashMap<String, (String, Instant)>>,
    /// Manifests whose signature was verified, with the keys it was verified against (a
    /// rollback to one needs no request).
    verified: Mutex<std::collections::HashSet<(String, String)>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    media_type: String,
    digest: String,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    platform: Option<Platform>,
    #[serde(default)]
    annotations: HashMap<String, String>,
}

#[derive(Deserialize)]
struct Platform {
    #[serde(default)]
    architecture: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    config: Option<Descriptor>,
    #[serde(default)]
    layers: Vec<Descriptor>,
    #[serde(default)]
    manifests: Vec<Descriptor>,
}

/// One parsed `WWW-Authenticate` challenge.
#[derive(Debug, PartialEq, Eq)]
struct Challenge {
    scheme: String,
    params: HashMap<String, String>,
}

fn parse_challenge(v: &str) -> Option<Challenge> {
    let v = v.trim();
    let (scheme, rest) = v.split_once(' ').unwrap_or((v, ""));
    let mut params = HashMap::new();
    let mut rest = rest.trim();
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        let key = key.trim().to_ascii_lowercase();
        let after = after.trim_start();
        let (value, tail) = if let Some(q) = after.strip_prefix('"') {
            let end = q.find('"')?;
            (&q[..end], &q[end + 1..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        params.insert(key, value.to_owned());
        rest = tail.trim_start().trim_start_matches(',').trim_start();
    }
    Some(Challenge {
        scheme: scheme.to_ascii_lowercase(),
        params,
    })
}

fn basic(username: &str, password: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"))
    )
}

impl Registry {
    /// `store` keeps pulled blobs; `credentials` are offered where a registry asks for them.
    pub fn new(store: BlobStore, credentials: Credentials) -> Result<Self, OciError> {
        Ok(Registry {
            web: std::sync::OnceLock::new(),
            store,
            credentials,
            tokens: Mutex::new(HashMap::new()),
            tags: Mutex::new(HashMap::new()),
            verified: Mutex::new(std::collections::HashSet::new()),
        })
    }

    pub fn store(&self) -> &BlobStore {
        &self.store
    }

    fn web(&self, r: &Reference) -> Result<&WebClient, OciError> {
        if let Some(w) = self.web.get() {
            return Ok(w);
        }
        let w = WebClient::new(None, Duration::from_secs(60)).map_err(|e| OciError::Http {
            reference: r.to_string(),
            source: e,
        })?;
        Ok(self.web.get_or_init(|| w))
    }

    /// Sends one request to `r`'s registry, answering one authentication challenge.
    #[allow(clippy::too_many_arguments)]
    async fn request(
        &self,
        r: &Reference,
        creds: &Credentials,
        method: Method,
        url: &str,
        headers: &[(http::HeaderName, &str)],
        body: Bytes,
        push: bool,
    ) -> Result<http::Response<hyper::body::Incoming>, OciError> {
        let scope = format!(
            "repository:{}:{}",
            r.repository,
            if push { "pull,push" } else { "pull" }
        );
        let token_key = (r.registry.clone(), scope.clone());
        let http_err = |e| OciError::Http {
            reference: r.to_string(),
            source: e,
        };
        for attempt in 0..2 {
            let mut req = Request::builder().method(method.clone()).uri(url);
            for (k, v) in headers {
                req = req.header(k, *v);
            }
            if let Some(auth) = self.tokens.lock().get(&token_key) {
                req = req.header(AUTHORIZATION, auth.as_str());
            }
            let req = req
                .body(Full::new(body.clone()))
                .map_err(|e| OciError::Reference(format!("{r}: {e}")))?;
            let resp = self.web(r)?.send(req).await.map_err(http_err)?;
            if resp.status() != StatusCode::UNAUTHORIZED || attempt == 1 {
                return Ok(resp);
            }
            let challenge = resp
                .headers()
                .get(WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_challenge)
                .ok_or_else(|| OciError::Unauthorized {
                    reference: r.to_string(),
                    message: "401 without a challenge the host understands".into(),
                })?;
            let auth = self.answer(r, creds, &challenge, &scope).await?;
            self.tokens.lock().insert(token_key.clone(), auth);
        }
        unreachable!("the loop returns on its second attempt")
    }

    /// The `Authorization` value answering `challenge`: Basic credentials, or a Bearer token
    /// from the token service (anonymous when there are no credentials for the registry).
    async fn answer(
        &self,
        r: &Reference,
        creds: &Credentials,
        challenge: &Challenge,
        scope: &str,
    ) -> Result<String, OciError> {
        let cred = creds
            .get(&r.registry)
            .or_else(|| self.credentials.get(&r.registry));
        let unauthorized = |message: String| OciError::Unauthorized {
            reference: r.to_string(),
            message,
        };
        match challenge.scheme.as_str() {
            "basic" => match cred {
                Some(Credential::Basic { username, password }) => Ok(basic(username, password)),
                _ => Err(unauthorized(
                    "the registry asks for a username and password, and none is configured for it"
                        .into(),
                )),
            },
            "bearer" => {
                let realm = challenge
                    .params
                    .get("realm")
                    .ok_or_else(|| unauthorized("a Bearer challenge without a realm".into()))?;
                let service = challenge.params.get("service").cloned().unwrap_or_default();
                let scope = challenge
                    .params
                    .get("scope")
                    .cloned()
                    .unwrap_or_else(|| scope.to_owned());
                let enc = |s: &str| {
                    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC)
                        .to_string()
                };
                let (method, url, body, ctype, auth) = match cred {
                    Some(Credential::IdentityToken(t)) => (
                        Method::POST,
                        realm.clone(),
                        format!(
                            "grant_type=refresh_token&refresh_token={}&service={}&scope={}&client_id=kube-wasm-host",
                            enc(t),
                            enc(&service),
                            enc(&scope)
                        ),
                        Some("application/x-www-form-urlencoded"),
                        None,
                    ),
                    other => (
                        Method::GET,
                        format!(
                            "{realm}{}service={}&scope={}",
                            if realm.contains('?') { '&' } else { '?' },
                            enc(&service),
                            enc(&scope)
                        ),
                        String::new(),
                        None,
                        match other {
                            Some(Credential::Basic { username, password }) => {
                                Some(basic(username, password))
                            }
                            _ => None,
                        },
                    ),
                };
                let mut req = Request::builder().method(method).uri(&url);
                if let Some(c) = ctype {
                    req = req.header(CONTENT_TYPE, c);
                }
                if let Some(a) = &auth {
                    req = req.header(AUTHORIZATION, a);
                }
                let req = req
                    .body(Full::new(Bytes::from(body)))
                    .map_err(|e| unauthorized(format!("token request: {e}")))?;
                let resp = self.web(r)?.send(req).await.map_err(|e| OciError::Http {
                    reference: r.to_string(),
                    source: e,
                })?;
                let status = resp.status();
                let body = self
                    .web(r)?
                    .body(resp, 1 << 20)
                    .await
                    .map_err(|e| OciError::Http {
                        reference: r.to_string(),
                        source: e,
                    })?;
                if !status.is_success() {
                    return Err(unauthorized(format!(
                        "the token service {realm} answered {status}: {}",
                        String::from_utf8_lossy(&body[..body.len().min(200)])
                    )));
                }
                let v: Value = serde_json::from_slice(&body)
                    .map_err(|e| unauthorized(format!("the token service's answer: {e}")))?;
                let token = v
                    .get("token")
                    .or_else(|| v.get("access_token"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| unauthorized("the token service sent no token".into()))?;
                Ok(format!("Bearer {token}"))
            }
            other => Err(unauthorized(format!(
                "unsupported authentication scheme {other:?}"
            ))),
        }
    }

    /// A non-success answer as an error naming the reference.
    async fn failure(
        &self,
        r: &Reference,
        what: &str,
        resp: http::Response<hyper::body::Incoming>,
    ) -> OciError {
        let status = resp.status();
        let body = match self.web(r) {
            Ok(w) => w.body(resp, 64 << 10).await.unwrap_or_default(),
            Err(_) => Bytes::new(),
        };
        let message = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| {
                v.pointer("/errors/0/message")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned());
        match status {
            StatusCode::NOT_FOUND => OciError::NotFound {
                reference: r.to_string(),
                what: what.to_owned(),
            },
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => OciError::Unauthorized {
                reference: r.to_string(),
                message: format!("{status} for {what}: {message}"),
            },
            s => OciError::Registry {
                reference: r.to_string(),
                status: s.as_u16(),
                message: format!("{what}: {message}"),
            },
        }
    }

    /// The manifest of `r` at `reference` (a tag or digest): its digest and bytes, from the
    /// cache when asked by digest.
    async fn manifest(
        &self,
        r: &Reference,
        creds: &Credentials,
        at: &str,
    ) -> Result<(String, Bytes, bool), OciError> {
        if check_digest(at).is_ok() {
            if let Some(p) = self.store.get(at) {
                let b =
                    std::fs::read(&p).map_err(OciError::io(format!("reading {}", p.display())))?;
                return Ok((at.to_owned(), Bytes::from(b), false));
            }
        }
        let url = format!("{}/v2/{}/manifests/{at}", r.base_url(), r.repository);
        let accept = [OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_LIST].join(", ");
        let resp = self
            .request(
                r,
                creds,
                Method::GET,
                &url,
                &[(ACCEPT, &accept)],
                Bytes::new(),
                false,
            )
            .await?;
        if !resp.status().is_success() {
            return Err(self.failure(r, &format!("manifest {at}"), resp).await);
        }
        let body = self
            .web(r)?
            .body(resp, MAX_MANIFEST)
            .await
            .map_err(|e| OciError::Http {
                reference: r.to_string(),
                source: e,
            })?;
        let digest = if check_digest(at).is_ok() {
            at.to_owned()
        } else {
            digest_of(&body)
        };
        self.store
            .put(&r.to_string(), "the manifest", &digest, &body)?;
        Ok((digest, body, true))
    }

    /// The digest `r`'s tag names now, asking the registry only when the last answer is older
    /// than `max_age` (a digest reference is its own answer).
    pub async fn resolve(
        &self,
        r: &Reference,
        creds: &Credentials,
        max_age: Duration,
    ) -> Result<String, OciError> {
        if let Some(d) = &r.digest {
            return Ok(d.clone());
        }
        let key = r.to_string();
        if let Some((d, at)) = self.tags.lock().get(&key) {
            if at.elapsed() < max_age {
                return Ok(d.clone());
            }
        }
        let tag = r.manifest_ref().to_owned();
        let (digest, _, _) = self.manifest(r, creds, &tag).await?;
        self.tags
            .lock()
            .insert(key, (digest.clone(), Instant::now()));
        Ok(digest)
    }

    /// Pulls `r`'s module into the blob cache: the tag resolved (at most `max_age` old), the
    /// manifest and the layer verified against their digests, nothing fetched that is cached.
    pub async fn pull(
        &self,
        r: &Reference,
        creds: &Credentials,
        max_age: Duration,
    ) -> Result<Pulled, OciError> {
        let mut digest = self.resolve(r, creds, max_age).await?;
        let mut fetched = false;
        // An index (several platforms) is followed once to its Wasm manifest.
        for _ in 0..2 {
            let (d, bytes, got) = self.manifest(r, creds, &digest).await?;
            fetched |= got;
            let m: Manifest = serde_json::from_slice(&bytes).map_err(|e| OciError::Layout {
                reference: r.to_string(),
                message: format!("the manifest is not JSON: {e}"),
            })?;
            if !m.manifests.is_empty() {
                let pick = m
                    .manifests
                    .iter()
                    .find(|x| {
                        x.platform
                            .as_ref()
                            .is_some_and(|p| p.architecture == "wasm")
                    })
                    .or_else(|| (m.manifests.len() == 1).then(|| &m.manifests[0]))
                    .ok_or_else(|| OciError::Layout {
                        reference: r.to_string(),
                        message: "an index without a manifest for architecture wasm".into(),
                    })?;
                digest = pick.digest.clone();
                continue;
            }
            let layers: Vec<&Descriptor> = m
                .layers
                .iter()
                .filter(|l| l.media_type == WASM_LAYER || l.media_type == LEGACY_LAYER)
                .collect();
            let [layer] = layers[..] else {
                return Err(OciError::Layout {
                    reference: r.to_string(),
                    message: format!(
                        "expected one {WASM_LAYER} (or {LEGACY_LAYER}) layer, found {} among {:?} (config {:?}, manifest {:?})",
                        layers.len(),
                        m.layers.iter().map(|l| l.media_type.as_str()).collect::<Vec<_>>(),
                        m.config.as_ref().map(|c| c.media_type.as_str()),
                        m.media_type
                    ),
                });
            };
            check_digest(&layer.digest).map_err(|e| OciError::Layout {
                reference: r.to_string(),
                message: e,
            })?;
            let path = match self.store.get(&layer.digest) {
                Some(p) => p,
                None => {
                    fetched = true;
                    if layer.size > MAX_MODULE as u64 {
                        return Err(OciError::Layout {
                            reference: r.to_string(),
                            message: format!(
                                "the module is {} bytes, above the {MAX_MODULE} accepted",
                                layer.size
                            ),
                        });
                    }
                    let bytes = self.blob(r, creds, &layer.digest).await?;
                    self.store
                        .put(&r.to_string(), "the module layer", &layer.digest, &bytes)?
                }
            };
            return Ok(Pulled {
                pinned: r.at(&d),
                manifest_digest: d,
                layer_digest: layer.digest.clone(),
                layer_media_type: layer.media_type.clone(),
                path,
                fetched,
            });
        }
        Err(OciError::Layout {
            reference: r.to_string(),
            message: "an index pointing at another index".into(),
        })
    }

    /// One blob's bytes, following the registry's redirects (without its credentials when the
    /// redirect leaves its host).
    async fn blob(
        &self,
        r: &Reference,
        creds: &Credentials,
        digest: &str,
    ) -> Result<Bytes, OciError> {
        let url = format!("{}/v2/{}/blobs/{digest}", r.base_url(), r.repository);
        let mut resp = self
            .request(r, creds, Method::GET, &url, &[], Bytes::new(), false)
            .await?;
        let mut current = url;
        for _ in 0..MAX_REDIRECTS {
            if !resp.status().is_redirection() {
                break;
            }
            let Some(next) = resp
                .headers()
                .get(LOCATION)
                .and_then(|v| v.to_str().ok())
                .map(|l| absolute(&current, l))
            else {
                break;
            };
            let same_host = host_of(&next) == host_of(&current);
            current = next;
            resp = if same_host {
                self.request(r, creds, Method::GET, &current, &[], Bytes::new(), false)
                    .await?
            } else {
                let req = Request::get(&current)
                    .body(Full::new(Bytes::new()))
                    .map_err(|e| OciError::Reference(format!("{r}: redirect: {e}")))?;
                self.web(r)?.send(req).await.map_err(|e| OciError::Http {
                    reference: r.to_string(),
                    source: e,
                })?
            };
        }
        if !resp.status().is_success() {
            return Err(self.failure(r, &format!("blob {digest}"), resp).await);
        }
        self.web(r)?
            .body(resp, MAX_MODULE)
            .await
            .map_err(|e| OciError::Http {
                reference: r.to_string(),
                source: e,
            })
    }

    /// Uploads one blob unless the registry has it (monolithic upload: POST, then PUT).
    async fn upload(
        &self,
        r: &Reference,
        creds: &Credentials,
        digest: &str,
        bytes: Bytes,
    ) -> Result<(), OciError> {
        let base = r.base_url();
        let head = format!("{base}/v2/{}/blobs/{digest}", r.repository);
        let resp = self
            .request(r, creds, Method::HEAD, &head, &[], Bytes::new(), true)
            .await?;
        if resp.status().is_success() {
            return Ok(());
        }
        let start = format!("{base}/v2/{}/blobs/uploads/", r.repository);
        let resp = self
            .request(r, creds, Method::POST, &start, &[], Bytes::new(), true)
            .await?;
        if resp.status() != StatusCode::ACCEPTED {
            return Err(self.failure(r, "starting a blob upload", resp).await);
        }
        let location = resp
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(|l| absolute(&start, l))
            .ok_or_else(|| OciError::Registry {
                reference: r.to_string(),
                status: 202,
                message: "a blob upload without a Location".into(),
            })?;
        let sep = if location.contains('?') { '&' } else { '?' };
        let put = format!("{location}{sep}digest={}", digest.replace(':', "%3A"));
        let resp = self
            .request(
                r,
                creds,
                Method::PUT,
                &put,
                &[(CONTENT_TYPE, "application/octet-stream")],
                bytes,
                true,
            )
            .await?;
        if resp.status() != StatusCode::CREATED {
            return Err(self
                .failure(r, &format!("uploading blob {digest}"), resp)
                .await);
        }
        Ok(())
    }

    /// Publishes `module` at `r`'s tag (or digest) in `layout`; returns the manifest's digest.
    /// `component` is the config's `component` field (its imports and exports).
    pub async fn push(
        &self,
        r: &Reference,
        creds: &Credentials,
        module: Bytes,
        layout: Layout,
        component: Value,
    ) -> Result<String, OciError> {
        let layer_digest = digest_of(&module);
        let (config, config_type, layer_type) = match layout {
            Layout::Cncf => (
                json!({
                    "created": jiff::Timestamp::now().to_string(),
                    "architecture": "wasm",
                    "os": "wasip2",
                    "layerDigests": [layer_digest],
                    "component": component,
                }),
                WASM_CONFIG,
                WASM_LAYER,
            ),
            Layout::Legacy => (json!({}), LEGACY_CONFIG, LEGACY_LAYER),
        };
        let config = Bytes::from(serde_json::to_vec(&config).unwrap_or_default());
        let config_digest = digest_of(&config);
        let layer_size = module.len();
        self.upload(r, creds, &config_digest, config.clone())
            .await?;
        self.upload(r, creds, &layer_digest, module).await?;
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": config_type, "digest": config_digest, "size": config.len()},
            "layers": [{"mediaType": layer_type, "digest": layer_digest, "size": layer_size}],
        });
        let manifest = Bytes::from(serde_json::to_vec(&manifest).unwrap_or_default());
        let digest = digest_of(&manifest);
        let at = r.tag.clone().unwrap_or_else(|| digest.clone());
        self.put_manifest(r, creds, &at, manifest.clone()).await?;
        self.store
            .put(&r.to_string(), "the manifest", &digest, &manifest)?;
        Ok(digest)
    }

    /// PUTs `manifest` (an OCI image manifest) at `at`, a tag or its digest.
    async fn put_manifest(
        &self,
        r: &Reference,
        creds: &Credentials,
        at: &str,
        manifest: Bytes,
    ) -> Result<(), OciError> {
        let url = format!("{}/v2/{}/manifests/{at}", r.base_url(), r.repository);
        let resp = self
            .request(
                r,
                creds,
                Method::PUT,
                &url,
                &[(CONTENT_TYPE, OCI_MANIFEST)],
                manifest,
                true,
            )
            .await?;
        if resp.status() != StatusCode::CREATED {
            return Err(self
                .failure(r, &format!("putting manifest {at}"), resp)
                .await);
        }
        Ok(())
    }

    /// Signs manifest `digest` of `r`'s repository with `key`, as `cosign sign --key` does (a
    /// simple-signing payload at the tag `sha256-<hex>.sig`); returns that manifest's digest.
    pub async fn sign(
        &self,
        r: &Reference,
        creds: &Credentials,
        digest: &str,
        key: &SigningKey,
    ) -> Result<String, OciError> {
        let payload = Bytes::from(signature::payload(
            &format!("{}/{}", r.registry, r.repository),
            digest,
        ));
        let sig = base64::engine::general_purpose::STANDARD.encode(key.sign(&payload)?);
        let payload_digest = digest_of(&payload);
        let config = Bytes::from(
            serde_json::to_vec(&json!({
                "architecture": "", "os": "", "config": {},
                "created": "0001-01-01T00:00:00Z",
                "history": [{"created": "0001-01-01T00:00:00Z"}],
                "rootfs": {"type": "layers", "diff_ids": [payload_digest]},
            }))
            .unwrap_or_default(),
        );
        let config_digest = digest_of(&config);
        self.upload(r, creds, &config_digest, config.clone())
            .await?;
        self.upload(r, creds, &payload_digest, payload.clone())
            .await?;
        let manifest = Bytes::from(
            serde_json::to_vec(&json!({
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                           "digest": config_digest, "size": config.len()},
                "layers": [{"mediaType": signature::SIMPLE_SIGNING, "digest": payload_digest,
                            "size": payload.len(),
                            "annotations": {signature::SIGNATURE_ANNOTATION: sig}}],
            }))
            .unwrap_or_default(),
        );
        self.put_manifest(
            r,
            creds,
            &signature::signature_tag(digest),
            manifest.clone(),
        )
        .await?;
        Ok(digest_of(&manifest))
    }

    /// Checks that manifest `digest` of `r`'s repository carries a cosign signature by one of
    /// `keys` (nothing to check when there are none). A manifest verified against the same keys
    /// before is not asked about again.
    pub async fn verify(
        &self,
        r: &Reference,
        creds: &Credentials,
        digest: &str,
        keys: &[PublicKey],
    ) -> Result<(), OciError> {
        if keys.is_empty() {
            return Ok(());
        }
        let fingerprints = keys
            .iter()
            .map(PublicKey::fingerprint)
            .collect::<Vec<_>>()
            .join(",");
        let memo = (digest.to_owned(), fingerprints.clone());
        // Kept in memory and as a marker beside the blobs: a signature once verified stays
        // valid, so a restart does not ask the registry again either.
        let marker = self.store.dir().join("verified").join(format!(
            "{}-{}",
            digest.trim_start_matches("sha256:"),
            fingerprints.replace(',', "-")
        ));
        if self.verified.lock().contains(&memo) || marker.is_file() {
            return Ok(());
        }
        let unsigned = |message: String| OciError::Unsigned {
            reference: r.at(digest).to_string(),
            message,
        };
        let tag = signature::signature_tag(digest);
        let bytes = match self.manifest(r, creds, &tag).await {
            Err(OciError::NotFound { .. }) => {
                return Err(unsigned(format!("no signature (no tag {tag})")))
            }
            other => other?.1,
        };
        let m: Manifest = serde_json::from_slice(&bytes)
            .map_err(|e| unsigned(format!("the signature manifest is not JSON: {e}")))?;
        let mut reasons = Vec::new();
        for layer in m
            .layers
            .iter()
            .filter(|l| l.media_type == signature::SIMPLE_SIGNING)
        {
            let Some(sig) = layer.annotations.get(signature::SIGNATURE_ANNOTATION) else {
                reasons.push("a layer without a signature annotation".to_owned());
                continue;
            };
            check_digest(&layer.digest).map_err(&unsigned)?;
            let payload = match self.store.get(&layer.digest) {
                Some(p) => {
                    std::fs::read(&p).map_err(OciError::io(format!("reading {}", p.display())))?
                }
                None => {
                    let b = self.blob(r, creds, &layer.digest).await?;
                    self.store
                        .put(&r.to_string(), "a signature payload", &layer.digest, &b)?;
                    b.to_vec()
                }
            };
            match signature::check(&payload, sig, digest, keys) {
                Ok(()) => {
                    self.verified.lock().insert(memo);
                    if let Some(dir) = marker.parent() {
                        let _ = std::fs::create_dir_all(dir);
                    }
                    if let Err(e) = std::fs::write(&marker, b"") {
                        tracing::debug!(error = %e, "the verified signature is not remembered on disk");
                    }
                    return Ok(());
                }
                Err(e) => reasons.push(e),
            }
        }
        if reasons.is_empty() {
            reasons.push("no simple-signing layer".into());
        }
        Err(unsigned(format!(
            "{} (keys {fingerprints})",
            reasons.join("; ")
        )))
    }
}

/// `location` made absolute against `base` (registries send paths).
fn absolute(base: &str, location: &str) -> String {
    if location.starts_with("http://") || location.starts_with("https://") {
        return location.to_owned();
    }
    let origin_end = base
        .find("://")
        .and_then(|i| base[i + 3..].find('/').map(|j| i + 3 + j))
        .unwrap_or(base.len());
    format!("{}{}", &base[..origin_end], location)
}

fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_challenges_registries_send() {
        let c = parse_challenge(
            r#"Bearer realm="https://ghcr.io/token",service="ghcr.io",scope="repository:a/b:pull""#,
        )
        .expect("parses");
        assert_eq!(c.scheme, "bearer");
        assert_eq!(c.params["realm"], "https://ghcr.io/token");
        assert_eq!(c.params["service"], "ghcr.io");
        assert_eq!(c.params["scope"], "repository:a/b:pull");
        let c = parse_challenge(r#"Basic realm="basic-realm""#).expect("parses");
        assert_eq!(c.scheme, "basic");
        assert_eq!(c.params["realm"], "basic-realm");
        let c = parse_challenge("Bearer realm=https://x/t, service=x").expect("unquoted");
        assert_eq!(c.params["realm"], "https://x/t");
        assert_eq!(c.params["service"], "x");
    }

    #[test]
    fn makes_locations_absolute() {
        assert_eq!(
            absolute(
                "http://127.0.0.1:5000/v2/a/blobs/uploads/",
                "/v2/a/blobs/uploads/u?x=1"
            ),
            "http://127.0.0.1:5000/v2/a/blobs/uploads/u?x=1"
        );
        assert_eq!(absolute("http://a/x", "https://b/y"), "https://b/y");
        assert_eq!(host_of("https://b:5000/y"), "b:5000");
    }
}
