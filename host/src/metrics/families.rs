//! The library's metric families in one registry, and their Prometheus text.

use std::sync::OnceLock;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Routed tables one instance labels by name; the rest are `other`.
pub(crate) const MAX_TABLE_LABELS: usize = 32;

pub(super) type Labels = Vec<(&'static str, String)>;

fn histogram_from_50us() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.0, 18))
}

fn histogram_from_1ms() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// Every metric family of the library.
pub(super) struct Families {
    pub(super) registry: Registry,
    pub(super) received: Family<Labels, Counter>,
    pub(super) written: Family<Labels, Counter>,
    pub(super) filtered: Family<Labels, Counter>,
    pub(super) dead_lettered: Family<Labels, Counter>,
    pub(super) rows_written: Family<Labels, Counter>,
    pub(super) consume_calls: Family<Labels, Counter>,
    pub(super) consume_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    pub(super) transform_call_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    pub(super) transform_faults: Family<Labels, Counter>,
    pub(super) ack_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    pub(super) retries: Family<Labels, Counter>,
    pub(super) connections_replaced: Family<Labels, Counter>,
    pub(super) client_renewals: Family<Labels, Counter>,
    pub(super) tables_remade: Family<Labels, Counter>,
    pub(super) in_flight: Family<Labels, Gauge>,
    pub(super) transform_version: Family<Labels, Gauge>,
    pub(super) reloads: Family<Labels, Counter>,
    pub(super) schema_changes: Family<Labels, Counter>,
    pub(super) spool_bytes: Family<Labels, Gauge>,
    pub(super) spool_batches: Family<Labels, Gauge>,
    pub(super) spool_oldest_age: Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub(super) spool_last_recovery: Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub(super) spool_replayed: Family<Labels, Counter>,
    pub(super) spool_full: Family<Labels, Counter>,
}

pub(super) fn families() -> &'static Families {
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
            connections_replaced: Family::default(),
            client_renewals: Family::default(),
            tables_remade: Family::default(),
            in_flight: Family::default(),
            transform_version: Family::default(),
            reloads: Family::default(),
            schema_changes: Family::default(),
            spool_bytes: Family::default(),
            spool_batches: Family::default(),
            spool_oldest_age: Family::default(),
            spool_last_recovery: Family::default(),
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
            "connections_replaced",
            "Connections to tablet servers closed because a write waited request_timeout for its answer",
            f.connections_replaced.clone(),
        );
        registry.register(
            "client_renewals",
            "Writer clients given up and made again after a panic in fluss-rs left writes unanswered",
            f.client_renewals.clone(),
        );
        registry.register(
            "tables_remade",
            "Tables the sink created, dropped and created again because Fluss never brought their buckets up",
            f.tables_remade.clone(),
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
            "schema_changes",
            "Schema changes of the tables written, by table and kind (followed: columns another client added)",
            f.schema_changes.clone(),
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
            "Age of the oldest message the spool holds, by its Iggy timestamp (for batches left by an earlier process: since they were spooled)",
            f.spool_oldest_age.clone(),
        );
        registry.register(
            "spool_last_recovery_seconds",
            "How long the last spooling took: from the send of the first write Fluss did not acknowledge in time until the spool was empty",
            f.spool_last_recovery.clone(),
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
