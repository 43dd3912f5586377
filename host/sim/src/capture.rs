//! What a run shows, kept in order of emission: the lines the simulated plugins print, the
//! writes the API server answered, and the driver's notes (a crash, a restart). Every host
//! runs on the simulation's one thread, so the order is the order in which things happened.

use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use tracing::field::{Field, Visit};
use tracing::span;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// One `REV <revision> <what> <key> <rv>[ <by>]` line of the `reviser` guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rev {
    /// The revision label of the plugin that printed it.
    pub revision: String,
    /// `add`, `update`, `delete`, `reconcile` or `done` (a reconcile's end).
    pub what: String,
    /// The object's key.
    pub key: String,
    /// The resourceVersion it saw (`-` when none).
    pub rv: String,
    /// The replica that printed it (its `mark`), when it has one.
    pub by: Option<String>,
}

/// A request the API server answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    /// The client's User-Agent: a simulated replica's name.
    pub agent: String,
    /// The HTTP method.
    pub method: String,
    /// The request's path.
    pub path: String,
    /// The answer's status code.
    pub status: u16,
}

impl Answered {
    /// A write the server accepted.
    pub fn accepted_write(&self) -> bool {
        (200..300).contains(&self.status) && !matches!(self.method.as_str(), "GET" | "HEAD")
    }
}

/// One thing seen, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// A plugin's line.
    Rev(Rev),
    /// A request as it reached the API server (its status not known yet: 0).
    Arrived(Answered),
    /// The API server's answer.
    Answered(Answered),
    /// A plugin's write left replica `by` (its fence checked), for the reconcile of `key` (empty
    /// for a handler's write).
    Sent {
        /// The replica.
        by: String,
        /// The key of the reconcile that wrote.
        key: String,
        /// The plugin that wrote.
        plugin: String,
    },
    /// A reconcile of `key` on replica `by` ended without its guest's `done` line: cut off
    /// (a deadline, a trap) or its worker dropped (an upgrade's grace period).
    Ended {
        /// The replica.
        by: String,
        /// The key.
        key: String,
    },
    /// The driver's note: `crash <replica>`, `start <replica>`, `ready <replica>`,
    /// `lost <replica>`.
    Note(String),
}

#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<Seen>>>);

struct Capture(Lines);

#[derive(Default)]
struct Fields {
    message: Option<String>,
    method: String,
    path: String,
    agent: String,
    status: u16,
    key: Option<String>,
    plugin: String,
}

/// The simulated host a span runs on (turmoil's `node` span).
struct Node(String);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message = Some(value.to_owned()),
            "agent" | "name" => self.agent = value.to_owned(),
            "key" => self.key = Some(value.to_owned()),
            "plugin" => self.plugin = value.to_owned(),
            _ => {}
        }
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "status" {
            self.status = u16::try_from(value).unwrap_or(0);
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = Some(format!("{value:?}")),
            "method" => self.method = format!("{value:?}"),
            "path" => self.path = format!("{value:?}"),
            "agent" => self.agent = format!("{value:?}"),
            "key" => self.key = Some(format!("{value:?}")),
            _ => {}
        }
    }
}

/// Every field but the message, ` k=v` each, for `SIM_DUMP`.
#[derive(Default)]
struct All(String);

impl Visit for All {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() != "message" {
            self.0.push_str(&format!(" {}={value:?}", field.name()));
        }
    }
}

/// The API server's request spans and their answers.
const ROUTER: &str = "kwh_emulator::router";
/// The workers' events: a reconcile cut off, a key a dropped worker held.
const RECONCILE: &str = "kwh_plugin::reconcile";
/// The plugins' writes as they leave.
const WRITES: &str = "kwh_plugin::backend::kube";

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        if attrs.metadata().name() == "node" && attrs.metadata().target().starts_with("turmoil") {
            let mut f = Fields::default();
            attrs.record(&mut f);
            if let Some(span) = ctx.span(id) {
                span.extensions_mut().insert(Node(f.agent));
            }
            return;
        }
        if attrs.metadata().target() != ROUTER {
            return;
        }
        let mut f = Fields::default();
        attrs.record(&mut f);
        self.0 .0.lock().push(Seen::Arrived(Answered {
            agent: f.agent.clone(),
            method: f.method.clone(),
            path: f.path.clone(),
            status: 0,
        }));
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(f);
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
        let mut m = Fields::default();
        event.record(&mut m);
        let Some(msg) = m.message else { return };
        if event.metadata().target() == ROUTER {
            if msg != "answered" {
                return;
            }
            let Some(span) = ctx.event_span(event) else {
                return;
            };
            let ext = span.extensions();
            let Some(req) = ext.get::<Fields>() else {
                return;
            };
            self.0 .0.lock().push(Seen::Answered(Answered {
                agent: req.agent.clone(),
                method: req.method.clone(),
                path: req.path.clone(),
                status: m.status,
            }));
            return;
        }
        let target = event.metadata().target();
        let judged = target == RECONCILE || target == WRITES;
        let node = (judged || dump())
            .then(|| ctx.event_scope(event))
            .flatten()
            .and_then(|scope| {
                scope
                    .into_iter()
                    .find_map(|s| s.extensions().get::<Node>().map(|n| n.0.clone()))
            });
        if judged {
            let seen = match (target, msg.as_str(), node.clone(), m.key.clone()) {
                (WRITES, "client write sent", Some(by), Some(key)) => Some(Seen::Sent {
                    by,
                    key,
                    plugin: m.plugin.clone(),
                }),
                (RECONCILE, msg, Some(by), Some(key))
                    if msg.starts_with("reconcile failed in the sandbox")
                        || msg.starts_with("worker stopped holding a key") =>
                {
                    Some(Seen::Ended { by, key })
                }
                _ => None,
            };
            if let Some(seen) = seen {
                self.0 .0.lock().push(seen);
            }
        }
        if dump() {
            let mut all = All::default();
            event.record(&mut all);
            let at = turmoil::sim_elapsed().map_or(-1.0, |d| d.as_secs_f64());
            eprintln!(
                "{at:9.3} {} {} {}: {msg}{}",
                event.metadata().level(),
                node.as_deref().unwrap_or("-"),
                event.metadata().target(),
                all.0
            );
        }
        let Some(rest) = msg.strip_prefix("REV ") else {
            return;
        };
        let mut f = rest.split(' ');
        if let (Some(revision), Some(what), Some(key), Some(rv)) =
            (f.next(), f.next(), f.next(), f.next())
        {
            self.0 .0.lock().push(Seen::Rev(Rev {
                revision: revision.into(),
                what: what.into(),
                key: key.into(),
                rv: rv.into(),
                by: f.next().map(str::to_owned),
            }));
        }
    }
}

/// Whether `SIM_DUMP` asks for every line on stderr (read once).
pub fn dump() -> bool {
    static DUMP: OnceLock<bool> = OnceLock::new();
    *DUMP.get_or_init(|| std::env::var_os("SIM_DUMP").is_some())
}

fn lines() -> &'static Lines {
    static LINES: OnceLock<Lines> = OnceLock::new();
    LINES.get_or_init(|| {
        let lines = Lines::default();
        // Guests' lines are at info, the API server's answers at debug; nothing else below
        // info is even built.
        let mut filter = Targets::new()
            .with_default(LevelFilter::INFO)
            .with_target(ROUTER, LevelFilter::DEBUG)
            .with_target(RECONCILE, LevelFilter::DEBUG)
            .with_target(WRITES, LevelFilter::DEBUG);
        // `SIM_LOG=kwh_coordination=debug,…` adds targets, for `SIM_DUMP` to print.
        if let Some(more) = std::env::var("SIM_LOG")
            .ok()
            .and_then(|v| v.parse::<Targets>().ok())
        {
            for (target, level) in more.iter() {
                filter = filter.with_target(target.to_owned(), level);
            }
        }
        let subscriber =
            tracing_subscriber::registry().with(Capture(lines.clone()).with_filter(filter));
        // A process that installed its own subscriber first keeps it; the simulation's lines
        // are then not seen, and every check fails loudly rather than passing on nothing.
        let _ = tracing::subscriber::set_global_default(subscriber);
        lines
    })
}

/// Starts capturing (installs the process's subscriber on first use) and forgets earlier lines.
pub fn reset() {
    lines().0.lock().clear();
}

/// Notes something the driver did, in its place among the lines.
pub fn note(what: String) {
    if dump() {
        let at = turmoil::sim_elapsed().map_or(-1.0, |d| d.as_secs_f64());
        eprintln!("{at:9.3} NOTE {what}");
    }
    lines().0.lock().push(Seen::Note(what));
}

/// Everything seen since the last [`reset`], in order.
pub fn take() -> Vec<Seen> {
    std::mem::take(&mut *lines().0.lock())
}

/// The plugins' lines alone, in order.
pub fn revs(seen: &[Seen]) -> Vec<Rev> {
    seen.iter()
        .filter_map(|s| match s {
            Seen::Rev(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}
