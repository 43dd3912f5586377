//! Listener, optional TLS and per-connection serving (HTTP/1.1 and h2 via hyper-util's auto
//! builder).
//!
//! Why every connection watches two signals: shutdown and the "drop all connections" fault both
//! have to cut streams that would otherwise run for up to an hour.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, warn, Instrument};

use super::{router, Shared};

/// A TLS acceptor with a fresh self-signed certificate for `localhost` and `127.0.0.1`, and
/// that certificate as PEM.
pub fn tls_acceptor() -> Result<(TlsAcceptor, String), String> {
    let ck =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .map_err(|e| e.to_string())?;
    let pem = ck.cert.pem();
    let cert = ck.cert.der().clone();
    let key = rustls_pki_types::PrivateKeyDer::Pkcs8(rustls_pki_types::PrivatePkcs8KeyDer::from(
        ck.key_pair.serialize_der(),
    ));
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_no_client_auth()
    .with_single_cert(vec![cert], key)
    .map_err(|e| e.to_string())?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((TlsAcceptor::from(Arc::new(cfg)), pem))
}

/// Where the emulator takes its connections from: a TCP listener, or a simulated network's.
pub trait Listener: Send + 'static {
    /// A connection accepted.
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// Waits for the next connection, and says who opened it.
    fn accept(
        &mut self,
    ) -> impl std::future::Future<Output = std::io::Result<(Self::Io, SocketAddr)>> + Send;
    /// Sets `TCP_NODELAY` where there is such a thing.
    fn no_delay(_io: &Self::Io) {}
}

impl Listener for TcpListener {
    type Io = tokio::net::TcpStream;
    async fn accept(&mut self) -> std::io::Result<(Self::Io, SocketAddr)> {
        TcpListener::accept(self).await
    }
    fn no_delay(io: &Self::Io) {
        let _ = io.set_nodelay(true);
    }
}

/// Accept until `stop` turns true.
pub(crate) async fn serve<L: Listener>(
    mut listener: L,
    tls: Option<TlsAcceptor>,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = stop.changed() => break,
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        L::no_delay(&stream);
        let shared = shared.clone();
        let tls = tls.clone();
        let stop = stop.clone();
        tokio::spawn(
            async move {
                match tls {
                    Some(acc) => match acc.accept(stream).await {
                        Ok(s) => connection(TokioIo::new(s), shared, stop).await,
                        Err(e) => debug!(error = %e, "TLS handshake failed"),
                    },
                    None => connection(TokioIo::new(stream), shared, stop).await,
                }
            }
            .instrument(tracing::debug_span!("conn", %peer)),
        );
    }
}

async fn connection<I>(io: TokioIo<I>, shared: Arc<Shared>, mut stop: watch::Receiver<bool>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut kicks = shared.faults.kicks();
    let drop_gen = kicks.borrow_and_update().drop;
    let svc_shared = shared.clone();
    let svc = service_fn(move |req| {
        let s = svc_shared.clone();
        async move { Ok::<_, Infallible>(router::handle(s, req).await) }
    });
    let mut builder = Builder::new(TokioExecutor::new());
    // client-go multiplexes every watch of a process over one h2 connection; allow as many
    // concurrent streams as kube-apiserver does.
    builder.http2().max_concurrent_streams(1000);
    let conn = builder.serve_connection(io, svc);
    let dropped = async {
        loop {
            if kicks.changed().await.is_err() {
                return std::future::pending::<()>().await;
            }
            if kicks.borrow_and_update().drop != drop_gen {
                return;
            }
        }
    };
    tokio::select! {
        r = conn => if let Err(e) = r { debug!(error = %e, "connection ended with error") },
        _ = dropped => {
            shared.faults.count_connection_dropped();
            debug!("connection dropped by fault injection");
        }
        _ = stop.changed() => {},
    }
}
