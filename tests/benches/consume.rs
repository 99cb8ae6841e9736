//! Every path of the sink side by side in one run, as a user meets them:
//! `iggy_sink_consume` through the dlopen'd plugin exactly as the
//! connectors runtime calls it (buffers encoded beforehand, one call at a
//! time, JSON into a 4-column table), at 1,000 and 10,000 messages per call
//! and ~110 B, ~400 B and ~2 KB messages:
//!
//! - `fluss_rs_direct`: fluss-rs at its best, the limit (the same rows as one
//!   Arrow batch built beforehand, appended and awaited with a flush);
//! - `arrow_json_fluss_rs`: what a user writes by hand (and what Iggy's own
//!   Arrow-based sinks do): `arrow-json`'s decoder reading the same JSON
//!   payloads into one batch, appended the same way;
//! - `plugin_consume`: the sink without a transform (the lean path);
//! - `plugin_evolve`: the same with `evolve_schema = true`, no field new:
//!   what watching for new fields costs;
//! - `plugin_json_to_row`: the sink running the `json-to-row` component;
//! - `plugin_tenant_router`: `tenant-router` spreading the messages over
//!   three tables (the tenant in a header);
//! - `plugin_primary_key` and `plugin_cdc_upsert`: upserts into a
//!   primary-key table, without a transform and with `cdc-upsert` (the op
//!   in a header), against `fluss_rs_direct_upsert`: fluss-rs's upsert
//!   writer at its best on the same table (rows built beforehand, all sent,
//!   one flush, every acknowledgement awaited), the limit of that path;
//! - `plugin_metadata` and `plugin_partitioned`: with a metadata column
//!   `iggy_topic`, unpartitioned and partitioned by it.
//!
//! Needs the release plugin, the built transforms and a cluster:
//! `cargo build --release -p iggy_connector_fluss_sink`,
//! `cargo xtask build-transforms rust`, `scripts/fluss-local.sh start`, then
//! `cargo bench -p integration-tests --bench consume`.
//!
//! With `FLUSS_SINK_PLUGIN_BEFORE=<path to another build's .so>` that build
//! is measured instead (each path named `…_before`), in a run of its own: this build's `TCP_NODELAY`
//! workaround covers every socket of the process to the cluster, so loading
//! both in one process would lend it to the other build (and to fluss-rs
//! direct). In a run of this build, fluss-rs direct gets `TCP_NODELAY` too:
//! the reference at its best.

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, Decimal128Array, Int64Array, StringArray};
use arrow::record_batch::RecordBatch;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use fluss::client::{AppendWriter, UpsertWriter};
use fluss::metadata::TablePath as FlussPath;
use fluss::row::{Decimal, GenericRow};
use integration_tests::component;
use integration_tests::fluss_cluster::{bootstrap, connection};
use integration_tests::plugin::{Plugin, TestMessage, encode, logged, next_id};
use serde_json::{Value, json};

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

/// The same rows as fluss-rs's upsert writer takes them.
fn generic_rows(count: usize, size: usize, schema: arrow::datatypes::SchemaRef) -> Vec<GenericRow<'static>> {
    let batch = record(count, size, schema);
    let ids = batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
    let names = batch.column(1).as_any().downcast_ref::<StringArray>().unwrap();
    let amounts = batch
        .column(2)
        .as_any()
        .downcast_ref::<Decimal128Array>()
        .unwrap();
    let notes = batch.column(3).as_any().downcast_ref::<StringArray>().unwrap();
    (0..count)
        .map(|i| {
            let mut row = GenericRow::new(4);
            row.set_field(0, ids.value(i));
            row.set_field(1, names.value(i).to_string());
            row.set_field(
                2,
                Decimal::from_unscaled_long(amounts.value(i) as i64, 10, 2).unwrap(),
            );
            row.set_field(3, notes.value(i).to_string());
            row
        })
        .collect()
}

/// fluss-rs's upsert writer at its best: every row sent, then one flush,
/// then every acknowledgement awaited.
async fn direct_upserted(writer: &UpsertWriter, rows: &[GenericRow<'static>]) {
    let acks: Vec<_> = rows.iter().map(|row| writer.upsert(row).unwrap()).collect();
    writer.flush().await.unwrap();
    for ack in acks {
        ack.await.unwrap();
    }
}

async fn direct_flushed(writer: &AppendWriter, record: &RecordBatch) {
    let ack = writer.append_arrow_batch(record.clone()).unwrap();
    let (ack, flushed) = tokio::join!(ack, writer.flush());
    ack.unwrap();
    flushed.unwrap();
}

/// The 4 columns of every table here, and `extra` ones.
fn columns(extra: &[Value]) -> Value {
    let mut columns = vec![
        json!({"name": "id", "type": "BIGINT", "nullable": false}),
        json!({"name": "name", "type": "STRING"}),
        json!({"name": "amount", "type": "DECIMAL(10, 2)"}),
        json!({"name": "note", "type": "STRING"}),
    ];
    columns.extend_from_slice(extra);
    Value::Array(columns)
}

/// Opens table `table` (created) of `bench` as a new instance of `plugin`,
/// with `options` over the 4-column log table's.
fn open(plugin: &Plugin, table: &str, options: Value) -> u32 {
    let id = next_id();
    let mut config = json!({
        "bootstrap_servers": bootstrap(),
        "database": "bench",
        "table": table,
        "columns": columns(&[]),
    });
    for (key, value) in options.as_object().expect("options are an object") {
        config[key] = value.clone();
    }
    assert_eq!(
        plugin.open(id, &config.to_string()),
        0,
        "{:?}",
        logged(&format!("instance={id}"))
    );
    id
}

/// A transform option set for `name`'s component.
fn transform(name: &str, config: Value) -> Value {
    json!({"path": component(name).display().to_string(), "config": config})
}

/// `payloads` decoded by `arrow-json` into one batch of `schema`, as a
/// hand-written sink would.
fn arrow_json(payloads: &[&[u8]], schema: &arrow::datatypes::SchemaRef) -> RecordBatch {
    let mut decoder = arrow_json::ReaderBuilder::new(schema.clone())
        .with_batch_size(payloads.len().max(1))
        .build_decoder()
        .unwrap();
    for payload in payloads {
        decoder.decode(payload).unwrap();
    }
    decoder.flush().unwrap().expect("rows")
}

/// One path of the sink: an instance and the messages it is sent.
struct Path {
    name: &'static str,
    id: u32,
    raw: Vec<u8>,
}

fn consume(c: &mut Criterion) {
    let (plugin, before) = match std::env::var_os("FLUSS_SINK_PLUGIN_BEFORE") {
        Some(path) => (Plugin::load_from(std::path::Path::new(&path)), true),
        None => (Plugin::load(), false),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let conn = runtime.block_on(connection());
    let topic = encode::topic_metadata("bench", "consume");
    let meta = encode::messages_metadata(1, 0, 0);
    for (size_name, size) in SIZES {
        let table = |path: &str| format!("consume_{size_name}_{path}_{:08x}", fastrand::u32(..));
        let plain = table("plain");
        let lean = open(plugin, &plain, json!({}));
        let direct = runtime.block_on(async {
            let t = conn
                .get_table(&FlussPath::new("bench", plain.as_str()))
                .await
                .unwrap();
            let schema = fluss::record::to_arrow_schema(t.get_table_info().row_type()).unwrap();
            (t.new_append().unwrap().create_writer().unwrap(), schema)
        });
        let mut opened: Vec<(&'static str, u32)> = vec![("plugin_consume", lean)];
        let pk_table = table("pk");
        {
            let tenants = table("tenant");
            let metadata = json!({"include_metadata": true, "columns": columns(&[json!({"name": "iggy_topic", "type": "STRING"})])});
            let mut partitioned = metadata.clone();
            partitioned["partition_keys"] = json!(["iggy_topic"]);
            let primary_key = json!({"table_type": "primary_key", "primary_key_columns": ["id"]});
            let mut cdc = primary_key.clone();
            cdc["transform"] = transform("cdc-upsert", json!({}));
            if !before {
                // An option the builds before it do not know.
                opened.push((
                    "plugin_evolve",
                    open(plugin, &table("evolve"), json!({"evolve_schema": true})),
                ));
            }
            opened.extend([
                ("plugin_json_to_row", open(plugin, &table("wasm"), json!({"transform": transform("json-to-row", json!({}))}))),
                (
                    "plugin_tenant_router",
                    open(
                        plugin,
                        &tenants,
                        json!({
                            "transform": transform("tenant-router", json!({"prefix": format!("{tenants}_"), "database": "bench"})),
                            "auto_create_table": true,
                            "allowed_tables": [format!("bench.{tenants}_*")],
                        }),
                    ),
                ),
                ("plugin_primary_key", open(plugin, &pk_table, primary_key)),
                ("plugin_cdc_upsert", open(plugin, &table("cdc"), cdc)),
                ("plugin_metadata", open(plugin, &table("meta"), metadata)),
                ("plugin_partitioned", open(plugin, &table("parted"), partitioned)),
            ]);
        }
        let upserts = runtime.block_on(async {
            let t = conn
                .get_table(&FlussPath::new("bench", pk_table.as_str()))
                .await
                .unwrap();
            t.new_upsert().unwrap().create_writer().unwrap()
        });
        let mut group = c.benchmark_group(format!("consume_{size_name}"));
        for n in MESSAGES {
            let messages: Vec<TestMessage> = (0..n)
                .map(|i| TestMessage::text(i as u64, &payload(i, size)))
                .collect();
            let raw = encode::raw_messages(0, &messages);
            let with = |key: &str, value: &dyn Fn(usize) -> String| {
                let tagged: Vec<TestMessage> = messages
                    .iter()
                    .enumerate()
                    .map(|(i, m)| m.clone().with_header(key, &value(i)))
                    .collect();
                encode::raw_messages(0, &tagged)
            };
            let paths: Vec<Path> = opened
                .iter()
                .map(|&(name, id)| Path {
                    name,
                    id,
                    raw: match name {
                        "plugin_tenant_router" => with("tenant", &|i| format!("t{}", i % 3)),
                        "plugin_cdc_upsert" => with("op", &|_| "u".into()),
                        _ => raw.clone(),
                    },
                })
                .collect();
            let rows = record(n, size, direct.1.clone());
            let payloads: Vec<String> = (0..n).map(|i| payload(i, size)).collect();
            let payload_bytes: Vec<&[u8]> = payloads.iter().map(|p| p.as_bytes()).collect();
            assert_eq!(
                arrow_json(&payload_bytes, &direct.1),
                rows,
                "arrow-json reads the same rows"
            );
            group.throughput(Throughput::Elements(n as u64));
            group.bench_function(BenchmarkId::new("fluss_rs_direct", n), |b| {
                b.to_async(&runtime).iter(|| direct_flushed(&direct.0, &rows))
            });
            let keyed = generic_rows(n, size, direct.1.clone());
            group.bench_function(BenchmarkId::new("fluss_rs_direct_upsert", n), |b| {
                b.to_async(&runtime).iter(|| direct_upserted(&upserts, &keyed))
            });
            group.bench_function(BenchmarkId::new("arrow_json_fluss_rs", n), |b| {
                b.to_async(&runtime).iter(|| async {
                    let decoded = arrow_json(&payload_bytes, &direct.1);
                    direct_flushed(&direct.0, &decoded).await
                })
            });
            for path in &paths {
                let name = if before {
                    format!("{}_before", path.name)
                } else {
                    path.name.to_string()
                };
                group.bench_function(BenchmarkId::new(name, n), |b| {
                    b.iter(|| assert_eq!(plugin.consume_raw(path.id, &topic, &meta, &path.raw), 0))
                });
            }
        }
        group.finish();
        for (_, id) in opened {
            assert_eq!(plugin.close(id), 0);
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(4));
    targets = consume
}
criterion_main!(benches);
