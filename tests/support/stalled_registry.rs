//! A registry that never answers: a loopback listener that accepts each connection, reads what
//! the client sends and never replies. What a registry that is down behind a load balancer
//! looks like to a pull (each request waits out the client's timeout), without the wait being
//! a sleep in the test: a test asks whether a connection is still open, which tells a pull in
//! flight from one given up or cancelled.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

/// The listener and the connections it accepted, in order.
pub struct StalledRegistry {
    addr: SocketAddr,
    /// Per accepted connection: whether the client closed it.
    closed: Arc<Mutex<Vec<Arc<AtomicBool>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl StalledRegistry {
    /// Listens on a free loopback port.
    pub async fn start() -> StalledRegistry {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let closed: Arc<Mutex<Vec<Arc<AtomicBool>>>> = Arc::default();
        let conns = closed.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let flag = Arc::new(AtomicBool::new(false));
                conns.lock().push(flag.clone());
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    // Read until the client goes away; never write.
                    while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
                    flag.store(true, Ordering::SeqCst);
                });
            }
        });
        StalledRegistry { addr, closed, task }
    }

    /// `host:port`, for an `oci://` reference.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// How many connections were accepted.
    pub fn accepted(&self) -> usize {
        self.closed.lock().len()
    }

    /// Whether connection `i` (in accept order) is still open.
    pub fn is_open(&self, i: usize) -> bool {
        self.closed
            .lock()
            .get(i)
            .is_some_and(|c| !c.load(Ordering::SeqCst))
    }
}

impl Drop for StalledRegistry {
    fn drop(&mut self) {
        self.task.abort();
    }
}
