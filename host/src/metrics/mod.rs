//! Prometheus metrics (`metrics_address`): one registry for the whole
//! library, so that every instance in one runtime shows on one endpoint,
//! each series labelled with its `instance` (the runtime's connector id).
//! An instance gets its handles once at open ([`InstanceMetrics`]); the hot
//! path only increments atomics and observes histograms. Routed tables
//! beyond [`MAX_TABLE_LABELS`] per instance share the label `other`.
//!
//! - [`server`]: the HTTP endpoint (`GET /metrics`, Prometheus text).

pub(crate) mod server;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::rows::DeadLetterKind;
use crate::schema::TablePath;

/// Routed tables one instance labels by name; the rest are `other`.
pub(crate) const MAX_TABLE_LABELS: usize = 32;

type Labels = Vec<(&'static str, String)>;

fn histogram_from_50us() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.0, 18))
}

fn histogram_from_1ms() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// Every metric family of the library.
struct Families {
    registry: Registry,
    received: Family<Labels, Counter>,
    written: Family<Labels, Counter>,
    filtered: Family<Labels, Counter>,
    dead_lettered: Family<Labels, Counter>,
    rows_written: Family<Labels, Counter>,
    consume_calls: Family<Labels, Counter>,
    consume_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    transform_call_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    transform_faults: Family<Labels, Counter>,
    ack_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    retries: Family<Labels, Counter>,
    in_flight: Family<Labels, Gauge>,
    transform_version: Family<Labels, Gauge>,
    reloads: Family<Labels, Counter>,
    spool_bytes: Family<Labels, Gauge>,
    spool_batches: Family<Labels, Gauge>,
    spool_oldest_age: Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    spool_replayed: Family<Labels, Counter>,
    spool_full: Family<Labels, Counter>,
}

fn families() -> &'static Families {
    static FAMILIES: OnceLock<Families> = OnceLock::new();
    FAMILIES.get_or_init(|| {
        let mut registry = Registry::with_prefix("fluss_sink");
        let f = Families {
            received: Family::default(),
            written: Family::default(),
            filtered: Family::default(),
            dead_lettered: Family::default(),
            rows_written: Family::default(),
            consume_calls: Family::default(),
            consume_seconds: Family::new_with_constructor(histogram_from_1ms),
            transform_call_seconds: Family::new_with_constructor(histogram_from_50us),
            transform_faults: Family::default(),
            ack_seconds: Family::new_with_constructor(histogram_from_50us),
            retries: Family::default(),
            in_flight: Family::default(),
            transform_version: Family::default(),
            reloads: Family::default(),
            spool_bytes: Family::default(),
            spool_batches: Family::default(),
            spool_oldest_age: Family::default(),
            spool_replayed: Family::default(),
            spool_full: Family::default(),
            registry: Registry::default(),
        };
        registry.register(
            "messages_received",
            "Messages handed to consume",
            f.received.clone(),
        );
        registry.register(
            "messages_written",
            "Messages whose rows Fluss acknowledged",
            f.written.clone(),
        );
        registry.register(
            "messages_filtered",
            "Messages that became no rows",
            f.filtered.clone(),
        );
        registry.register(
            "messages_dead_lettered",
            "Messages dead-lettered, by error kind",
            f.dead_lettered.clone(),
        );
        registry.register(
            "rows_written",
            "Rows acknowledged, by table",
            f.rows_written.clone(),
        );
        registry.register(
            "consume_calls",
            "consume calls with messages (empty polls return at once), by result",
            f.consume_calls.clone(),
        );
        registry.register(
            "consume_duration_seconds",
            "Time one consume call took",
            f.consume_seconds.clone(),
        );
        registry.register(
            "transform_call_duration_seconds",
            "Time one transform call (a batch_size chunk) took",
            f.transform_call_seconds.clone(),
        );
        registry.register(
            "transform_faults",
            "Transform calls that trapped, ran out of time or memory, or gave malformed output",
            f.transform_faults.clone(),
        );
        registry.register(
            "write_ack_duration_seconds",
            "Time from sending a write to Fluss's acknowledgement",
            f.ack_seconds.clone(),
        );
        registry.register(
            "write_retries",
            "Writes sent again after a transient error",
            f.retries.clone(),
        );
        registry.register(
            "messages_in_flight",
            "Messages inside consume calls now",
            f.in_flight.clone(),
        );
        registry.register(
            "transform_version",
            "1 for the transform version in force",
            f.transform_version.clone(),
        );
        registry.register(
            "transform_reloads",
            "Transform reloads, by result",
            f.reloads.clone(),
        );
        registry.register(
            "spool_bytes",
            "Bytes the spool holds on disk",
            f.spool_bytes.clone(),
        );
        registry.register(
            "spool_batches",
            "Batches queued in the spool (running first attempts past their deadline included)",
            f.spool_batches.clone(),
        );
        registry.register(
            "spool_oldest_age_seconds",
            "How long the oldest queued batch has been in the spool",
            f.spool_oldest_age.clone(),
        );
        registry.register(
            "spool_messages_replayed",
            "Spooled messages Fluss took (or that were dead-lettered) after their first deadline",
            f.spool_replayed.clone(),
        );
        registry.register(
            "spool_full_refusals",
            "Batches refused because the spool was full until their deadline (consume returned 1)",
            f.spool_full.clone(),
        );
        Families { registry, ..f }
    })
}

/// The Prometheus text of every metric of the library now.
pub(crate) fn render() -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &families().registry).expect("writing to a String");
    out
}

/// One instance's metric handles.
pub struct InstanceMetrics {
    instance: String,
    received: Counter,
    written: Counter,
    filtered: Counter,
    consume_ok: Counter,
    consume_failed: Counter,
    consume_seconds: Histogram,
    transform_call_seconds: Histogram,
    transform_faults: Counter,
    ack_seconds: Histogram,
    retries: Counter,
    in_flight: Gauge,
    reloads_ok: Counter,
    reloads_refused: Counter,
    /// Each labelled table's counter, and `other`'s.
    tables: Mutex<(HashMap<TablePath, Counter>, Option<Counter>)>,
    version: Mutex<Option<String>>,
}

impl InstanceMetrics {
    /// The handles of instance `id`.
    pub fn new(id: u32) -> Self {
        let f = families();
        let instance = id.to_string();
        let with = |extra: &[(&'static str, &str)]| -> Labels {
            let mut labels = vec![("instance", instance.clone())];
            labels.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
            labels
        };
        let only = with(&[]);
        Self {
            received: f.received.get_or_create_owned(&only),
            written: f.written.get_or_create_owned(&only),
            filtered: f.filtered.get_or_create_owned(&only),
            consume_ok: f.consume_calls.get_or_create_owned(&with(&[("result", "ok")])),
            consume_failed: f
                .consume_calls
                .get_or_create_owned(&with(&[("result", "failed")])),
            consume_seconds: f.consume_seconds.get_or_create_owned(&only),
            transform_call_seconds: f.transform_call_seconds.get_or_create_owned(&only),
            transform_faults: f.transform_faults.get_or_create_owned(&only),
            ack_seconds: f.ack_seconds.get_or_create_owned(&only),
            retries: f.retries.get_or_create_owned(&only),
            in_flight: f.in_flight.get_or_create_owned(&only),
            reloads_ok: f.reloads.get_or_create_owned(&with(&[("result", "ok")])),
            reloads_refused: f.reloads.get_or_create_owned(&with(&[("result", "refused")])),
            tables: Mutex::new((HashMap::new(), None)),
            version: Mutex::new(None),
            instance,
        }
    }

    fn labels(&self, extra: &[(&'static str, &str)]) -> Labels {
        let mut labels = vec![("instance", self.instance.clone())];
        labels.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
        labels
    }

    /// A `consume` starts with `messages`.
    pub fn consume_started(&self, messages: usize) {
        self.received.inc_by(messages as u64);
        self.in_flight.inc_by(messages as i64);
    }

    /// A `consume` of `messages` ended after `took`.
    pub fn consume_ended(&self, messages: usize, took: Duration, ok: bool) {
        self.in_flight.dec_by(messages as i64);
        self.consume_seconds.observe(took.as_secs_f64());
        if ok {
            self.consume_ok.inc();
        } else {
            self.consume_failed.inc();
        }
    }

    /// What became of a batch's messages.
    pub fn outcomes(&self, written: usize, filtered: usize) {
        self.written.inc_by(written as u64);
        self.filtered.inc_by(filtered as u64);
    }

    /// A message was dead-lettered with `kind`.
    pub fn dead_lettered(&self, kind: DeadLetterKind, count: u64) {
        families()
            .dead_lettered
            .get_or_create(&self.labels(&[("kind", kind.as_str())]))
            .inc_by(count);
    }

    /// `rows` rows of `table` were acknowledged.
    pub fn rows_written(&self, table: &TablePath, rows: u64) {
        let mut tables = self.tables.lock().expect("metrics poisoned");
        let (named, other) = &mut *tables;
        if let Some(counter) = named.get(table) {
            counter.inc_by(rows);
            return;
        }
        let family = &families().rows_written;
        if named.len() < MAX_TABLE_LABELS {
            let counter = family.get_or_create_owned(&self.labels(&[("table", &table.to_string())]));
            counter.inc_by(rows);
            named.insert(table.clone(), counter);
        } else {
            other
                .get_or_insert_with(|| family.get_or_create_owned(&self.labels(&[("table", "other")])))
                .inc_by(rows);
        }
    }

    /// One transform call took `took`.
    pub fn transform_call(&self, took: Duration) {
        self.transform_call_seconds.observe(took.as_secs_f64());
    }

    /// `count` transform calls failed.
    pub fn transform_faults(&self, count: u64) {
        self.transform_faults.inc_by(count);
    }

    /// A write was acknowledged `took` after it was sent.
    pub fn acknowledged(&self, took: Duration) {
        self.ack_seconds.observe(took.as_secs_f64());
    }

    /// `count` writes are sent again.
    pub fn retried(&self, count: u64) {
        self.retries.inc_by(count);
    }

    /// `version` is the transform in force.
    pub fn transform_version(&self, version: &str) {
        let f = families();
        let mut current = self.version.lock().expect("metrics poisoned");
        if let Some(old) = current.take() {
            f.transform_version.remove(&self.labels(&[("version", &old)]));
        }
        f.transform_version
            .get_or_create(&self.labels(&[("version", version)]))
            .set(1);
        *current = Some(version.to_string());
    }

    /// The spool holds `bytes` in `batches`, the oldest queued `oldest_secs` ago.
    pub fn spool_state(&self, bytes: u64, batches: usize, oldest_secs: f64) {
        let f = families();
        let only = self.labels(&[]);
        f.spool_bytes.get_or_create(&only).set(bytes as i64);
        f.spool_batches.get_or_create(&only).set(batches as i64);
        f.spool_oldest_age.get_or_create(&only).set(oldest_secs);
    }

    /// `messages` spooled messages were written (or dead-lettered).
    pub fn spool_replayed(&self, messages: u64) {
        families()
            .spool_replayed
            .get_or_create(&self.labels(&[]))
            .inc_by(messages);
    }

    /// A batch was refused: the spool stayed full until its deadline.
    pub fn spool_full(&self) {
        families().spool_full.get_or_create(&self.labels(&[])).inc();
    }

    /// A reload swapped a version in (`ok`) or was refused.
    pub fn reload(&self, ok: bool) {
        if ok {
            self.reloads_ok.inc();
        } else {
            self.reloads_refused.inc();
        }
    }
}

impl Drop for InstanceMetrics {
    /// A closed instance's series leave the endpoint.
    fn drop(&mut self) {
        let f = families();
        let only = self.labels(&[]);
        for family in [
            &f.received,
            &f.written,
            &f.filtered,
            &f.transform_faults,
            &f.retries,
        ] {
            family.remove(&only);
        }
        f.consume_seconds.remove(&only);
        f.transform_call_seconds.remove(&only);
        f.ack_seconds.remove(&only);
        f.in_flight.remove(&only);
        f.spool_bytes.remove(&only);
        f.spool_batches.remove(&only);
        f.spool_oldest_age.remove(&only);
        f.spool_replayed.remove(&only);
        f.spool_full.remove(&only);
        for result in ["ok", "failed"] {
            f.consume_calls.remove(&self.labels(&[("result", result)]));
        }
        for result in ["ok", "refused"] {
            f.reloads.remove(&self.labels(&[("result", result)]));
        }
        for kind in DeadLetterKind::ALL {
            f.dead_lettered.remove(&self.labels(&[("kind", kind.as_str())]));
        }
        let tables: Vec<String> = self
            .tables
            .lock()
            .map(|t| {
                t.0.keys()
                    .map(TablePath::to_string)
                    .chain(["other".to_string()])
                    .collect()
            })
            .unwrap_or_default();
        for table in &tables {
            f.rows_written.remove(&self.labels(&[("table", table)]));
        }
        if let Some(version) = self.version.lock().ok().and_then(|mut v| v.take()) {
            f.transform_version.remove(&self.labels(&[("version", &version)]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_shows_its_counts_and_leaves_when_dropped() {
        let m = InstanceMetrics::new(987_654);
        m.consume_started(10);
        m.outcomes(7, 2);
        m.dead_lettered(DeadLetterKind::Mapping, 1);
        m.rows_written(&TablePath::new("db", "t"), 7);
        m.consume_ended(10, Duration::from_millis(3), true);
        m.transform_version("abc123");
        let text = render();
        for line in [
            r#"fluss_sink_messages_received_total{instance="987654"} 10"#,
            r#"fluss_sink_messages_written_total{instance="987654"} 7"#,
            r#"fluss_sink_messages_filtered_total{instance="987654"} 2"#,
            r#"fluss_sink_messages_dead_lettered_total{instance="987654",kind="mapping"} 1"#,
            r#"fluss_sink_rows_written_total{instance="987654",table="db.t"} 7"#,
            r#"fluss_sink_consume_calls_total{instance="987654",result="ok"} 1"#,
            r#"fluss_sink_messages_in_flight{instance="987654"} 0"#,
            r#"fluss_sink_transform_version{instance="987654",version="abc123"} 1"#,
        ] {
            assert!(text.contains(line), "missing `{line}` in\n{text}");
        }
        drop(m);
        assert!(!render().contains(r#"instance="987654""#));
    }

    #[test]
    fn routed_tables_past_the_cap_fold_into_other() {
        let m = InstanceMetrics::new(987_655);
        for i in 0..MAX_TABLE_LABELS + 5 {
            m.rows_written(&TablePath::new("db", format!("t{i}")), 1);
        }
        let text = render();
        let labelled = text
            .lines()
            .filter(|l| l.starts_with("fluss_sink_rows_written_total{") && l.contains(r#"instance="987655""#))
            .count();
        assert_eq!(labelled, MAX_TABLE_LABELS + 1);
        assert!(text.contains(r#"fluss_sink_rows_written_total{instance="987655",table="other"} 5"#));
    }
}
