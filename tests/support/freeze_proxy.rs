//! A loopback TCP forwarder that can be frozen: a network partition of one client, for tests.
//!
//! [`FreezeProxy`] listens on `127.0.0.1:0` and forwards each connection's bytes to a fixed
//! upstream address, both ways, without looking at them (so it carries HTTP/1.1, h2 and TLS
//! alike). [`FreezeProxy::freeze`] stops forwarding on every connection while keeping them open,
//! and holds new connections accepted meanwhile (they are connected upstream only after the
//! thaw); [`FreezeProxy::thaw`] resumes all of them, nothing lost. While frozen, the client's
//! requests and the server's answers and watch events simply stall, as behind a partition;
//! the kernel's buffers and the proxy's one buffer per direction keep what was in flight.
//! Dropping the proxy closes its listener and every connection.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

#[derive(Default)]
struct Counters {
    accepted: AtomicU64,
    forwarded: AtomicU64,
}

pub struct FreezeProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    frozen: watch::Sender<bool>,
    counters: Arc<Counters>,
    /// The accept loop; it owns the connections' tasks, so aborting it ends them too.
    task: JoinHandle<()>,
}

impl FreezeProxy {
    /// A proxy to `upstream`, listening on a free loopback port, not frozen.
    pub async fn start(upstream: SocketAddr) -> FreezeProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let (frozen, _) = watch::channel(false);
        let counters = Arc::new(Counters::default());
        let task = tokio::spawn(accept(
            listener,
            upstream,
            frozen.subscribe(),
            counters.clone(),
        ));
        FreezeProxy {
            addr,
            upstream,
            frozen,
            counters,
            task,
        }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where the bytes go.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Stops forwarding on every connection, and holds new ones. A chunk already read when this
    /// is called may still be written (at most one per direction per connection); nothing is
    /// read afterwards until [`thaw`](Self::thaw).
    pub fn freeze(&self) {
        self.frozen.send_replace(true);
    }

    /// Resumes forwarding: held bytes and held connections go on.
    pub fn thaw(&self) {
        self.frozen.send_replace(false);
    }

    pub fn is_frozen(&self) -> bool {
        *self.frozen.borrow()
    }

    /// Connections accepted so far (held ones included).
    pub fn accepted(&self) -> u64 {
        self.counters.accepted.load(Ordering::Relaxed)
    }

    /// Bytes written onward so far, both directions together.
    pub fn forwarded(&self) -> u64 {
        self.counters.forwarded.load(Ordering::Relaxed)
    }
}

impl Drop for FreezeProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept(
    listener: TcpListener,
    upstream: SocketAddr,
    frozen: watch::Receiver<bool>,
    counters: Arc<Counters>,
) {
    let mut conns = JoinSet::new();
    while let Ok((client, _)) = listener.accept().await {
        counters.accepted.fetch_add(1, Ordering::Relaxed);
        while conns.try_join_next().is_some() {}
        conns.spawn(connection(
            client,
            upstream,
            frozen.clone(),
            counters.clone(),
        ));
    }
}

/// Returns once not frozen; false when the proxy is gone.
async fn thawed(frozen: &mut watch::Receiver<bool>) -> bool {
    frozen.wait_for(|f| !*f).await.is_ok()
}

async fn connection(
    client: TcpStream,
    upstream: SocketAddr,
    mut frozen: watch::Receiver<bool>,
    counters: Arc<Counters>,
) {
    if !thawed(&mut frozen).await {
        return;
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_r, client_w) = client.into_split();
    let (server_r, server_w) = server.into_split();
    tokio::join!(
        pump(client_r, server_w, frozen.clone(), counters.clone()),
        pump(server_r, client_w, frozen, counters),
    );
}

/// Copies `r` to `w` chunk by chunk, checking for a freeze before each read and each write;
/// passes the end of the stream on as a write shutdown.
async fn pump(
    mut r: OwnedReadHalf,
    mut w: OwnedWriteHalf,
    mut frozen: watch::Receiver<bool>,
    counters: Arc<Counters>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if !thawed(&mut frozen).await {
            return;
        }
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if !thawed(&mut frozen).await || w.write_all(&buf[..n]).await.is_err() {
            return;
        }
        counters.forwarded.fetch_add(n as u64, Ordering::Relaxed);
    }
    let _ = w.shutdown().await;
}
