//! client-go's workqueue metrics (as kubernetes/component-base registers them), kept in a small
//! registry that renders the Prometheus text exposition format (spec 5.7).
//!
//! Why a registry of our own: the host serves `/metrics` for many queues (one label set per
//! plugin) and only needs counters, gauges and fixed-bucket histograms. The hot path is a few
//! relaxed atomics per add/get/done; the gauges that client-go refreshes from a ticker
//! goroutine (depth, unfinished work, longest running processor) are computed from the queue's
//! own state when the registry is rendered, so an idle queue costs nothing.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tokio::time::Instant;

/// Upper bounds of the queue and work duration histograms: client-go's
/// `ExponentialBuckets(10e-9, 10, 10)`, i.e. 10 ns … 10 s by factors of ten.
pub const DURATION_BUCKETS: [f64; 10] = [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0];

/// The `le` labels exactly as the Go Prometheus client prints those bounds, so dashboards and
/// recording rules written against client-go controllers match series for series.
const DURATION_BUCKET_LABELS: [&str; 10] = [
    "1e-08", "1e-07", "1e-06", "1e-05", "0.0001", "0.001", "0.01", "0.1", "1", "10",
];

/// Why a queue could not be registered.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MetricsError {
    /// Two live queues with one name would emit duplicate series, which Prometheus rejects.
    #[error("a workqueue named {0:?} is already registered")]
    DuplicateName(String),
}

/// A histogram with [`DURATION_BUCKETS`]; per-bucket (non-cumulative) counts so an observation is
/// one `fetch_add` plus the sum update.
pub(crate) struct Histogram {
    buckets: [AtomicU64; DURATION_BUCKETS.len() + 1],
    sum_bits: AtomicU64,
}

impl Histogram {
    fn new() -> Self {
        Self {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_bits: AtomicU64::new(0f64.to_bits()),
        }
    }

    pub(crate) fn observe(&self, seconds: f64) {
        let idx = DURATION_BUCKETS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(DURATION_BUCKETS.len());
        self.buckets[idx].fetch_add(1, Ordering::Relaxed);
        // A CAS loop is the only portable way to add to an f64 atomically; contention is limited
        // to workers finishing at the same instant.
        let _ = self
            .sum_bits
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + seconds).to_bits())
            });
    }

    #[cfg(test)]
    fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }

    fn sum(&self) -> f64 {
        f64::from_bits(self.sum_bits.load(Ordering::Relaxed))
    }
}

/// The per-queue metric state that is updated on the hot path.
pub(crate) struct QueueMetrics {
    name: Box<str>,
    /// The name escaped for a label value once, at registration.
    label: Box<str>,
    pub(crate) adds: AtomicU64,
    pub(crate) retries: AtomicU64,
    pub(crate) queue_duration: Histogram,
    pub(crate) work_duration: Histogram,
}

impl QueueMetrics {
    pub(crate) fn new(name: &str) -> Self {
        Self {
            name: name.into(),
            label: escape_label_value(name).into(),
            adds: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            queue_duration: Histogram::new(),
            work_duration: Histogram::new(),
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }
}

/// Gauges read from the queue's state at render time.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct InFlight {
    /// Items added and not yet handed to a worker (client-go counts an item re-added while it is
    /// being processed here too).
    pub(crate) depth: u64,
    /// Sum over items being processed of how long they have been processing.
    pub(crate) unfinished_seconds: f64,
    /// The longest of those.
    pub(crate) longest_running_seconds: f64,
}

/// The gauges the registry reads from a queue; implemented by the queue's shared state so the
/// registry can hold it weakly and forget queues that were dropped.
pub(crate) trait InFlightSource: Send + Sync {
    fn in_flight(&self, now: Instant) -> InFlight;
}

struct Entry {
    metrics: Arc<QueueMetrics>,
    source: Weak<dyn InFlightSource>,
}

/// A set of named workqueues whose metrics render together as one Prometheus exposition.
///
/// Cloning is cheap and shares the set. Queues are held weakly: a dropped queue disappears from
/// the output, which is what a host unloading a plugin wants.
#[derive(Clone, Default)]
pub struct Registry {
    entries: Arc<Mutex<Vec<Entry>>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("queues", &self.queue_names())
            .finish()
    }
}

type Live = (Arc<QueueMetrics>, Arc<dyn InFlightSource>);

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn register(
        &self,
        metrics: Arc<QueueMetrics>,
        source: Weak<dyn InFlightSource>,
    ) -> Result<(), MetricsError> {
        let mut entries = self.entries.lock();
        entries.retain(|e| e.source.strong_count() > 0);
        if entries.iter().any(|e| e.metrics.name() == metrics.name()) {
            return Err(MetricsError::DuplicateName(metrics.name().to_owned()));
        }
        entries.push(Entry { metrics, source });
        Ok(())
    }

    fn live(&self) -> Vec<Live> {
        let mut entries = self.entries.lock();
        entries.retain(|e| e.source.strong_count() > 0);
        let mut live: Vec<Live> = entries
            .iter()
            .filter_map(|e| Some((Arc::clone(&e.metrics), e.source.upgrade()?)))
            .collect();
        drop(entries);
        live.sort_by(|a, b| a.0.name().cmp(b.0.name()));
        live
    }

    /// Names of the live queues, sorted.
    pub fn queue_names(&self) -> Vec<String> {
        self.live()
            .iter()
            .map(|(m, _)| m.name().to_owned())
            .collect()
    }

    /// The Prometheus text exposition (format 0.0.4) of every live queue.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.render_into(&mut out);
        out
    }

    /// Appends the exposition to `out`, for a server that reuses its buffer.
    pub fn render_into(&self, out: &mut String) {
        let live = self.live();
        if live.is_empty() {
            return;
        }
        let now = Instant::now();
        let gauges: Vec<InFlight> = live.iter().map(|(_, s)| s.in_flight(now)).collect();
        let rows = || live.iter().map(|(m, _)| &**m).zip(gauges.iter());

        header(
            out,
            "workqueue_depth",
            "gauge",
            "Items waiting in the workqueue for a worker.",
        );
        for (m, g) in rows() {
            sample(out, "workqueue_depth", m, g.depth as f64);
        }
        header(
            out,
            "workqueue_adds_total",
            "counter",
            "Adds accepted by the workqueue, not counting deduplicated ones.",
        );
        for (m, _) in rows() {
            sample(
                out,
                "workqueue_adds_total",
                m,
                m.adds.load(Ordering::Relaxed) as f64,
            );
        }
        header(
            out,
            "workqueue_queue_duration_seconds",
            "histogram",
            "Seconds an item waited in the workqueue before a worker took it.",
        );
        for (m, _) in rows() {
            histogram(
                out,
                "workqueue_queue_duration_seconds",
                m,
                &m.queue_duration,
            );
        }
        header(
            out,
            "workqueue_work_duration_seconds",
            "histogram",
            "Seconds a worker held an item, from get to done.",
        );
        for (m, _) in rows() {
            histogram(out, "workqueue_work_duration_seconds", m, &m.work_duration);
        }
        header(
            out,
            "workqueue_unfinished_work_seconds",
            "gauge",
            "Summed seconds that items still being processed have been running; steady growth means stuck workers.",
        );
        for (m, g) in rows() {
            sample(
                out,
                "workqueue_unfinished_work_seconds",
                m,
                g.unfinished_seconds,
            );
        }
        header(
            out,
            "workqueue_longest_running_processor_seconds",
            "gauge",
            "Seconds the longest-running item still being processed has been running.",
        );
        for (m, g) in rows() {
            sample(
                out,
                "workqueue_longest_running_processor_seconds",
                m,
                g.longest_running_seconds,
            );
        }
        header(
            out,
            "workqueue_retries_total",
            "counter",
            "Delayed re-adds (add_after, add_rate_limited) handled by the workqueue.",
        );
        for (m, _) in rows() {
            sample(
                out,
                "workqueue_retries_total",
                m,
                m.retries.load(Ordering::Relaxed) as f64,
            );
        }
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, m: &QueueMetrics, value: f64) {
    let _ = write!(out, "{name}{{name=\"{}\"}} ", m.label);
    write_float(out, value);
    out.push('\n');
}

fn histogram(out: &mut String, name: &str, m: &QueueMetrics, h: &Histogram) {
    let mut cumulative = 0u64;
    for (bucket, le) in h.buckets.iter().zip(DURATION_BUCKET_LABELS) {
        cumulative += bucket.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "{name}_bucket{{name=\"{}\",le=\"{le}\"}} {cumulative}",
            m.label
        );
    }
    // Read the total once so `+Inf` and `_count` agree even while workers observe.
    let count = cumulative + h.buckets[DURATION_BUCKETS.len()].load(Ordering::Relaxed);
    let _ = writeln!(
        out,
        "{name}_bucket{{name=\"{}\",le=\"+Inf\"}} {count}",
        m.label
    );
    let _ = write!(out, "{name}_sum{{name=\"{}\"}} ", m.label);
    write_float(out, h.sum());
    out.push('\n');
    let _ = writeln!(out, "{name}_count{{name=\"{}\"}} {count}", m.label);
}

/// Prometheus floats: `+Inf`/`-Inf`/`NaN` spelled its way, integers without a fraction, tiny or
/// huge values in exponent form rather than hundreds of digits.
fn write_float(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else if v == v.trunc() && v.abs() < 1e15 {
        let _ = write!(out, "{}", v as i64);
    } else if v.abs() < 1e-4 || v.abs() >= 1e15 {
        let _ = write!(out, "{v:e}");
    } else {
        let _ = write!(out, "{v}");
    }
}

/// Label values escape backslash, double quote and newline (text format 0.0.4).
fn escape_label_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_5_7_bucket_bounds_are_client_go_exponential_buckets() {
        // ExponentialBuckets(10e-9, 10, 10): start 1e-8, factor 10, ten buckets.
        let mut expected = 1e-8;
        for bound in DURATION_BUCKETS {
            assert!(
                (bound - expected).abs() <= expected * 1e-12,
                "{bound} vs {expected}"
            );
            expected *= 10.0;
        }
        for (bound, label) in DURATION_BUCKETS.iter().zip(DURATION_BUCKET_LABELS) {
            let parsed: f64 = label.parse().expect("static label parses");
            assert_eq!(parsed, *bound);
        }
    }

    #[test]
    fn histogram_places_observations_in_the_first_bucket_that_holds_them() {
        let h = Histogram::new();
        h.observe(1e-8); // boundary is inclusive (le)
        h.observe(0.5);
        h.observe(100.0); // only +Inf
        assert_eq!(h.buckets[0].load(Ordering::Relaxed), 1);
        assert_eq!(h.buckets[8].load(Ordering::Relaxed), 1);
        assert_eq!(h.buckets[10].load(Ordering::Relaxed), 1);
        assert_eq!(h.count(), 3);
        assert!((h.sum() - 100.50000001).abs() < 1e-9);
    }

    #[test]
    fn floats_render_in_prometheus_syntax() {
        let cases = [
            (0.0, "0"),
            (3.0, "3"),
            (0.25, "0.25"),
            (1e-8, "1e-8"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
            (f64::NAN, "NaN"),
        ];
        for (v, want) in cases {
            let mut s = String::new();
            write_float(&mut s, v);
            assert_eq!(s, want);
        }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    mod with_queues {
        use std::time::Duration;

        use super::super::*;
        use crate::workqueue::{DelayingQueue, Queue};

        fn line<'a>(text: &'a str, prefix: &str) -> &'a str {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("no line starting {prefix:?} in\n{text}"))
        }

        #[tokio::test(start_paused = true)]
        async fn spec_5_7_named_queue_exports_every_client_go_metric() {
            let registry = Registry::new();
            let q = DelayingQueue::named("plugin-a", &registry).expect("registered");
            q.add("x");
            q.add("x"); // deduplicated: not an add
            q.add("y");
            tokio::time::advance(Duration::from_millis(20)).await;
            let x = q.get().await.expect("x");
            tokio::time::advance(Duration::from_secs(2)).await;
            q.done(&x);
            let y = q.get().await.expect("y");
            tokio::time::advance(Duration::from_secs(3)).await;
            q.add_after("z", Duration::from_secs(1));

            let text = registry.render();
            for family in [
                "workqueue_depth",
                "workqueue_adds_total",
                "workqueue_queue_duration_seconds",
                "workqueue_work_duration_seconds",
                "workqueue_unfinished_work_seconds",
                "workqueue_longest_running_processor_seconds",
                "workqueue_retries_total",
            ] {
                assert_eq!(
                    text.matches(&format!("# TYPE {family} ")).count(),
                    1,
                    "{family}"
                );
            }
            assert_eq!(
                line(&text, "workqueue_depth{"),
                "workqueue_depth{name=\"plugin-a\"} 0"
            );
            assert_eq!(
                line(&text, "workqueue_adds_total{"),
                "workqueue_adds_total{name=\"plugin-a\"} 2"
            );
            assert_eq!(
                line(&text, "workqueue_retries_total{"),
                "workqueue_retries_total{name=\"plugin-a\"} 1"
            );
            // x waited 20 ms, y 2.02 s in the queue.
            assert_eq!(
                line(
                    &text,
                    "workqueue_queue_duration_seconds_bucket{name=\"plugin-a\",le=\"0.01\"}"
                ),
                "workqueue_queue_duration_seconds_bucket{name=\"plugin-a\",le=\"0.01\"} 0"
            );
            assert_eq!(
                line(
                    &text,
                    "workqueue_queue_duration_seconds_bucket{name=\"plugin-a\",le=\"0.1\"}"
                ),
                "workqueue_queue_duration_seconds_bucket{name=\"plugin-a\",le=\"0.1\"} 1"
            );
            assert_eq!(
                line(
                    &text,
                    "workqueue_queue_duration_seconds_bucket{name=\"plugin-a\",le=\"+Inf\"}"
                ),
                "workqueue_queue_duration_seconds_bucket{name=\"plugin-a\",le=\"+Inf\"} 2"
            );
            assert_eq!(
                line(&text, "workqueue_queue_duration_seconds_sum{"),
                "workqueue_queue_duration_seconds_sum{name=\"plugin-a\"} 2.04"
            );
            assert_eq!(
                line(&text, "workqueue_queue_duration_seconds_count{"),
                "workqueue_queue_duration_seconds_count{name=\"plugin-a\"} 2"
            );
            // x was worked on for 2 s.
            assert_eq!(
                line(
                    &text,
                    "workqueue_work_duration_seconds_bucket{name=\"plugin-a\",le=\"1\"}"
                ),
                "workqueue_work_duration_seconds_bucket{name=\"plugin-a\",le=\"1\"} 0"
            );
            assert_eq!(
                line(
                    &text,
                    "workqueue_work_duration_seconds_bucket{name=\"plugin-a\",le=\"10\"}"
                ),
                "workqueue_work_duration_seconds_bucket{name=\"plugin-a\",le=\"10\"} 1"
            );
            // y has been processing for 3 s and is the only one.
            assert_eq!(
                line(&text, "workqueue_unfinished_work_seconds{"),
                "workqueue_unfinished_work_seconds{name=\"plugin-a\"} 3"
            );
            assert_eq!(
                line(&text, "workqueue_longest_running_processor_seconds{"),
                "workqueue_longest_running_processor_seconds{name=\"plugin-a\"} 3"
            );
            q.done(&y);
            let text = registry.render();
            assert_eq!(
                line(&text, "workqueue_unfinished_work_seconds{"),
                "workqueue_unfinished_work_seconds{name=\"plugin-a\"} 0"
            );
        }

        #[tokio::test]
        async fn spec_5_7_depth_counts_items_readded_while_processing() {
            let registry = Registry::new();
            let q = Queue::named("q", &registry).expect("registered");
            q.add(1);
            let one = q.get().await.expect("1");
            q.add(1);
            q.add(2);
            assert!(registry
                .render()
                .contains("workqueue_depth{name=\"q\"} 2\n"));
            q.done(&one);
        }

        #[tokio::test]
        async fn spec_5_7_unnamed_queue_records_nothing() {
            let registry = Registry::new();
            let unnamed = Queue::named("", &registry).expect("empty name is allowed");
            let plain: Queue<u8> = Queue::new();
            unnamed.add(1u8);
            plain.add(1);
            assert_eq!(unnamed.name(), None);
            assert_eq!(plain.name(), None);
            assert_eq!(registry.render(), "");
            assert!(registry.queue_names().is_empty());
        }

        #[tokio::test]
        async fn one_registry_renders_many_queues_once_per_family() {
            let registry = Registry::new();
            let b = Queue::named("b", &registry).expect("b");
            let a = Queue::named("a\"quoted", &registry).expect("a");
            a.add(1);
            b.add(1);
            b.add(2);
            let text = registry.render();
            assert_eq!(text.matches("# HELP workqueue_adds_total ").count(), 1);
            let adds: Vec<_> = text
                .lines()
                .filter(|l| l.starts_with("workqueue_adds_total{"))
                .collect();
            assert_eq!(
                adds,
                [
                    "workqueue_adds_total{name=\"a\\\"quoted\"} 1",
                    "workqueue_adds_total{name=\"b\"} 2"
                ]
            );
            assert_eq!(
                Queue::<u8>::named("b", &registry).err(),
                Some(MetricsError::DuplicateName("b".into()))
            );
            drop(b);
            // A dropped queue leaves the exposition and frees its name.
            assert_eq!(registry.queue_names(), ["a\"quoted"]);
            let _b2 = Queue::<u8>::named("b", &registry).expect("name free again");
        }
    }
}
