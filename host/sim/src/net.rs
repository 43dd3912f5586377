//! The simulated network under the real client and the real emulator: the client's
//! connections dialed over turmoil's TCP, the emulator's accepted from turmoil's listener. The
//! HTTP on top (pools, HTTP/1.1, watches, every request) is the production code's.

use std::io;
use std::net::SocketAddr;

use kwh_client::dial::{Connection, Dial, Dialer, Dialing};

/// Dials `host:port` on the simulated network (turmoil resolves host names to its hosts).
struct Turmoil;

impl Dial for Turmoil {
    fn dial(&self, host: &str, port: u16) -> Dialing {
        let addr = format!("{host}:{port}");
        Box::pin(async move {
            let s = turmoil::net::TcpStream::connect(addr).await?;
            Ok(Box::new(s) as Box<dyn Connection>)
        })
    }
}

/// A client of the API server at `url` (`http://apiserver:6443`) over the simulated network,
/// introducing itself as `agent` (the server's answers are told apart by it).
pub fn client(url: &str, agent: &str) -> Result<kwh_client::Client, kwh_client::Error> {
    let uri = url
        .parse()
        .map_err(|e| kwh_client::Error::Config(format!("{url}: {e}")))?;
    let mut config = kwh_client::Config::new(uri);
    config.dialer = Some(Dialer::new(Turmoil));
    config.user_agent = agent.to_owned();
    kwh_client::Client::new(config)
}

/// The emulator's side: connections accepted from turmoil's listener.
pub struct Listener(pub turmoil::net::TcpListener);

impl kwh_emulator::server::Listener for Listener {
    type Io = turmoil::net::TcpStream;
    async fn accept(&mut self) -> io::Result<(Self::Io, SocketAddr)> {
        self.0.accept().await
    }
}
