//! Connections opened by the embedder instead of over TCP.
//!
//! Why: a deterministic simulation runs several hosts and their API server in one thread on a
//! simulated network, where a connection is whatever that network hands out; an in-process
//! server can be spoken to without a socket. The client's HTTP (pools, HTTP/1.1 and h2, every
//! request and watch) is the same over such a connection as over TCP: only the byte stream
//! under it differs. TLS and proxies are for real networks and do not apply.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};

/// A byte stream a [`Dial`] opened.
pub trait Connection: AsyncRead + AsyncWrite + Unpin + Send + 'static {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Connection for T {}

/// What [`Dial::dial`] returns.
pub type Dialing = Pin<Box<dyn Future<Output = io::Result<Box<dyn Connection>>> + Send>>;

/// Opens a connection to `host:port` (the server URL's).
pub trait Dial: Send + Sync + 'static {
    /// One new connection.
    fn dial(&self, host: &str, port: u16) -> Dialing;
}

/// A shared [`Dial`], as [`Config::dialer`](crate::Config::dialer) holds it.
#[derive(Clone)]
pub struct Dialer(pub Arc<dyn Dial>);

impl Dialer {
    /// Dials with `dial`.
    pub fn new(dial: impl Dial) -> Self {
        Dialer(Arc::new(dial))
    }
}

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Dialer")
    }
}
