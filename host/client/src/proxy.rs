//! HTTP proxies between the host and the API server, chosen as client-go chooses them.
//!
//! Platform teams often reach clusters only through a corporate proxy: kubectl honours the
//! kubeconfig's `proxy-url` and, without one, `HTTPS_PROXY` / `HTTP_PROXY` / `NO_PROXY`, so the
//! host must too or it would connect where kubectl does not. An `https://` API server is reached
//! through a `CONNECT` tunnel (TLS runs end to end inside it); a plain `http://` one by sending
//! absolute-form requests to the proxy, as Go's transport does.

use std::io;
use std::net::IpAddr;

use base64::Engine as _;
use http::{HeaderValue, Uri};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::error::Error;

/// Which proxy requests go through.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum ProxySetting {
    /// `HTTPS_PROXY` for `https://` servers, `HTTP_PROXY` for `http://` ones (upper or lower
    /// case), except hosts `NO_PROXY` lists; as Go's `ProxyFromEnvironment`, `localhost` and
    /// loopback addresses are never proxied.
    #[default]
    FromEnvironment,
    /// The kubeconfig's `proxy-url`: every request, whatever the environment says.
    Url(String),
    /// Connect directly.
    Direct,
}

impl std::fmt::Debug for ProxySetting {
    // A proxy URL may carry a password: show where it points, never its userinfo.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProxySetting::FromEnvironment => f.write_str("FromEnvironment"),
            ProxySetting::Direct => f.write_str("Direct"),
            ProxySetting::Url(u) => {
                let shown = u.rsplit_once('@').map_or(u.as_str(), |(_, host)| host);
                write!(f, "Url({shown:?})")
            }
        }
    }
}

/// A proxy to connect through.
#[derive(Clone, PartialEq, Eq)]
pub struct Proxy {
    host: String,
    port: u16,
    /// `Basic …` from the URL's userinfo.
    authorization: Option<HeaderValue>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("authorization", &self.authorization.is_some())
            .finish()
    }
}

impl Proxy {
    /// Parses an `http://[user[:password]@]host[:port]` proxy URL (a bare `host:port` means
    /// `http://`, as in Go). Other schemes (`https://`, `socks5://`) are refused rather than
    /// bypassed: connecting directly where a proxy is required would fail later and obscurely.
    pub fn parse(url: &str) -> Result<Proxy, Error> {
        let bad = |why: &str| {
            let shown = url.rsplit_once('@').map_or(url, |(_, host)| host);
            Error::Config(format!("proxy URL {shown:?}: {why}"))
        };
        let with_scheme = if url.contains("://") {
            url.to_owned()
        } else {
            format!("http://{url}")
        };
        let uri: Uri = with_scheme.parse().map_err(|_| bad("not a URL"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(other) => {
                return Err(bad(&format!(
                    "scheme {other:?} is not supported (only http:// proxies)"
                )))
            }
            None => return Err(bad("no scheme")),
        }
        let authority = uri.authority().ok_or_else(|| bad("no host"))?;
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let authorization = match authority.as_str().rsplit_once('@') {
            None => None,
            Some((userinfo, _)) => {
                let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
                let decode = |s: &str| {
                    percent_decode(s).ok_or_else(|| bad("userinfo is not percent-encoded UTF-8"))
                };
                let creds = format!("{}:{}", decode(user)?, decode(password)?);
                let b64 = base64::engine::general_purpose::STANDARD.encode(creds);
                Some(
                    HeaderValue::from_str(&format!("Basic {b64}"))
                        .map_err(|_| bad("credentials are not a valid header"))?,
                )
            }
        };
        Ok(Proxy {
            host: host.to_owned(),
            port: authority.port_u16().unwrap_or(80),
            authorization,
        })
    }

    /// The proxy `setting` picks for `target`, reading the environment through `env`.
    pub fn select(
        setting: &ProxySetting,
        target: &Uri,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Proxy>, Error> {
        match setting {
            ProxySetting::Direct => Ok(None),
            ProxySetting::Url(u) => Proxy::parse(u).map(Some),
            ProxySetting::FromEnvironment => {
                let var = |name: &str| {
                    env(name)
                        .or_else(|| env(&name.to_ascii_lowercase()))
                        .filter(|v| !v.is_empty())
                };
                let https = target.scheme_str() == Some("https");
                let Some(url) = var(if https { "HTTPS_PROXY" } else { "HTTP_PROXY" }) else {
                    return Ok(None);
                };
                let host = target.host().unwrap_or_default();
                let port = target.port_u16().unwrap_or(if https { 443 } else { 80 });
                let no_proxy = var("NO_PROXY").unwrap_or_default();
                if !use_proxy(host, port, &no_proxy) {
                    return Ok(None);
                }
                Proxy::parse(&url).map(Some)
            }
        }
    }

    /// Host and port to open the TCP connection to.
    pub(crate) fn address(&self) -> (&str, u16) {
        (&self.host, self.port)
    }

    /// The `Proxy-Authorization` value, if the URL carried credentials.
    pub(crate) fn authorization(&self) -> Option<&HeaderValue> {
        self.authorization.as_ref()
    }

    /// Asks the proxy, over `tcp`, for a tunnel to `host:port` and waits for its 2xx answer.
    /// A refusal is an error carrying the proxy's status line.
    pub(crate) async fn tunnel(
        &self,
        tcp: &mut TcpStream,
        host: &str,
        port: u16,
    ) -> io::Result<()> {
        let authority = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let mut req = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n");
        if let Some(a) = &self.authorization {
            req.push_str("Proxy-Authorization: ");
            req.push_str(a.to_str().unwrap_or_default());
            req.push_str("\r\n");
        }
        req.push_str("\r\n");
        tcp.write_all(req.as_bytes()).await?;
        // Read the answer's head byte by byte: nothing after it may be consumed, it belongs
        // to the TLS handshake. Heads are short; a proxy sending more is refused.
        let mut head = Vec::with_capacity(128);
        while !head.ends_with(b"\r\n\r\n") {
            if head.len() >= 8192 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "proxy CONNECT answer head exceeds 8 KiB",
                ));
            }
            let b = tcp.read_u8().await.map_err(|e| {
                io::Error::new(e.kind(), "proxy closed the connection during CONNECT")
            })?;
            head.push(b);
        }
        let status_line = head
            .split(|&b| b == b'\r')
            .next()
            .map(String::from_utf8_lossy)
            .unwrap_or_default();
        let code = status_line.split(' ').nth(1).unwrap_or_default();
        if code.len() == 3 && code.starts_with('2') {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "proxy refused CONNECT {authority}: {status_line}"
            )))
        }
    }
}

/// Whether `host:port` goes through the proxy under `no_proxy` (Go's `httpproxy` rules):
/// `localhost` and loopback addresses never do; `*` exempts everything; an entry is an IP, a
/// CIDR, or a domain (matching itself and its subdomains; with a leading dot, subdomains
/// only), optionally with `:port`.
pub fn use_proxy(host: &str, port: u16, no_proxy: &str) -> bool {
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    if host == "localhost" {
        return false;
    }
    let ip = host.parse::<IpAddr>().ok();
    if ip.is_some_and(|ip| ip.is_loopback()) {
        return false;
    }
    for entry in no_proxy.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        if entry == "*" {
            return false;
        }
        let entry = entry.to_ascii_lowercase();
        if let Some((net, bits)) = entry.split_once('/') {
            if let (Some(ip), Ok(net), Ok(bits)) = (ip, net.parse::<IpAddr>(), bits.parse()) {
                if in_cidr(ip, net, bits) {
                    return false;
                }
            }
            continue;
        }
        let (name, entry_port) = split_port(&entry);
        if entry_port.is_some_and(|p| p != port) {
            continue;
        }
        if let (Some(ip), Ok(e)) = (ip, name.parse::<IpAddr>()) {
            if ip == e {
                return false;
            }
            continue;
        }
        let matches = match name.strip_prefix('.') {
            Some(suffix) => host.ends_with(&format!(".{suffix}")),
            None => host == name || host.ends_with(&format!(".{name}")),
        };
        if matches {
            return false;
        }
    }
    true
}

/// `name[:port]` and `[v6]:port`; a bare IPv6 address has no port.
fn split_port(entry: &str) -> (&str, Option<u16>) {
    if let Some(rest) = entry.strip_prefix('[') {
        return match rest.split_once("]:") {
            Some((ip, port)) => (ip, port.parse().ok()),
            None => (rest.trim_end_matches(']'), None),
        };
    }
    match entry.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') => (name, port.parse().ok()),
        _ => (entry, None),
    }
}

fn in_cidr(ip: IpAddr, net: IpAddr, bits: u32) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) if bits <= 32 => {
            let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) if bits <= 128 => {
            let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// `%XX` sequences decoded; `None` for a bad escape or non-UTF-8 result.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_and_localhost_are_never_proxied() {
        for h in [
            "localhost",
            "LOCALHOST",
            "127.0.0.1",
            "127.9.9.9",
            "[::1]",
            "::1",
        ] {
            assert!(!use_proxy(h, 443, ""), "{h}");
        }
        assert!(use_proxy("10.0.0.1", 443, ""));
        assert!(use_proxy("api.example.com", 443, ""));
    }

    #[test]
    fn no_proxy_entries_follow_go_httpproxy() {
        let np = "internal.corp, .svc, 10.0.0.0/8, 192.168.1.7, api.other:6443, [fd00::1]:443";
        let yes = |h: &str, p: u16| use_proxy(h, p, np);
        // A domain matches itself and its subdomains; a leading dot only subdomains.
        assert!(!yes("internal.corp", 443));
        assert!(!yes("k8s.internal.corp", 443));
        assert!(yes("notinternal.corp", 443));
        assert!(!yes("kubernetes.default.svc", 443));
        assert!(yes("svc", 443));
        // CIDRs and IPs.
        assert!(!yes("10.1.2.3", 443));
        assert!(yes("11.1.2.3", 443));
        assert!(!yes("192.168.1.7", 443));
        assert!(yes("192.168.1.8", 443));
        // A port limits the entry to that port.
        assert!(!yes("api.other", 6443));
        assert!(yes("api.other", 443));
        assert!(!yes("[fd00::1]", 443));
        assert!(yes("[fd00::1]", 6443));
        // `*` exempts everything.
        assert!(!use_proxy("anything.example", 443, " * "));
    }

    #[test]
    fn urls_parse_with_credentials_and_refuse_other_schemes() {
        let p = Proxy::parse("http://us%40er:p%3Ass@proxy.corp:3128").expect("proxy");
        assert_eq!(p.address(), ("proxy.corp", 3128));
        // base64("us@er:p:ss")
        assert_eq!(
            p.authorization().and_then(|a| a.to_str().ok()),
            Some("Basic dXNAZXI6cDpzcw==")
        );
        assert!(!format!("{p:?}").contains("dXN"), "{p:?}");
        let bare = Proxy::parse("proxy.corp:8080").expect("host:port");
        assert_eq!(
            (bare.address(), bare.authorization()),
            (("proxy.corp", 8080), None)
        );
        assert_eq!(Proxy::parse("http://proxy").expect("p").address().1, 80);
        for bad in ["socks5://proxy:1080", "https://proxy:443"] {
            let e = Proxy::parse(bad).expect_err(bad).to_string();
            assert!(e.contains("is not supported"), "{e}");
        }
        let e = Proxy::parse("http://user:secret@")
            .expect_err("no host")
            .to_string();
        assert!(!e.contains("secret"), "{e}");
        let shown = format!("{:?}", ProxySetting::Url("http://u:secret@p:1".into()));
        assert_eq!(shown, "Url(\"p:1\")");
    }

    #[test]
    fn the_environment_is_read_per_scheme_with_lower_case_fallback() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        let https: Uri = "https://api.example.com:6443".parse().expect("uri");
        let http: Uri = "http://api.example.com".parse().expect("uri");
        let local: Uri = "https://127.0.0.1:6443".parse().expect("uri");
        let vars = env(&[("https_proxy", "http://p1:3128"), ("HTTP_PROXY", "p2:8080")]);
        let pick = |t: &Uri| {
            Proxy::select(&ProxySetting::FromEnvironment, t, vars)
                .expect("select")
                .map(|p| p.address().0.to_owned())
        };
        assert_eq!(pick(&https).as_deref(), Some("p1"));
        assert_eq!(pick(&http).as_deref(), Some("p2"));
        assert_eq!(pick(&local), None);
        let exempt = env(&[("HTTPS_PROXY", "p1:3128"), ("no_proxy", "example.com")]);
        assert_eq!(
            Proxy::select(&ProxySetting::FromEnvironment, &https, exempt).expect("select"),
            None
        );
        // The kubeconfig's proxy-url applies to every server, loopback included; Direct to none.
        let url = ProxySetting::Url("http://p3:1".into());
        let none = env(&[]);
        assert!(Proxy::select(&url, &local, none).expect("select").is_some());
        assert_eq!(
            Proxy::select(&ProxySetting::Direct, &https, vars).expect("select"),
            None
        );
    }
}
