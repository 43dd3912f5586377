//! Reconcile reads its key from the lister: found → requeue after the object's byte length in ms,
//! absent → done; a key `by-key/<watch>/<key>` reads `<key>` through `get-by-key` instead. Also
//! writes to stdout and stderr, and logs through the host. Keys `ambient` and `net/<port>`
//! report what the sandbox grants instead.
use kube_guest::{lister, log, split_key, watch_all, Level, Manifest, Outcome};

struct Getter;

impl kube_guest::Guest for Getter {
    fn manifest() -> Manifest {
        println!("getter manifest requested");
        Manifest {
            name: "getter".into(),
            watches: vec![watch_all("v1", "ConfigMap")],
            writes: vec![],
            resync_period_ms: 30_000,
            workers: 1,
        }
    }
    fn validate_config(_config: Vec<u8>) -> Result<(), String> {
        Ok(())
    }
    fn on_add(_watch: u32, obj: kube_guest::CachedObject) {
        let obj = obj.json;
        kube_guest::queue::add(&format!("added-{}", obj.len()));
    }
    fn on_update(_watch: u32, _old: kube_guest::CachedObject, _new: kube_guest::CachedObject) {}
    fn on_delete(_watch: u32, _obj: kube_guest::CachedObject, _tombstone: bool) {}
    fn reconcile(key: String) -> Result<Outcome, String> {
        if key == "ambient" {
            return Err(ambient());
        }
        if let Some(port) = key.strip_prefix("net/") {
            return Err(network(port));
        }
        // `by-key/<watch>/<key>`: the same read through `get-by-key` and watch number <watch>.
        if let Some((watch, key)) = key
            .strip_prefix("by-key/")
            .and_then(|rest| rest.split_once('/'))
        {
            let watch = watch.parse().map_err(|_| format!("bad watch {watch:?}"))?;
            return match lister::get_by_key(watch, key) {
                Ok(Some(obj)) => Ok(Outcome::RequeueAfter(obj.len() as u64)),
                Ok(None) => Ok(Outcome::Done),
                Err(e) => Err(format!("{} {}: {}", e.code, e.reason, e.message)),
            };
        }
        println!("reconciling {key}");
        eprintln!("stderr line for {key}");
        log::log(Level::Info, &format!("looking up {key}"));
        let (ns, name) = split_key(&key);
        match lister::get("v1", "ConfigMap", ns, name) {
            Ok(Some(obj)) => Ok(Outcome::RequeueAfter(obj.len() as u64)),
            Ok(None) => Ok(Outcome::Done),
            Err(e) => Err(format!("{} {}: {}", e.code, e.reason, e.message)),
        }
    }
}

kube_guest::export!(Getter);

/// Reports what the sandbox grants: environment, arguments, files, UDP sockets.
fn ambient() -> String {
    let env = std::env::vars_os().count();
    let args = std::env::args_os().count();
    let root = std::fs::read_dir("/").is_ok();
    let cwd = std::fs::read_dir(".").is_ok();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").is_ok();
    format!("env={env} args={args} root={root} cwd={cwd} udp={udp}")
}

/// Tries a TCP connection to `port` on loopback, where the test listens, and a name lookup of
/// `localhost`, which would succeed on any machine: each is reported as `ok` or the error's kind
/// and text, so the test can tell a sandbox refusal from a network failure.
fn network(port: &str) -> String {
    use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
    let tcp = match port.parse::<u16>() {
        Ok(p) => match TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], p))) {
            Ok(_) => "ok".to_string(),
            Err(e) => format!("{:?} ({e})", e.kind()),
        },
        Err(_) => format!("bad port {port:?}"),
    };
    let dns = match ("localhost", 80).to_socket_addrs() {
        Ok(addrs) => format!("ok {:?}", addrs.collect::<Vec<_>>()),
        Err(e) => format!("{:?} ({e})", e.kind()),
    };
    format!("tcp={tcp}; dns={dns}")
}
