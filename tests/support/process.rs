//! The `host` binary as a child process: its stdout and stderr read line by line as they come,
//! waits for a line with a deadline, SIGTERM and SIGKILL, the exit status, and a client for the
//! emulator it started with `--emulator`.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use kwh_client::config::KubeconfigOptions;
use kwh_client::{Client, Config};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Child;
use tokio::sync::mpsc;

/// How long a line may take by default: the first start of a test process compiles the plugins.
pub const WAIT: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

#[derive(Debug, Clone)]
pub struct Line {
    pub stream: Stream,
    pub text: String,
}

pub struct HostProcess {
    child: Child,
    lines: mpsc::UnboundedReceiver<Line>,
    /// Every line read so far, in arrival order per stream (but those
    /// [`take_lines`](Self::take_lines) took).
    pub seen: Vec<Line>,
    /// How many of `seen` [`take_lines`](Self::take_lines) has offered already.
    offered: usize,
}

fn forward(
    r: impl AsyncRead + Unpin + Send + 'static,
    stream: Stream,
    tx: mpsc::UnboundedSender<Line>,
) {
    tokio::spawn(async move {
        let mut r = BufReader::new(r).lines();
        while let Ok(Some(text)) = r.next_line().await {
            if tx.send(Line { stream, text }).is_err() {
                break;
            }
        }
    });
}

impl HostProcess {
    /// Starts the binary with `args` and `RUST_LOG=rust_log`, the tests' shared compile cache,
    /// no colours and no KUBECONFIG from the test's environment.
    pub fn spawn<S: AsRef<OsStr>>(args: impl IntoIterator<Item = S>, rust_log: &str) -> Self {
        let mut command = tokio::process::Command::new(super::host_bin());
        command.args(args);
        Self::spawn_command(command, rust_log)
    }

    /// [`spawn`](Self::spawn) for another command that runs the host (a script); give it a
    /// process group of its own for [`sigterm_group`](Self::sigterm_group) to reach the host.
    pub fn spawn_command(mut command: tokio::process::Command, rust_log: &str) -> Self {
        let mut child = command
            .env(
                "XDG_CACHE_HOME",
                std::env::temp_dir().join("kube-wasm-host-test-cache"),
            )
            .env("RUST_LOG", rust_log)
            .env("NO_COLOR", "1")
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn host");
        let (tx, lines) = mpsc::unbounded_channel();
        forward(
            child.stdout.take().expect("stdout"),
            Stream::Stdout,
            tx.clone(),
        );
        forward(child.stderr.take().expect("stderr"), Stream::Stderr, tx);
        HostProcess {
            child,
            lines,
            seen: Vec::new(),
            offered: 0,
        }
    }

    /// The first line (on either stream) for which `pred` holds, among those already seen or
    /// arriving within `within`; `None` if the time passes or the process closes both streams
    /// first. Lines already seen count because output comes as it comes: a plugin may well log
    /// before the host says it is running.
    pub async fn line_where(
        &mut self,
        within: Duration,
        mut pred: impl FnMut(&Line) -> bool,
    ) -> Option<String> {
        if let Some(l) = self.seen.iter().find(|l| pred(l)) {
            return Some(l.text.clone());
        }
        tokio::time::timeout(within, async {
            while let Some(l) = self.lines.recv().await {
                self.seen.push(l.clone());
                if pred(&l) {
                    return Some(l.text);
                }
            }
            None
        })
        .await
        .ok()
        .flatten()
    }

    /// The first line containing `text` (see [`line_where`](Self::line_where)), within [`WAIT`];
    /// panics with everything seen otherwise.
    pub async fn line(&mut self, text: &str) -> String {
        match self.line_where(WAIT, |l| l.text.contains(text)).await {
            Some(l) => l,
            None => panic!("no line containing {text:?}; saw:\n{}", self.log()),
        }
    }

    /// Every line seen so far, one per line, stderr ones marked.
    pub fn log(&self) -> String {
        self.seen
            .iter()
            .map(|l| match l.stream {
                Stream::Stdout => format!("out| {}", l.text),
                Stream::Stderr => format!("err| {}", l.text),
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The lines seen so far that contain any of `needles` (e.g. everything about one plugin).
    pub fn lines_mentioning(&self, needles: &[&str]) -> Vec<&str> {
        self.seen
            .iter()
            .map(|l| l.text.as_str())
            .filter(|t| needles.iter().any(|n| t.contains(n)))
            .collect()
    }

    /// Whether a line seen so far contains `text`.
    pub fn saw(&self, text: &str) -> bool {
        self.seen.iter().any(|l| l.text.contains(text))
    }

    /// Moves the lines that have arrived into [`seen`](Self::seen) without waiting (for callers
    /// that poll the log rather than wait for one line).
    pub fn drain(&mut self) {
        while let Ok(l) = self.lines.try_recv() {
            self.seen.push(l);
        }
    }

    /// Offers every line not offered before (arrived meanwhile, or collected by another
    /// method) to `take`, and keeps in [`seen`](Self::seen) only those it returns false for:
    /// a long run's lines counted as they come (millions of them) instead of kept.
    pub fn take_lines(&mut self, mut take: impl FnMut(&Line) -> bool) {
        self.drain();
        let from = self.offered.min(self.seen.len());
        let fresh: Vec<Line> = self.seen.drain(from..).collect();
        self.seen.extend(fresh.into_iter().filter(|l| !take(l)));
        self.offered = self.seen.len();
    }

    /// Its resident set (`VmRSS`) and peak (`VmHWM`) in KiB, from `/proc`, while it runs.
    pub fn memory_kib(&self) -> Option<(u64, u64)> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?)).ok()?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        };
        Some((field("VmRSS:")?, field("VmHWM:")?))
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Whether the process has exited (its status is then kept for [`exit`](Self::exit)).
    pub fn has_exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// `kill -9`: no handler runs, nothing is drained or released. Returns once the process is
    /// gone, with the rest of its output collected.
    pub async fn kill(&mut self) -> ExitStatus {
        if !self.has_exited() {
            self.child.start_kill().expect("SIGKILL");
        }
        self.exit(WAIT).await
    }

    /// SIGTERM to the process group a [`spawn_command`](Self::spawn_command) child leads.
    pub fn sigterm_group(&self) {
        let pid = self.child.id().expect("running");
        let ok = std::process::Command::new("kill")
            .args(["-TERM", "--", &format!("-{pid}")])
            .status()
            .expect("kill");
        assert!(ok.success());
    }

    pub fn sigterm(&self) {
        let pid = self.child.id().expect("running").to_string();
        let ok = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        assert!(ok.success());
    }

    /// Waits for the exit, then collects the remaining output.
    pub async fn exit(&mut self, within: Duration) -> ExitStatus {
        let status = match tokio::time::timeout(within, self.child.wait()).await {
            Ok(s) => s.expect("wait"),
            Err(_) => panic!("no exit within {within:?}; saw:\n{}", self.log()),
        };
        while let Ok(Some(l)) = tokio::time::timeout(WAIT, self.lines.recv()).await {
            self.seen.push(l);
        }
        status
    }

    /// After `--emulator` (text logs): the emulator's base URL and the kubeconfig written for it.
    pub async fn emulator(&mut self) -> (String, PathBuf) {
        let url = self.line("emulator listening on ").await;
        let url = url
            .split_once("emulator listening on ")
            .map(|(_, u)| u.to_string())
            .expect("url");
        let kubeconfig = self.line("kubeconfig: ").await;
        let kubeconfig = kubeconfig
            .split_once("kubeconfig: ")
            .map(|(_, p)| PathBuf::from(p))
            .expect("path");
        (url, kubeconfig)
    }

    /// After `--metrics-addr` (text logs): the `host:port` the operations endpoints are on.
    pub async fn ops_addr(&mut self) -> String {
        let line = self.line("metrics on http://").await;
        line.split_once("metrics on http://")
            .and_then(|(_, u)| u.strip_suffix("/metrics"))
            .expect("metrics address")
            .to_string()
    }
}

/// A client for the cluster of the kubeconfig at `path`.
pub fn client(kubeconfig: &std::path::Path) -> Client {
    let cfg =
        Config::from_kubeconfig_paths(&[kubeconfig.to_path_buf()], &KubeconfigOptions::default())
            .expect("kubeconfig");
    Client::new(cfg).expect("client")
}
