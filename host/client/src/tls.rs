//! TLS and TCP for the client: rustls configuration from [`Config`] and the connector that
//! hyper-util's pooled client uses.
//!
//! Why a custom connector: kubeconfig semantics (custom CA, `insecure-skip-tls-verify`,
//! `tls-server-name`, client certificates that an exec plugin may rotate) do not map onto a
//! stock HTTPS connector, and ALPN must offer `h2` so the pool multiplexes watches.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use parking_lot::RwLock;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::config::{Config, Identity};
use super::error::Error;
use super::proxy::Proxy;

/// The TLS side of a client: the current rustls config, rebuilt when the client identity
/// changes (exec plugins can hand out short-lived certificates).
pub(crate) struct TlsState {
    roots: Option<Vec<u8>>,
    insecure: bool,
    http1_only: bool,
    current: RwLock<(Option<Vec<u8>>, Arc<ClientConfig>)>,
    /// Bumped whenever the client identity changes, so the client can retire connections
    /// opened with the old one.
    generation: AtomicU64,
}

impl TlsState {
    pub(crate) fn new(cfg: &Config) -> Result<Self, Error> {
        let config = build(
            cfg.root_ca_pem.as_deref(),
            cfg.insecure_skip_tls_verify,
            cfg.client_identity.as_ref(),
            cfg.http1_only,
        )?;
        Ok(TlsState {
            roots: cfg.root_ca_pem.clone(),
            insecure: cfg.insecure_skip_tls_verify,
            http1_only: cfg.http1_only,
            current: RwLock::new((
                cfg.client_identity.as_ref().map(|i| i.cert_pem.clone()),
                Arc::new(config),
            )),
            generation: AtomicU64::new(0),
        })
    }

    /// How many times the client identity has changed.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub(crate) fn config(&self) -> Arc<ClientConfig> {
        self.current.read().1.clone()
    }

    /// Use `id` for new connections, unless it is already in use.
    pub(crate) fn set_identity(&self, id: &Identity) -> Result<(), Error> {
        if self.current.read().0.as_deref() == Some(&id.cert_pem[..]) {
            return Ok(());
        }
        let config = build(
            self.roots.as_deref(),
            self.insecure,
            Some(id),
            self.http1_only,
        )?;
        *self.current.write() = (Some(id.cert_pem.clone()), Arc::new(config));
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Parse PEM certificates; an empty bundle is an error.
pub(crate) fn parse_certs(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(pem).collect();
    let certs = certs.map_err(|e| Error::Config(format!("{what}: invalid PEM: {e}")))?;
    if certs.is_empty() {
        return Err(Error::Config(format!("{what}: no certificate in PEM data")));
    }
    Ok(certs)
}

/// Parse the first private key (PKCS#8, PKCS#1 or SEC1) in PEM data.
fn parse_key(pem: &[u8]) -> Result<PrivateKeyDer<'static>, Error> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
        pem::Error::NoItemsFound => Error::Config("client key: no private key in PEM data".into()),
        e => Error::Config(format!("client key: invalid PEM: {e}")),
    })
}

/// Where the roots of a kubeconfig without a certificate authority come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RootsSource {
    /// The system's trust store (or `SSL_CERT_FILE`/`SSL_CERT_DIR`), as client-go uses Go's
    /// system pool.
    System,
    /// The Mozilla roots built into this binary: the system had none that parse (a scratch
    /// image without `ca-certificates`).
    Bundled,
}

/// The roots for a kubeconfig without a certificate authority, read from the system once per
/// process (every file of the store is read: not for each TLS rebuild).
fn default_roots() -> &'static RootCertStore {
    static ROOTS: OnceLock<RootCertStore> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        for e in &found.errors {
            tracing::debug!(error = %e, "reading the system's trust store");
        }
        let (roots, source) = roots_from(found.certs);
        match source {
            RootsSource::System => tracing::debug!(
                roots = roots.len(),
                "servers without a CA in the kubeconfig are checked against the system's roots"
            ),
            RootsSource::Bundled => tracing::info!(
                roots = roots.len(),
                "the system has no trust store; servers without a CA in the kubeconfig are checked against the bundled Mozilla roots"
            ),
        }
        roots
    })
}

/// The system's certificates that parse as roots, else the bundled ones.
fn roots_from(system: Vec<CertificateDer<'static>>) -> (RootCertStore, RootsSource) {
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(system);
    if roots.is_empty() {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        (roots, RootsSource::Bundled)
    } else {
        (roots, RootsSource::System)
    }
}

fn build(
    roots_pem: Option<&[u8]>,
    insecure: bool,
    identity: Option<&Identity>,
    http1_only: bool,
) -> Result<ClientConfig, Error> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config(format!("TLS: {e}")))?;
    let builder = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
    } else {
        let mut roots = RootCertStore::empty();
        match roots_pem {
            Some(pem) => {
                for c in parse_certs(pem, "certificate authority")? {
                    roots
                        .add(c)
                        .map_err(|e| Error::Config(format!("certificate authority: {e}")))?;
                }
            }
            None => roots = default_roots().clone(),
        }
        builder.with_root_certificates(roots)
    };
    let mut config = match identity {
        Some(id) => {
            let certs = parse_certs(&id.cert_pem, "client certificate")?;
            let key = parse_key(&id.key_pem)?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| Error::Config(format!("client certificate: {e}")))?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = if http1_only {
        vec![b"http/1.1".to_vec()]
    } else {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    };
    Ok(config)
}

/// `insecure-skip-tls-verify`: accept any server certificate, but still check the handshake
/// signatures so the session is at least bound to the presented key.
#[derive(Debug)]
struct NoVerify(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Opens TCP (and TLS for `https`) connections for hyper-util's pool.
#[derive(Clone)]
pub(crate) struct Connector {
    pub(crate) tls: Arc<TlsState>,
    pub(crate) server_name: Option<String>,
    pub(crate) connect_timeout: Duration,
    /// The proxy every connection goes through (the client talks to one server, so the
    /// choice is made once, in `Client::new`).
    pub(crate) proxy: Option<Arc<Proxy>>,
    /// Opens plain-HTTP connections instead of TCP (a simulated network).
    pub(crate) dialer: Option<crate::dial::Dialer>,
}

/// A connection: plain TCP or TLS over TCP.
pub(crate) enum Stream {
    Plain(TokioIo<TcpStream>),
    /// Plain TCP to an HTTP proxy: requests go out in absolute form.
    Proxied(TokioIo<TcpStream>),
    Tls(Box<TokioIo<TlsStream<TcpStream>>>),
    /// A connection the configured dialer opened.
    Dialed(TokioIo<Box<dyn crate::dial::Connection>>),
}

impl tower_service::Service<Uri> for Connector {
    type Response = Stream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Stream>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { this.connect(uri).await })
    }
}

impl Connector {
    async fn connect(self, uri: Uri) -> io::Result<Stream> {
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("unsupported scheme {other:?}"),
                ))
            }
        };
        let host = uri
            .host()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "URL has no host"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        if let Some(d) = &self.dialer {
            if https {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a dialer opens plain HTTP connections only",
                ));
            }
            let conn = tokio::time::timeout(self.connect_timeout, d.0.dial(&host, port))
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
            return Ok(Stream::Dialed(TokioIo::new(conn)));
        }
        let addr = match &self.proxy {
            Some(p) => p.address(),
            None => (host.as_str(), port),
        };
        let mut tcp = tokio::time::timeout(self.connect_timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
        let _ = tcp.set_nodelay(true);
        match (&self.proxy, https) {
            (None, false) => return Ok(Stream::Plain(TokioIo::new(tcp))),
            (Some(_), false) => return Ok(Stream::Proxied(TokioIo::new(tcp))),
            (Some(p), true) => {
                tokio::time::timeout(self.connect_timeout, p.tunnel(&mut tcp, &host, port))
                    .await
                    .map_err(|_| {
                        io::Error::new(io::ErrorKind::TimedOut, "proxy CONNECT timed out")
                    })??
            }
            (None, true) => {}
        }
        let name = self.server_name.clone().unwrap_or(host);
        let server_name = ServerName::try_from(name)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let tls = tokio_rustls::TlsConnector::from(self.tls.config())
            .connect(server_name, tcp)
            .await?;
        Ok(Stream::Tls(Box::new(TokioIo::new(tls))))
    }
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        match self {
            Stream::Plain(_) | Stream::Dialed(_) => Connected::new(),
            Stream::Proxied(_) => Connected::new().proxy(true),
            Stream::Tls(t) => {
                let (_, session) = t.inner().get_ref();
                if session.alpn_protocol() == Some(b"h2") {
                    Connected::new().negotiated_h2()
                } else {
                    Connected::new()
                }
            }
        }
    }
}

impl hyper::rt::Read for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) | Stream::Proxied(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
            Stream::Dialed(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl hyper::rt::Write for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) | Stream::Proxied(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
            Stream::Dialed(s) => Pin::new(s).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) | Stream::Proxied(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
            Stream::Dialed(s) => Pin::new(s).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) | Stream::Proxied(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(&mut **s).poll_shutdown(cx),
            Stream::Dialed(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) | Stream::Proxied(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(&mut **s).poll_write_vectored(cx, bufs),
            Stream::Dialed(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }
    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) | Stream::Proxied(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
            Stream::Dialed(s) => s.is_write_vectored(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn self_signed() -> (String, String) {
        let c = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("rcgen");
        (c.cert.pem(), c.key_pair.serialize_pem())
    }

    #[test]
    fn the_system_roots_are_used_and_the_bundled_ones_only_where_the_system_has_none() {
        let (cert, _) = self_signed();
        let system = parse_certs(cert.as_bytes(), "test").expect("a certificate");
        let (roots, source) = roots_from(system);
        assert_eq!((source, roots.len()), (RootsSource::System, 1));

        let (roots, source) = roots_from(Vec::new());
        assert_eq!(source, RootsSource::Bundled);
        assert_eq!(roots.len(), webpki_roots::TLS_SERVER_ROOTS.len());

        // A store whose files hold nothing that parses as a root is no store.
        let junk = CertificateDer::from(b"not DER".to_vec());
        assert_eq!(roots_from(vec![junk]).1, RootsSource::Bundled);
    }

    #[test]
    fn pem_without_a_key_or_a_certificate_is_a_clear_error() {
        let (cert, key) = self_signed();
        assert!(parse_key(key.as_bytes()).is_ok());
        let e = parse_key(cert.as_bytes()).expect_err("a certificate is not a key");
        assert_eq!(
            e.to_string(),
            "configuration error: client key: no private key in PEM data"
        );
        let e = parse_certs(key.as_bytes(), "certificate authority").expect_err("no certificate");
        assert_eq!(
            e.to_string(),
            "configuration error: certificate authority: no certificate in PEM data"
        );
        let broken = cert.replace("MII", "M!I");
        let e = parse_certs(broken.as_bytes(), "certificate authority").expect_err("bad base64");
        assert!(
            e.to_string().contains("certificate authority: invalid PEM"),
            "{e}"
        );
    }
}
