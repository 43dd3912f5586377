//! Where the API server is and how to authenticate to it: kubeconfig files read the way kubectl
//! reads them, or the in-cluster service account.
//!
//! Why our own loader: the host runs where kubectl runs (a developer's `KUBECONFIG` with several
//! files, exec plugins such as cloud CLIs) and in pods (rotating projected tokens), and must
//! resolve both the same way operators expect from kubectl.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use serde::Deserialize;

use super::error::Error;
use super::object::IngestOptions;
use super::proxy::{Proxy, ProxySetting};

/// Everything the [`Client`](super::client::Client) needs.
#[derive(Debug, Clone)]
pub struct Config {
    /// `https://host:port` (a path prefix is kept, e.g. behind a proxy).
    pub cluster_url: http::Uri,
    /// The namespace of the context (or the service account), `default` when unset.
    pub default_namespace: String,
    /// PEM of the CA bundle to trust instead of the public web PKI roots.
    pub root_ca_pem: Option<Vec<u8>>,
    /// Skip server certificate verification (kubeconfig `insecure-skip-tls-verify`).
    pub insecure_skip_tls_verify: bool,
    /// Name to verify the server certificate against (and send as SNI), when it differs from
    /// the URL's host.
    pub tls_server_name: Option<String>,
    /// PEM client certificate chain and key.
    pub client_identity: Option<Identity>,
    pub auth: AuthSource,
    /// Limit for one non-watch request, from sending to the last body byte.
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
    /// How long a file-based token is used before the file is read again.
    pub token_file_refresh: Duration,
    /// A watch ends with a timeout error when no byte arrives for its `timeoutSeconds` plus
    /// this margin (or for `watch_idle_default` without `timeoutSeconds`).
    pub watch_idle_margin: Duration,
    pub watch_idle_default: Duration,
    /// Only negotiate HTTP/1.1 (no ALPN `h2`).
    pub http1_only: bool,
    /// The HTTP proxy to go through: the kubeconfig's `proxy-url`, else the environment's.
    pub proxy: ProxySetting,
    pub ingest: IngestOptions,
    pub user_agent: String,
    /// Opens the connections instead of TCP (plain HTTP only): a simulation's network, or an
    /// in-process server. None in a real run.
    pub dialer: Option<crate::dial::Dialer>,
}

/// A client certificate and its private key, both PEM.
#[derive(Clone)]
pub struct Identity {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Identity { .. }")
    }
}

/// How requests are authenticated.
#[derive(Clone, Default)]
pub enum AuthSource {
    #[default]
    None,
    /// A fixed bearer token.
    Token(String),
    /// A bearer token in a file that may be rotated (service-account projected tokens).
    TokenFile(PathBuf),
    /// An exec credential plugin.
    Exec(ExecConfig),
}

impl std::fmt::Debug for AuthSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AuthSource::None => f.write_str("None"),
            AuthSource::Token(_) => f.write_str("Token(..)"),
            AuthSource::TokenFile(p) => write!(f, "TokenFile({p:?})"),
            AuthSource::Exec(e) => write!(f, "Exec({:?})", e.command),
        }
    }
}

/// A `client.authentication.k8s.io` exec plugin.
#[derive(Debug, Clone, Default)]
pub struct ExecConfig {
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub api_version: String,
    /// Pass the cluster (server, CA) to the plugin in `KUBERNETES_EXEC_INFO`.
    pub provide_cluster_info: bool,
    pub cluster_server: String,
    pub cluster_ca_data: Option<String>,
    pub cluster_insecure: bool,
    /// Shown when the command cannot be found (kubeconfig `installHint`).
    pub install_hint: Option<String>,
}

const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

impl Config {
    /// Defaults for a server URL with no credentials.
    pub fn new(cluster_url: http::Uri) -> Self {
        Config {
            cluster_url,
            default_namespace: "default".into(),
            root_ca_pem: None,
            insecure_skip_tls_verify: false,
            tls_server_name: None,
            client_identity: None,
            auth: AuthSource::None,
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            token_file_refresh: Duration::from_secs(60),
            watch_idle_margin: Duration::from_secs(60),
            watch_idle_default: Duration::from_secs(3660),
            http1_only: false,
            proxy: ProxySetting::FromEnvironment,
            ingest: IngestOptions::default(),
            user_agent: format!("host/{}", env!("CARGO_PKG_VERSION")),
            dialer: None,
        }
    }

    /// kubectl's choice: the files of `KUBECONFIG` if it is set, else the in-cluster service
    /// account when running in a pod, else `~/.kube/config`.
    pub fn infer(context: Option<&str>) -> Result<Self, Error> {
        let opts = KubeconfigOptions {
            context: context.map(str::to_owned),
            ..Default::default()
        };
        if std::env::var_os("KUBECONFIG").is_some_and(|v| !v.is_empty()) {
            return Self::from_kubeconfig(&opts);
        }
        if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() && context.is_none() {
            return Self::in_cluster();
        }
        Self::from_kubeconfig(&opts)
    }

    /// Load the kubeconfig from `KUBECONFIG` (several files, merged) or `~/.kube/config`.
    pub fn from_kubeconfig(opts: &KubeconfigOptions) -> Result<Self, Error> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let paths = kubeconfig_paths(std::env::var_os("KUBECONFIG").as_deref(), home.as_deref());
        Self::from_kubeconfig_paths(&paths, opts)
    }

    /// Load and merge kubeconfig files in order. As in kubectl, missing files are skipped, the
    /// first file that defines a cluster, user or context name wins, and the first non-empty
    /// `current-context` wins. Relative paths resolve against the file that holds them.
    pub fn from_kubeconfig_paths(
        paths: &[PathBuf],
        opts: &KubeconfigOptions,
    ) -> Result<Self, Error> {
        let mut merged = Merged::default();
        let mut loaded = 0;
        for path in paths {
            let text = match std::fs::read_to_string(path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(config_err(path, &format!("cannot read: {e}"))),
            };
            loaded += 1;
            let file = parse_kubeconfig(&text).map_err(|m| config_err(path, &m))?;
            let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
            merged.add(file, path, &dir);
        }
        if loaded == 0 {
            let list: Vec<_> = paths.iter().map(|p| p.display().to_string()).collect();
            return Err(Error::Config(format!(
                "no kubeconfig found (looked at {})",
                if list.is_empty() {
                    "nothing".into()
                } else {
                    list.join(", ")
                }
            )));
        }
        merged.resolve(opts)
    }

    /// Load one kubeconfig document given as text (relative paths resolve against `dir`).
    pub fn from_kubeconfig_str(
        yaml: &str,
        dir: &Path,
        opts: &KubeconfigOptions,
    ) -> Result<Self, Error> {
        let name = Path::new("<inline kubeconfig>");
        let file = parse_kubeconfig(yaml).map_err(|m| config_err(name, &m))?;
        let mut merged = Merged::default();
        merged.add(file, name, dir);
        merged.resolve(opts)
    }

    /// The pod's service account: `KUBERNETES_SERVICE_HOST`/`_PORT`, and the token, CA and
    /// namespace under `/var/run/secrets/kubernetes.io/serviceaccount`.
    pub fn in_cluster() -> Result<Self, Error> {
        let env = InClusterEnv {
            host: std::env::var("KUBERNETES_SERVICE_HOST").ok(),
            port: std::env::var("KUBERNETES_SERVICE_PORT").ok(),
            dir: PathBuf::from(SA_DIR),
        };
        Self::in_cluster_with(&env)
    }

    /// [`Config::in_cluster`] with the environment and files given explicitly.
    pub fn in_cluster_with(env: &InClusterEnv) -> Result<Self, Error> {
        let (Some(host), Some(port)) = (env.host.as_deref(), env.port.as_deref()) else {
            return Err(Error::Config(
                "not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set"
                    .into(),
            ));
        };
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        let url = format!("https://{host}:{port}");
        let uri: http::Uri = url
            .parse()
            .map_err(|e| Error::Config(format!("in-cluster server {url:?} is not a URL: {e}")))?;
        let token = env.dir.join("token");
        if let Err(e) = std::fs::metadata(&token) {
            return Err(config_err(
                &token,
                &format!("service account token unreadable: {e}"),
            ));
        }
        let ca_path = env.dir.join("ca.crt");
        let ca = std::fs::read(&ca_path)
            .map_err(|e| config_err(&ca_path, &format!("service account CA unreadable: {e}")))?;
        let namespace = std::fs::read_to_string(env.dir.join("namespace"))
            .map(|s| s.trim().to_owned())
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "default".into());
        let mut c = Config::new(uri);
        c.root_ca_pem = Some(ca);
        c.auth = AuthSource::TokenFile(token);
        c.default_namespace = namespace;
        Ok(c)
    }
}

/// The in-cluster environment, injectable for tests.
#[derive(Debug, Clone)]
pub struct InClusterEnv {
    pub host: Option<String>,
    pub port: Option<String>,
    /// The directory holding `token`, `ca.crt` and `namespace`.
    pub dir: PathBuf,
}

/// Overrides, as kubectl's `--context`, `--cluster`, `--user` and `--namespace`.
#[derive(Debug, Clone, Default)]
pub struct KubeconfigOptions {
    pub context: Option<String>,
    pub cluster: Option<String>,
    pub user: Option<String>,
    pub namespace: Option<String>,
}

/// The files kubectl reads: `KUBECONFIG` split on the platform's path separator (empty entries
/// dropped, duplicates ignored), else `$HOME/.kube/config`.
pub fn kubeconfig_paths(kubeconfig: Option<&OsStr>, home: Option<&Path>) -> Vec<PathBuf> {
    match kubeconfig.filter(|v| !v.is_empty()) {
        Some(v) => {
            let mut seen = HashSet::new();
            std::env::split_paths(v)
                .filter(|p| !p.as_os_str().is_empty())
                .filter(|p| seen.insert(p.clone()))
                .collect()
        }
        None => home
            .map(|h| vec![h.join(".kube").join("config")])
            .unwrap_or_default(),
    }
}

fn config_err(path: &Path, message: &str) -> Error {
    let one_line: String = message.split_whitespace().collect::<Vec<_>>().join(" ");
    Error::Config(format!("kubeconfig {}: {one_line}", path.display()))
}

// ---- the kubeconfig document ----

#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct KubeconfigFile {
    #[serde(default)]
    clusters: Option<Vec<Named<ClusterEntry>>>,
    #[serde(default)]
    users: Option<Vec<NamedUser>>,
    #[serde(default)]
    contexts: Option<Vec<NamedContext>>,
    #[serde(default)]
    current_context: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Named<T> {
    name: String,
    cluster: T,
}

#[derive(Debug, Deserialize)]
struct NamedUser {
    name: String,
    user: UserEntry,
}

#[derive(Debug, Deserialize)]
struct NamedContext {
    name: String,
    context: ContextEntry,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct ClusterEntry {
    #[serde(default)]
    server: Option<String>,
    #[serde(default)]
    certificate_authority: Option<String>,
    #[serde(default)]
    certificate_authority_data: Option<String>,
    #[serde(default)]
    insecure_skip_tls_verify: Option<bool>,
    #[serde(default)]
    tls_server_name: Option<String>,
    #[serde(default)]
    proxy_url: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct UserEntry {
    #[serde(default)]
    token: Option<String>,
    #[serde(default, rename = "tokenFile")]
    token_file: Option<String>,
    #[serde(default)]
    client_certificate: Option<String>,
    #[serde(default)]
    client_certificate_data: Option<String>,
    #[serde(default)]
    client_key: Option<String>,
    #[serde(default)]
    client_key_data: Option<String>,
    #[serde(default)]
    exec: Option<ExecEntry>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default, rename = "auth-provider")]
    auth_provider: Option<yaml_serde::Value>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ExecEntry {
    command: String,
    #[serde(default)]
    args: Option<Vec<String>>,
    #[serde(default)]
    env: Option<Vec<ExecEnv>>,
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    provide_cluster_info: bool,
    #[serde(default)]
    install_hint: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
struct ExecEnv {
    name: String,
    value: String,
}

#[derive(Debug, Clone, Deserialize, Default)]
struct ContextEntry {
    #[serde(default)]
    cluster: String,
    #[serde(default)]
    user: String,
    #[serde(default)]
    namespace: Option<String>,
}

fn parse_kubeconfig(text: &str) -> Result<KubeconfigFile, String> {
    if text.trim().is_empty() {
        return Ok(KubeconfigFile::default());
    }
    yaml_serde::from_str(text).map_err(|e| e.to_string())
}

/// An entry with the file and directory it came from.
struct Sourced<T> {
    value: T,
    file: PathBuf,
    dir: PathBuf,
}

#[derive(Default)]
struct Merged {
    clusters: Vec<(String, Sourced<ClusterEntry>)>,
    users: Vec<(String, Sourced<UserEntry>)>,
    contexts: Vec<(String, Sourced<ContextEntry>)>,
    current_context: Option<String>,
    files: Vec<PathBuf>,
}

fn find<'a, T>(list: &'a [(String, Sourced<T>)], name: &str) -> Option<&'a Sourced<T>> {
    list.iter().find(|(n, _)| n == name).map(|(_, s)| s)
}

impl Merged {
    fn add(&mut self, f: KubeconfigFile, file: &Path, dir: &Path) {
        self.files.push(file.to_path_buf());
        let src = |value| Sourced {
            value,
            file: file.to_path_buf(),
            dir: dir.to_path_buf(),
        };
        for c in f.clusters.unwrap_or_default() {
            if find(&self.clusters, &c.name).is_none() {
                self.clusters.push((c.name, src(c.cluster)));
            }
        }
        for u in f.users.unwrap_or_default() {
            if find(&self.users, &u.name).is_none() {
                let s = Sourced {
                    value: u.user,
                    file: file.to_path_buf(),
                    dir: dir.to_path_buf(),
                };
                self.users.push((u.name, s));
            }
        }
        for c in f.contexts.unwrap_or_default() {
            if find(&self.contexts, &c.name).is_none() {
                let s = Sourced {
                    value: c.context,
                    file: file.to_path_buf(),
                    dir: dir.to_path_buf(),
                };
                self.contexts.push((c.name, s));
            }
        }
        if self.current_context.as_deref().is_none_or(str::is_empty) {
            self.current_context = f.current_context.filter(|c| !c.is_empty());
        }
    }

    /// An error about the merged configuration, naming its files.
    fn err(&self, message: &str) -> Error {
        let files: Vec<_> = self.files.iter().map(|f| f.display().to_string()).collect();
        Error::Config(format!("kubeconfig {}: {message}", files.join(", ")))
    }

    fn resolve(&self, opts: &KubeconfigOptions) -> Result<Config, Error> {
        let ctx_name = opts
            .context
            .as_deref()
            .or(self.current_context.as_deref())
            .filter(|c| !c.is_empty());
        let ctx = match ctx_name {
            Some(name) => Some(
                find(&self.contexts, name)
                    .ok_or_else(|| self.err(&format!("context {name:?} not found")))?,
            ),
            None => None,
        };
        let cluster_name = opts
            .cluster
            .as_deref()
            .or(ctx.map(|c| c.value.cluster.as_str()))
            .filter(|c| !c.is_empty())
            .ok_or_else(|| {
                self.err("no current context (set current-context or pass a context)")
            })?;
        let cluster = find(&self.clusters, cluster_name)
            .ok_or_else(|| self.err(&format!("cluster {cluster_name:?} not found")))?;
        let user_name = opts
            .user
            .as_deref()
            .or(ctx.map(|c| c.value.user.as_str()))
            .filter(|u| !u.is_empty());
        let user = match user_name {
            Some(n) => Some(
                find(&self.users, n).ok_or_else(|| self.err(&format!("user {n:?} not found")))?,
            ),
            None => None,
        };

        let mut c = cluster_config(cluster, cluster_name)?;
        if let Some(ns) = opts
            .namespace
            .clone()
            .or_else(|| ctx.and_then(|c| c.value.namespace.clone()))
            .filter(|n| !n.is_empty())
        {
            c.default_namespace = ns;
        }

        if let (Some(user), Some(user_name)) = (user, user_name) {
            let cl = &cluster.value;
            let server = cl.server.as_deref().unwrap_or_default();
            apply_user(&mut c, user, user_name, server, cl)?;
        }
        Ok(c)
    }
}

/// The connection a kubeconfig's cluster entry describes: server, proxy, TLS.
fn cluster_config(cluster: &Sourced<ClusterEntry>, cluster_name: &str) -> Result<Config, Error> {
    let cl = &cluster.value;
    let cerr = |m: &str| config_err(&cluster.file, &format!("cluster {cluster_name:?}: {m}"));
    let server = cl
        .server
        .as_deref()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| cerr("no server"))?;
    let uri: http::Uri = server
        .parse()
        .map_err(|e| cerr(&format!("server {server:?} is not a URL: {e}")))?;
    match uri.scheme_str() {
        Some("https") | Some("http") => {}
        _ => {
            return Err(cerr(&format!(
                "server {server:?} must be an http or https URL"
            )))
        }
    }
    let mut c = Config::new(uri);
    if let Some(p) = cl.proxy_url.as_deref().filter(|p| !p.is_empty()) {
        // Checked here so that a bad URL names the kubeconfig file and cluster.
        Proxy::parse(p).map_err(|e| match e {
            Error::Config(m) => cerr(&format!("proxy-url: {m}")),
            other => other,
        })?;
        c.proxy = ProxySetting::Url(p.to_owned());
    }
    c.insecure_skip_tls_verify = cl.insecure_skip_tls_verify.unwrap_or(false);
    c.tls_server_name = cl.tls_server_name.clone().filter(|s| !s.is_empty());
    let ca_data = cl
        .certificate_authority_data
        .as_deref()
        .filter(|s| !s.is_empty());
    c.root_ca_pem = match (ca_data, cl.certificate_authority.as_deref()) {
        (Some(d), _) => {
            Some(b64(d).map_err(|m| cerr(&format!("certificate-authority-data: {m}")))?)
        }
        (None, Some(p)) if !p.is_empty() => {
            let path = cluster.dir.join(p);
            Some(
                std::fs::read(&path)
                    .map_err(|e| cerr(&format!("certificate-authority {}: {e}", path.display())))?,
            )
        }
        _ => None,
    };
    if c.insecure_skip_tls_verify && c.root_ca_pem.is_some() {
        return Err(cerr(
            "specifying a root certificates file with the insecure flag is not allowed",
        ));
    }
    Ok(c)
}

/// A kubeconfig user's credentials on `c`: a client certificate, then a token, a token file
/// or an exec plugin; the kinds client-go has and this host does not are refused by name.
fn apply_user(
    c: &mut Config,
    user: &Sourced<UserEntry>,
    user_name: &str,
    server: &str,
    cl: &ClusterEntry,
) -> Result<(), Error> {
    let u = &user.value;
    let uerr = |m: &str| config_err(&user.file, &format!("user {user_name:?}: {m}"));
    let read = |p: &str, what: &str| {
        let path = user.dir.join(p);
        std::fs::read(&path).map_err(|e| uerr(&format!("{what} {}: {e}", path.display())))
    };
    let cert = match (
        u.client_certificate_data.as_deref(),
        u.client_certificate.as_deref(),
    ) {
        (Some(d), _) if !d.is_empty() => {
            Some(b64(d).map_err(|m| uerr(&format!("client-certificate-data: {m}")))?)
        }
        (_, Some(p)) if !p.is_empty() => Some(read(p, "client-certificate")?),
        _ => None,
    };
    let key = match (u.client_key_data.as_deref(), u.client_key.as_deref()) {
        (Some(d), _) if !d.is_empty() => {
            Some(b64(d).map_err(|m| uerr(&format!("client-key-data: {m}")))?)
        }
        (_, Some(p)) if !p.is_empty() => Some(read(p, "client-key")?),
        _ => None,
    };
    c.client_identity = match (cert, key) {
        (Some(cert_pem), Some(key_pem)) => Some(Identity { cert_pem, key_pem }),
        (None, None) => None,
        _ => {
            return Err(uerr(
                "client-certificate and client-key must be given together",
            ))
        }
    };
    c.auth = if let Some(t) = u.token.as_deref().filter(|t| !t.is_empty()) {
        AuthSource::Token(t.to_owned())
    } else if let Some(p) = u.token_file.as_deref().filter(|t| !t.is_empty()) {
        AuthSource::TokenFile(user.dir.join(p))
    } else if let Some(e) = &u.exec {
        let api_version = e.api_version.clone().unwrap_or_default();
        if api_version != "client.authentication.k8s.io/v1"
            && api_version != "client.authentication.k8s.io/v1beta1"
        {
            return Err(uerr(&format!(
                "exec plugin apiVersion {api_version:?} is not supported (use client.authentication.k8s.io/v1)"
            )));
        }
        if e.command.is_empty() {
            return Err(uerr("exec plugin has no command"));
        }
        // A relative command with a path separator is relative to the kubeconfig.
        let command = if e.command.contains('/') && Path::new(&e.command).is_relative() {
            user.dir.join(&e.command).display().to_string()
        } else {
            e.command.clone()
        };
        AuthSource::Exec(ExecConfig {
            command,
            args: e.args.clone().unwrap_or_default(),
            env: e
                .env
                .iter()
                .flatten()
                .map(|v| (v.name.clone(), v.value.clone()))
                .collect(),
            api_version,
            provide_cluster_info: e.provide_cluster_info,
            cluster_server: server.to_owned(),
            cluster_ca_data: cl.certificate_authority_data.clone(),
            cluster_insecure: c.insecure_skip_tls_verify,
            install_hint: e.install_hint.clone(),
        })
    } else if u.auth_provider.is_some() {
        return Err(uerr(
            "auth-provider plugins are not supported; use an exec credential plugin",
        ));
    } else if u.username.is_some() {
        return Err(uerr("basic authentication is not supported"));
    } else {
        AuthSource::None
    };
    Ok(())
}

fn b64(s: &str) -> Result<Vec<u8>, String> {
    let clean: String = s.split_whitespace().collect();
    base64::engine::general_purpose::STANDARD
        .decode(clean)
        .map_err(|e| format!("invalid base64: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "kcfg-{}-{}",
            std::process::id(),
            rand::random::<u64>()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    const A: &str = r#"
apiVersion: v1
kind: Config
current-context: a
clusters:
- name: c1
  cluster:
    server: https://c1.example:6443
    certificate-authority: ca.pem
    tls-server-name: kubernetes
- name: shared
  cluster:
    server: https://from-a:6443
    insecure-skip-tls-verify: true
users:
- name: u1
  user:
    tokenFile: tok
contexts:
- name: a
  context: {cluster: c1, user: u1, namespace: team-a}
- name: b
  context: {cluster: shared, user: u2}
"#;
    const B: &str = r#"
current-context: b
clusters:
- name: shared
  cluster:
    server: https://from-b:6443
- name: c2
  cluster:
    server: http://127.0.0.1:8080
users:
- name: u2
  user:
    client-certificate-data: Q0VSVA==
    client-key-data: S0VZ
- name: u3
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: ./bin/cred
      args: [get, token]
      env: [{name: FOO, value: bar}]
      provideClusterInfo: true
contexts:
- name: c
  context: {cluster: c2, user: u3}
"#;

    #[test]
    fn merges_files_first_wins_like_kubectl() {
        let d = tmp();
        std::fs::write(d.join("a"), A).unwrap();
        std::fs::create_dir_all(d.join("sub")).unwrap();
        std::fs::write(d.join("sub/b"), B).unwrap();
        std::fs::write(d.join("ca.pem"), "PEM").unwrap();
        let var = std::env::join_paths([d.join("a"), d.join("missing"), d.join("sub/b")]).unwrap();
        let paths = kubeconfig_paths(Some(&var), None);
        assert_eq!(paths.len(), 3);

        let c = Config::from_kubeconfig_paths(&paths, &KubeconfigOptions::default()).unwrap();
        // current-context from the first file that sets it.
        assert_eq!(c.cluster_url, "https://c1.example:6443/");
        assert_eq!(c.default_namespace, "team-a");
        assert_eq!(c.root_ca_pem.as_deref(), Some(&b"PEM"[..]));
        assert_eq!(c.tls_server_name.as_deref(), Some("kubernetes"));
        assert!(matches!(&c.auth, AuthSource::TokenFile(p) if p == &d.join("tok")));

        let opts = KubeconfigOptions {
            context: Some("b".into()),
            ..Default::default()
        };
        let c = Config::from_kubeconfig_paths(&paths, &opts).unwrap();
        // "shared" is defined in both files: the first file wins.
        assert_eq!(c.cluster_url, "https://from-a:6443/");
        assert!(c.insecure_skip_tls_verify);
        assert_eq!(c.default_namespace, "default");
        let id = c.client_identity.unwrap();
        assert_eq!(
            (&id.cert_pem[..], &id.key_pem[..]),
            (&b"CERT"[..], &b"KEY"[..])
        );

        let opts = KubeconfigOptions {
            context: Some("c".into()),
            namespace: Some("override".into()),
            ..Default::default()
        };
        let c = Config::from_kubeconfig_paths(&paths, &opts).unwrap();
        assert_eq!(c.default_namespace, "override");
        let AuthSource::Exec(e) = &c.auth else {
            panic!("{:?}", c.auth)
        };
        assert_eq!(
            e.command,
            d.join("sub").join("./bin/cred").display().to_string()
        );
        assert_eq!(e.args, ["get", "token"]);
        assert_eq!(e.env, [("FOO".to_owned(), "bar".to_owned())]);
        assert!(e.provide_cluster_info);
        assert_eq!(e.cluster_server, "http://127.0.0.1:8080");
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn current_context_from_a_later_file_when_earlier_ones_have_none() {
        let d = tmp();
        std::fs::write(d.join("a"), "clusters: []\n").unwrap();
        std::fs::write(
            d.join("b"),
            B.replace("current-context: b", "current-context: c"),
        )
        .unwrap();
        let c = Config::from_kubeconfig_paths(&[d.join("a"), d.join("b")], &Default::default())
            .unwrap();
        assert_eq!(c.cluster_url, "http://127.0.0.1:8080/");
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn malformed_kubeconfig_is_one_readable_line_naming_the_file() {
        let d = tmp();
        let cases = [
            ("clusters: [ {name: x, cluster: {server: 5, bad", "kubeconfig"),
            ("clusters: 7\n", "clusters"),
            ("current-context: nope\n", "context \"nope\" not found"),
            (
                "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters: [{name: c, cluster: {server: 'ftp://x'}}]\n",
                "must be an http or https URL",
            ),
            (
                "current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\nclusters: [{name: c, cluster: {server: 'https://x'}}]\nusers: [{name: u, user: {client-certificate-data: '!!'}}]\n",
                "client-certificate-data: invalid base64",
            ),
            (
                "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters: [{name: c, cluster: {server: 'https://x', certificate-authority: nothere}}]\n",
                "certificate-authority",
            ),
            (
                "current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\nclusters: [{name: c, cluster: {server: 'https://x'}}]\nusers: [{name: u, user: {exec: {command: x, apiVersion: client.authentication.k8s.io/v1alpha1}}}]\n",
                "not supported",
            ),
        ];
        for (i, (text, want)) in cases.iter().enumerate() {
            let p = d.join(format!("bad{i}"));
            std::fs::write(&p, text).unwrap();
            let e = Config::from_kubeconfig_paths(std::slice::from_ref(&p), &Default::default())
                .unwrap_err();
            let msg = e.to_string();
            assert!(matches!(e, Error::Config(_)), "{msg}");
            assert!(!msg.contains('\n'), "{msg}");
            assert!(msg.contains(want), "{i}: {msg}");
            assert!(msg.contains(&p.display().to_string()), "{msg}");
        }
        let e = Config::from_kubeconfig_paths(&[d.join("none")], &Default::default()).unwrap_err();
        assert!(e.to_string().contains("no kubeconfig found"));
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn in_cluster_reads_injected_paths() {
        let d = tmp();
        std::fs::write(d.join("token"), "t1").unwrap();
        std::fs::write(d.join("ca.crt"), "CA").unwrap();
        std::fs::write(d.join("namespace"), "kube-system\n").unwrap();
        let env = InClusterEnv {
            host: Some("fd00::1".into()),
            port: Some("443".into()),
            dir: d.clone(),
        };
        let c = Config::in_cluster_with(&env).unwrap();
        assert_eq!(c.cluster_url, "https://[fd00::1]:443/");
        assert_eq!(c.default_namespace, "kube-system");
        assert_eq!(c.root_ca_pem.as_deref(), Some(&b"CA"[..]));
        assert!(matches!(&c.auth, AuthSource::TokenFile(p) if p == &d.join("token")));
        let missing = InClusterEnv {
            host: None,
            ..env.clone()
        };
        assert!(Config::in_cluster_with(&missing).is_err());
        std::fs::remove_file(d.join("token")).unwrap();
        let e = Config::in_cluster_with(&env).unwrap_err();
        assert!(e.to_string().contains("token"), "{e}");
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn default_path_is_home_kube_config() {
        assert_eq!(
            kubeconfig_paths(None, Some(Path::new("/h"))),
            [PathBuf::from("/h/.kube/config")]
        );
        assert_eq!(
            kubeconfig_paths(Some(OsStr::new("")), Some(Path::new("/h"))),
            [PathBuf::from("/h/.kube/config")]
        );
    }
}
