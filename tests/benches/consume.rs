//! `iggy_sink_consume` through the dlopen'd plugin exactly as the connectors
//! runtime calls it (buffers encoded beforehand, one call at a time, JSON
//! into a 4-column log table, default options), against fluss-rs used
//! directly at its best on the same table in the same run (the same rows as
//! one Arrow batch built beforehand, appended and awaited with a flush), at
//! 1,000 and 10,000 messages per call and ~110 B, ~400 B and ~2 KB messages.
//!
//! Needs the release plugin and a cluster:
//! `cargo build --release -p iggy_connector_fluss_sink`,
//! `scripts/fluss-local.sh start`, then
//! `cargo bench -p integration-tests --bench consume`.
//!
//! With `FLUSS_SINK_PLUGIN_BEFORE=<path to another build's .so>` that build
//! is measured instead (`plugin_consume_before`), in a run of its own: this
//! build's `TCP_NODELAY` workaround covers every socket of the process to the
//! cluster, so loading both in one process would lend it to the other build
//! (and to fluss-rs direct). In a run of this build, fluss-rs direct gets
//! `TCP_NODELAY` too: the reference at its best.

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, Decimal128Array, Int64Array, StringArray};
use arrow::record_batch::RecordBatch;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use fluss::client::AppendWriter;
use fluss::metadata::TablePath as FlussPath;
use integration_tests::fluss_cluster::{bootstrap, connection};
use integration_tests::plugin::{Plugin, TestMessage, encode, logged, next_id};
use serde_json::json;

const SIZES: [(&str, usize); 3] = [("110B", 110), ("400B", 400), ("2KB", 2048)];
const MESSAGES: [usize; 2] = [1000, 10_000];

/// Message `i` of about `size` bytes: id, name, amount, and a padded note.
fn payload(i: usize, size: usize) -> String {
    let base = format!(
        r#"{{"id":{i},"name":"customer-{i:06}","amount":"{}.{:02}","note":""}}"#,
        i % 10_000,
        i % 100
    );
    let pad = "n".repeat(size.saturating_sub(base.len()));
    format!(
        r#"{{"id":{i},"name":"customer-{i:06}","amount":"{}.{:02}","note":"{pad}"}}"#,
        i % 10_000,
        i % 100
    )
}

/// The same rows as fluss-rs takes them.
fn record(count: usize, size: usize, schema: arrow::datatypes::SchemaRef) -> RecordBatch {
    let ids: Vec<i64> = (0..count as i64).collect();
    let names: Vec<String> = (0..count).map(|i| format!("customer-{i:06}")).collect();
    let amounts: Vec<i128> = (0..count)
        .map(|i| ((i % 10_000) * 100 + i % 100) as i128)
        .collect();
    let notes: Vec<String> = (0..count)
        .map(|i| {
            let text = payload(i, size);
            let start = text.find(r#""note":""#).unwrap() + 8;
            text[start..text.len() - 2].to_string()
        })
        .collect();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(ids)),
        Arc::new(StringArray::from(names)),
        Arc::new(
            Decimal128Array::from(amounts)
                .with_precision_and_scale(10, 2)
                .unwrap(),
        ),
        Arc::new(StringArray::from(notes)),
    ];
    RecordBatch::try_new(schema, columns).unwrap()
}

async fn direct_flushed(writer: &AppendWriter, record: &RecordBatch) {
    let ack = writer.append_arrow_batch(record.clone()).unwrap();
    let (ack, flushed) = tokio::join!(ack, writer.flush());
    ack.unwrap();
    flushed.unwrap();
}

/// Opens a 4-column log table `table` (created) as a new instance of `plugin`.
fn open(plugin: &Plugin, table: &str) -> u32 {
    let id = next_id();
    let config = json!({
        "bootstrap_servers": bootstrap(),
        "database": "bench",
        "table": table,
        "columns": [
            {"name": "id", "type": "BIGINT", "nullable": false},
            {"name": "name", "type": "STRING"},
            {"name": "amount", "type": "DECIMAL(10, 2)"},
            {"name": "note", "type": "STRING"}
        ]
    });
    assert_eq!(
        plugin.open(id, &config.to_string()),
        0,
        "{:?}",
        logged(&format!("instance={id}"))
    );
    id
}

fn consume(c: &mut Criterion) {
    let (plugin, label) = match std::env::var_os("FLUSS_SINK_PLUGIN_BEFORE") {
        Some(path) => (
            Plugin::load_from(std::path::Path::new(&path)),
            "plugin_consume_before",
        ),
        None => (Plugin::load(), "plugin_consume"),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let conn = runtime.block_on(connection());
    for (size_name, size) in SIZES {
        let table = format!("consume_{size_name}_{:08x}", fastrand::u32(..));
        let id = open(plugin, &table);
        let direct = runtime.block_on(async {
            let t = conn
                .get_table(&FlussPath::new("bench", table.as_str()))
                .await
                .unwrap();
            let schema = fluss::record::to_arrow_schema(t.get_table_info().row_type()).unwrap();
            (t.new_append().unwrap().create_writer().unwrap(), schema)
        });
        let mut group = c.benchmark_group(format!("consume_{size_name}"));
        for n in MESSAGES {
            let messages: Vec<TestMessage> = (0..n)
                .map(|i| TestMessage::text(i as u64, &payload(i, size)))
                .collect();
            let topic = encode::topic_metadata("bench", "consume");
            let meta = encode::messages_metadata(1, 0, 0);
            let raw = encode::raw_messages(0, &messages);
            let rows = record(n, size, direct.1.clone());
            group.throughput(Throughput::Elements(n as u64));
            group.bench_function(BenchmarkId::new(label, n), |b| {
                b.iter(|| assert_eq!(plugin.consume_raw(id, &topic, &meta, &raw), 0))
            });
            group.bench_function(BenchmarkId::new("fluss_rs_direct", n), |b| {
                b.to_async(&runtime).iter(|| direct_flushed(&direct.0, &rows))
            });
        }
        group.finish();
        assert_eq!(plugin.close(id), 0);
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(4));
    targets = consume
}
criterion_main!(benches);
