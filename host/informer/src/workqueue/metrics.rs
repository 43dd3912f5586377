//! client-go's workqueue metrics (as kubernetes/component-base registers them), encoded by
//! `prometheus-client` in the OpenMetrics text format (spec 5.7).
//!
//! Why a [`Collector`] over our own atomics rather than prometheus-client's metric types: its
//! `Family` takes a lock to find a label set and its `Histogram` locks on every observation, while
//! the queue's hot path here is a few relaxed atomics per add/get/done and nothing else. The
//! collector reads those atomics when scraped; the gauges that client-go refreshes from a ticker
//! goroutine (depth, unfinished work, longest running processor) are computed from the queue's
//! own state at the same moment, so an idle queue costs nothing.
//!
//! Names, the `name` label and the bucket bounds are client-go's. Two spellings differ from a Go
//! process's text format: a counter's `TYPE` line names the family without `_total` (OpenMetrics;
//! the samples keep it), and `le` values are printed as prometheus-client prints floats (`1.0`,
//! `1e-8` where Go writes `1`, `1e-08`). Prometheus 3 normalises `le` when it ingests a classic
//! histogram, so the series match there; a query matching `le` as a literal string may not.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Unit;
use tokio::time::Instant;

/// Upper bounds of the queue and work duration histograms: client-go's
/// `ExponentialBuckets(10e-9, 10, 10)`, i.e. 10 ns … 10 s by factors of ten.
pub const DURATION_BUCKETS: [f64; 10] = [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0];

/// Buckets of a duration histogram: one per bound, then `+Inf`.
const DURATION_SLOTS: usize = DURATION_BUCKETS.len() + 1;

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
    buckets: [AtomicU64; DURATION_SLOTS],
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

    fn snapshot(&self) -> HistogramSnapshot<DURATION_SLOTS> {
        HistogramSnapshot::read(
            &DURATION_BUCKETS,
            &self.buckets,
            f64::from_bits(self.sum_bits.load(Ordering::Relaxed)),
        )
    }
}

/// A fixed-bucket histogram read from its atomics at scrape time, for prometheus-client to
/// encode. `B` counts every bucket, `+Inf` included.
///
/// Public because the plugin runtime keeps its reconcile-duration histogram the same way (per
/// bucket atomics, no lock) and encodes it with this.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot<const B: usize> {
    /// Upper bound and the bucket's own (not cumulative) count; the last bound is `+Inf`.
    buckets: [(f64, u64); B],
    sum: f64,
}

impl<const B: usize> HistogramSnapshot<B> {
    /// Loads `counts` (per-bucket counts; one more than `bounds`, the last being `+Inf`).
    pub fn read(bounds: &[f64], counts: &[AtomicU64; B], sum: f64) -> Self {
        debug_assert_eq!(bounds.len() + 1, B, "one bucket per bound, then +Inf");
        Self {
            buckets: std::array::from_fn(|i| {
                let bound = match bounds.get(i) {
                    Some(b) if i + 1 < B => *b,
                    _ => f64::INFINITY,
                };
                (bound, counts[i].load(Ordering::Relaxed))
            }),
            sum,
        }
    }

    /// Upper bounds with each bucket's own count, `+Inf` last.
    pub fn buckets(&self) -> &[(f64, u64)] {
        &self.buckets
    }

    /// Sum of the observations.
    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// Number of observations: the buckets' total, so `_count` and `+Inf` always agree.
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|(_, n)| n).sum()
    }
}

impl<const B: usize> TypedMetric for HistogramSnapshot<B> {
    const TYPE: MetricType = MetricType::Histogram;
}

impl<const B: usize> EncodeMetric for HistogramSnapshot<B> {
    fn encode(&self, mut encoder: MetricEncoder) -> fmt::Result {
        encoder.encode_histogram::<NoLabelSet>(self.sum, self.count(), &self.buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// Writes one metric family: its descriptor once, then one series per `(labels, metric)`, so
/// the family's samples stay together as OpenMetrics requires. Counters are named without
/// `_total`; the encoder appends it.
pub fn encode_family<S, M>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    series: impl IntoIterator<Item = (S, M)>,
) -> fmt::Result
where
    S: EncodeLabelSet,
    M: EncodeMetric + TypedMetric,
{
    let mut family = encoder.encode_descriptor(name, help, unit, M::TYPE)?;
    for (labels, metric) in series {
        metric.encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// The per-queue metric state that is updated on the hot path.
pub(crate) struct QueueMetrics {
    name: Box<str>,
    pub(crate) adds: AtomicU64,
    pub(crate) retries: AtomicU64,
    pub(crate) queue_duration: Histogram,
    pub(crate) work_duration: Histogram,
}

impl QueueMetrics {
    pub(crate) fn new(name: &str) -> Self {
        Self {
            name: name.into(),
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

/// Gauges read from the queue's state at scrape time.
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
    /// Shut down: its name may be taken by a new queue while it drains.
    fn is_shut_down(&self) -> bool;
}

struct Entry {
    metrics: Arc<QueueMetrics>,
    source: Weak<dyn InFlightSource>,
}

/// A set of named workqueues whose metrics are scraped together: a prometheus-client
/// [`Collector`], to register with
/// [`QueuesCollector::register_collector`](prometheus_client::registry::Registry::register_collector).
///
/// Cloning is cheap and shares the set. Queues are held weakly: a dropped queue disappears from
/// the output, which is what a host unloading a plugin wants.
#[derive(Clone, Default)]
pub struct QueuesCollector {
    entries: Arc<Mutex<Vec<Entry>>>,
}

impl fmt::Debug for QueuesCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueuesCollector")
            .field("queues", &self.queue_names())
            .finish()
    }
}

type Live = (Arc<QueueMetrics>, Arc<dyn InFlightSource>);

impl QueuesCollector {
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
        if let Some(i) = entries
            .iter()
            .position(|e| e.metrics.name() == metrics.name())
        {
            // A queue shut down may still be held while its plugin's last instances are
            // discarded; a plugin removed and added again takes its name over at once.
            if !entries[i]
                .source
                .upgrade()
                .is_some_and(|s| s.is_shut_down())
            {
                return Err(MetricsError::DuplicateName(metrics.name().to_owned()));
            }
            entries.remove(i);
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
}

/// client-go's only label on workqueue metrics.
fn name_label(m: &QueueMetrics) -> [(&'static str, &str); 1] {
    [("name", m.name())]
}

impl Collector for QueuesCollector {
    /// Every family is written only when some queue is live, so a host without named queues
    /// exposes no empty workqueue families.
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let live = self.live();
        if live.is_empty() {
            return Ok(());
        }
        let now = Instant::now();
        let rows: Vec<(&QueueMetrics, InFlight)> =
            live.iter().map(|(m, s)| (&**m, s.in_flight(now))).collect();
        let seconds = Some(&Unit::Seconds);

        encode_family(
            &mut encoder,
            "workqueue_depth",
            "Items waiting in the workqueue for a worker.",
            None,
            rows.iter()
                .map(|(m, g)| (name_label(m), ConstGauge::new(g.depth))),
        )?;
        encode_family(
            &mut encoder,
            "workqueue_adds",
            "Adds accepted by the workqueue, not counting deduplicated ones.",
            None,
            rows.iter().map(|(m, _)| {
                (
                    name_label(m),
                    ConstCounter::new(m.adds.load(Ordering::Relaxed)),
                )
            }),
        )?;
        encode_family(
            &mut encoder,
            "workqueue_queue_duration",
            "Seconds an item waited in the workqueue before a worker took it.",
            seconds,
            rows.iter()
                .map(|(m, _)| (name_label(m), m.queue_duration.snapshot())),
        )?;
        encode_family(
            &mut encoder,
            "workqueue_work_duration",
            "Seconds a worker held an item, from get to done.",
            seconds,
            rows.iter()
                .map(|(m, _)| (name_label(m), m.work_duration.snapshot())),
        )?;
        encode_family(
            &mut encoder,
            "workqueue_unfinished_work",
            "Summed seconds that items still being processed have been running; steady growth means stuck workers.",
            seconds,
            rows.iter()
                .map(|(m, g)| (name_label(m), ConstGauge::new(g.unfinished_seconds))),
        )?;
        encode_family(
            &mut encoder,
            "workqueue_longest_running_processor",
            "Seconds the longest-running item still being processed has been running.",
            seconds,
            rows.iter()
                .map(|(m, g)| (name_label(m), ConstGauge::new(g.longest_running_seconds))),
        )?;
        encode_family(
            &mut encoder,
            "workqueue_retries",
            "Delayed re-adds (add_after, add_rate_limited) handled by the workqueue.",
            None,
            rows.iter().map(|(m, _)| {
                (
                    name_label(m),
                    ConstCounter::new(m.retries.load(Ordering::Relaxed)),
                )
            }),
        )
    }
}

/// The OpenMetrics exposition of `registry` alone, as a scrape would return it.
#[cfg(test)]
pub(crate) fn exposition(registry: &QueuesCollector) -> String {
    let mut om = prometheus_client::registry::Registry::default();
    om.register_collector(Box::new(registry.clone()));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &om).expect("a String never refuses");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One sample line: metric name, labels as written, value.
    #[derive(Debug)]
    struct Sample {
        name: String,
        labels: Vec<(String, String)>,
        value: f64,
    }

    /// Parses the sample lines of an exposition (comments skipped), undoing label escapes.
    fn samples(text: &str) -> Vec<Sample> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .map(|line| {
                let (series, value) = line.rsplit_once(' ').expect("value");
                let (name, labels) = match series.split_once('{') {
                    Some((name, rest)) => (name, parse_labels(rest.strip_suffix('}').expect("}"))),
                    None => (series, Vec::new()),
                };
                Sample {
                    name: name.to_owned(),
                    labels,
                    value: value
                        .replace("+Inf", "inf")
                        .parse()
                        .unwrap_or_else(|e| panic!("{line:?}: {e}")),
                }
            })
            .collect()
    }

    fn parse_labels(mut rest: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        while !rest.is_empty() {
            let (key, after) = rest.split_once("=\"").expect("key=\"");
            let mut value = String::new();
            let mut chars = after.char_indices();
            let end = loop {
                match chars.next().expect("closing quote") {
                    (_, '\\') => match chars.next().expect("escaped char").1 {
                        'n' => value.push('\n'),
                        c => value.push(c),
                    },
                    (i, '"') => break i,
                    (_, c) => value.push(c),
                }
            };
            out.push((key.to_owned(), value));
            rest = after[end + 1..].trim_start_matches(',');
        }
        out
    }

    /// The value of the one sample named `name` whose labels are exactly `labels`, in any order.
    fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
        let matching: Vec<_> = samples
            .iter()
            .filter(|s| {
                s.name == name
                    && s.labels.len() == labels.len()
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
            })
            .collect();
        match matching[..] {
            [one] => one.value,
            _ => panic!(
                "{} samples {name}{labels:?} in {samples:#?}",
                matching.len()
            ),
        }
    }

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
    }

    #[test]
    fn histogram_places_observations_in_the_first_bucket_that_holds_them() {
        let h = Histogram::new();
        h.observe(1e-8); // boundary is inclusive (le)
        h.observe(0.5);
        h.observe(100.0); // only +Inf
        let snap = h.snapshot();
        let counts: Vec<u64> = snap.buckets().iter().map(|(_, n)| *n).collect();
        assert_eq!(counts, [1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1]);
        let bounds: Vec<f64> = snap.buckets().iter().map(|(b, _)| *b).collect();
        assert_eq!(bounds[..10], DURATION_BUCKETS);
        assert_eq!(bounds[10], f64::INFINITY);
        assert_eq!(snap.count(), 3);
        assert!((snap.sum() - 100.50000001).abs() < 1e-9);
    }

    #[test]
    fn an_empty_registry_encodes_only_the_eof_marker() {
        assert_eq!(exposition(&QueuesCollector::new()), "# EOF\n");
    }

    mod with_queues {
        use std::time::Duration;

        use super::super::*;
        use super::{samples, value};
        use crate::workqueue::{DelayingQueue, Queue};

        #[tokio::test(start_paused = true)]
        async fn spec_5_7_named_queue_exports_every_client_go_metric() {
            let registry = QueuesCollector::new();
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

            let text = exposition(&registry);
            assert!(text.ends_with("\n# EOF\n"), "{text}");
            // OpenMetrics names a counter family without `_total` and a seconds family with
            // its unit; the sample names are client-go's.
            for (family, kind) in [
                ("workqueue_depth", "gauge"),
                ("workqueue_adds", "counter"),
                ("workqueue_queue_duration_seconds", "histogram"),
                ("workqueue_work_duration_seconds", "histogram"),
                ("workqueue_unfinished_work_seconds", "gauge"),
                ("workqueue_longest_running_processor_seconds", "gauge"),
                ("workqueue_retries", "counter"),
            ] {
                assert_eq!(
                    text.matches(&format!("# TYPE {family} ")).count(),
                    1,
                    "{family}"
                );
                assert!(
                    text.contains(&format!("# TYPE {family} {kind}\n")),
                    "{family}"
                );
                assert_eq!(
                    text.contains(&format!("# UNIT {family} seconds\n")),
                    family.ends_with("_seconds"),
                    "{family}"
                );
            }
            let s = samples(&text);
            let a = [("name", "plugin-a")];
            assert!(s.iter().all(|s| s.labels[..]
                .iter()
                .any(|(k, v)| k == "name" && v == "plugin-a")));
            assert_eq!(value(&s, "workqueue_depth", &a), 0.0);
            assert_eq!(value(&s, "workqueue_adds_total", &a), 2.0);
            assert_eq!(value(&s, "workqueue_retries_total", &a), 1.0);
            // x waited 20 ms, y 2.02 s in the queue.
            let queued = "workqueue_queue_duration_seconds";
            let bucket = |name: &str, le: &str| {
                value(
                    &s,
                    &format!("{name}_bucket"),
                    &[("name", "plugin-a"), ("le", le)],
                )
            };
            let les: Vec<f64> = s
                .iter()
                .filter(|s| s.name == format!("{queued}_bucket"))
                .map(|s| {
                    let le = &s.labels.iter().find(|(k, _)| k == "le").expect("le").1;
                    le.replace("+Inf", "inf").parse().expect("le is a float")
                })
                .collect();
            assert_eq!(les[..10], DURATION_BUCKETS, "client-go's bounds, in order");
            assert_eq!(les[10..], [f64::INFINITY]);
            // Cumulative counts: nothing by 10 ms, x by 100 ms, both by 10 s.
            assert_eq!(bucket(queued, "0.01"), 0.0);
            assert_eq!(bucket(queued, "0.1"), 1.0);
            assert_eq!(bucket(queued, "1.0"), 1.0);
            assert_eq!(bucket(queued, "10.0"), 2.0);
            assert_eq!(bucket(queued, "+Inf"), 2.0);
            assert!((value(&s, &format!("{queued}_sum"), &a) - 2.04).abs() < 1e-9);
            assert_eq!(value(&s, &format!("{queued}_count"), &a), 2.0);
            // x was worked on for 2 s.
            let work = "workqueue_work_duration_seconds";
            assert_eq!(bucket(work, "1.0"), 0.0);
            assert_eq!(bucket(work, "10.0"), 1.0);
            assert_eq!(value(&s, &format!("{work}_sum"), &a), 2.0);
            assert_eq!(value(&s, &format!("{work}_count"), &a), 1.0);
            // y has been processing for 3 s and is the only one.
            assert_eq!(value(&s, "workqueue_unfinished_work_seconds", &a), 3.0);
            assert_eq!(
                value(&s, "workqueue_longest_running_processor_seconds", &a),
                3.0
            );
            // `done_at` takes the end of the work as the caller read it: y's 3.5 s.
            q.done_at(&y, tokio::time::Instant::now() + Duration::from_millis(500));
            let s = samples(&exposition(&registry));
            assert_eq!(value(&s, "workqueue_unfinished_work_seconds", &a), 0.0);
            assert_eq!(value(&s, "workqueue_work_duration_seconds_count", &a), 2.0);
            assert_eq!(value(&s, "workqueue_work_duration_seconds_sum", &a), 5.5);
        }

        #[tokio::test]
        async fn spec_5_7_depth_counts_items_readded_while_processing() {
            let registry = QueuesCollector::new();
            let q = Queue::named("q", &registry).expect("registered");
            q.add(1);
            let one = q.get().await.expect("1");
            q.add(1);
            q.add(2);
            let s = samples(&exposition(&registry));
            assert_eq!(value(&s, "workqueue_depth", &[("name", "q")]), 2.0);
            q.done(&one);
        }

        #[tokio::test]
        async fn spec_5_7_unnamed_queue_records_nothing() {
            let registry = QueuesCollector::new();
            let unnamed = Queue::named("", &registry).expect("empty name is allowed");
            let plain: Queue<u8> = Queue::new();
            unnamed.add(1u8);
            plain.add(1);
            assert_eq!(unnamed.name(), None);
            assert_eq!(plain.name(), None);
            assert_eq!(exposition(&registry), "# EOF\n");
            assert!(registry.queue_names().is_empty());
        }

        #[tokio::test]
        async fn one_registry_encodes_many_queues_once_per_family() {
            let registry = QueuesCollector::new();
            let b = Queue::named("b", &registry).expect("b");
            let a = Queue::named("a\"quoted", &registry).expect("a");
            a.add(1);
            b.add(1);
            b.add(2);
            let text = exposition(&registry);
            assert_eq!(text.matches("# HELP workqueue_adds ").count(), 1);
            let adds: Vec<_> = text
                .lines()
                .filter(|l| l.starts_with("workqueue_adds_total{"))
                .collect();
            // Sorted by name, the label value escaped.
            assert_eq!(
                adds,
                [
                    "workqueue_adds_total{name=\"a\\\"quoted\"} 1",
                    "workqueue_adds_total{name=\"b\"} 2"
                ]
            );
            let s = samples(&text);
            assert_eq!(
                value(&s, "workqueue_adds_total", &[("name", "a\"quoted")]),
                1.0
            );
            assert_eq!(
                Queue::<u8>::named("b", &registry).err(),
                Some(MetricsError::DuplicateName("b".into()))
            );
            // A queue shut down but still held gives its name over to a new one.
            b.shutdown();
            let b_again =
                Queue::<u8>::named("b", &registry).expect("a shut-down queue's name is free");
            assert_eq!(registry.queue_names(), ["a\"quoted", "b"]);
            drop(b_again);
            drop(b);
            // A dropped queue leaves the exposition and frees its name.
            assert_eq!(registry.queue_names(), ["a\"quoted"]);
            assert!(!exposition(&registry).contains("name=\"b\""));
            let _b2 = Queue::<u8>::named("b", &registry).expect("name free again");
        }
    }
}
