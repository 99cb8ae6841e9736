//! One instance's handles on the library's metric families.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use super::families::{Labels, MAX_TABLE_LABELS, families};
use crate::rows::DeadLetterKind;
use crate::schema::TablePath;

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
    connections_replaced: Counter,
    client_renewals: Counter,
    tables_remade: Counter,
    in_flight: Gauge,
    reloads_ok: Counter,
    reloads_refused: Counter,
    /// Each labelled table's counter, and `other`'s.
    tables: Mutex<(HashMap<TablePath, Counter>, Option<Counter>)>,
    version: Mutex<Option<String>>,
    /// The label sets of the schema changes counted, to remove at drop.
    schema_changes: Mutex<Vec<Labels>>,
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
            connections_replaced: f.connections_replaced.get_or_create_owned(&only),
            client_renewals: f.client_renewals.get_or_create_owned(&only),
            tables_remade: f.tables_remade.get_or_create_owned(&only),
            in_flight: f.in_flight.get_or_create_owned(&only),
            reloads_ok: f.reloads.get_or_create_owned(&with(&[("result", "ok")])),
            reloads_refused: f.reloads.get_or_create_owned(&with(&[("result", "refused")])),
            tables: Mutex::new((HashMap::new(), None)),
            version: Mutex::new(None),
            schema_changes: Mutex::new(Vec::new()),
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

    /// `count` connections to tablet servers were closed because a write
    /// waited `request_timeout` for its answer.
    pub fn connections_replaced(&self, count: u64) {
        self.connections_replaced.inc_by(count);
    }

    /// The writer client was renewed after a panic in fluss-rs.
    pub fn client_renewed(&self) {
        self.client_renewals.inc();
    }

    /// A table the writer created was dropped and created again: Fluss
    /// never brought its buckets up.
    pub fn table_remade(&self) {
        self.tables_remade.inc();
    }

    /// How many times the writer gave its client up after its sender
    /// panicked (see [`InstanceMetrics::client_renewed`]).
    #[cfg(feature = "test-support")]
    pub fn client_renewals(&self) -> u64 {
        self.client_renewals.get()
    }

    /// How many tables the writer dropped and created again (see
    /// [`InstanceMetrics::table_remade`]).
    #[cfg(feature = "test-support")]
    pub fn tables_remade(&self) -> u64 {
        self.tables_remade.get()
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

    /// The spool holds `bytes` in `batches`, its oldest message `oldest_secs` old.
    pub fn spool_state(&self, bytes: u64, batches: usize, oldest_secs: f64) {
        let f = families();
        let only = self.labels(&[]);
        f.spool_bytes.get_or_create(&only).set(bytes as i64);
        f.spool_batches.get_or_create(&only).set(batches as i64);
        f.spool_oldest_age.get_or_create(&only).set(oldest_secs);
    }

    /// The spool has drained, `took` after the first write it took over was sent.
    pub fn spool_recovered(&self, took: Duration) {
        families()
            .spool_last_recovery
            .get_or_create(&self.labels(&[]))
            .set(took.as_secs_f64());
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

    /// Table `table`'s schema changed in Fluss; `kind` says how the sink
    /// took it (`followed`: columns added; `remade`: a table made again).
    pub fn schema_change(&self, table: &TablePath, kind: &str) {
        let labels = self.labels(&[("table", &table.to_string()), ("kind", kind)]);
        families().schema_changes.get_or_create(&labels).inc();
        let mut seen = self.schema_changes.lock().expect("metrics poisoned");
        if !seen.contains(&labels) {
            seen.push(labels);
        }
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
            &f.connections_replaced,
            &f.client_renewals,
            &f.tables_remade,
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
        f.spool_last_recovery.remove(&only);
        f.spool_replayed.remove(&only);
        f.spool_full.remove(&only);
        for result in ["ok", "failed"] {
            f.consume_calls.remove(&self.labels(&[("result", result)]));
        }
        for result in ["ok", "refused"] {
            f.reloads.remove(&self.labels(&[("result", result)]));
        }
        for labels in self.schema_changes.lock().map(|s| s.clone()).unwrap_or_default() {
            f.schema_changes.remove(&labels);
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
    use crate::metrics::render;

    #[test]
    fn an_instance_shows_its_counts_and_leaves_when_dropped() {
        let m = InstanceMetrics::new(987_654);
        m.consume_started(10);
        m.outcomes(7, 2);
        m.dead_lettered(DeadLetterKind::Mapping, 1);
        m.rows_written(&TablePath::new("db", "t"), 7);
        m.consume_ended(10, Duration::from_millis(3), true);
        m.transform_version("abc123");
        m.schema_change(&TablePath::new("db", "t"), "followed");
        m.schema_change(&TablePath::new("db", "t"), "followed");
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
            r#"fluss_sink_schema_changes_total{instance="987654",table="db.t",kind="followed"} 2"#,
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
