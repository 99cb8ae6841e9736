//! Rows per second into a local Fluss log table: the sink (JSON mapping and
//! its writer, as a `consume` without a transform does them) against fluss-rs
//! used directly at its best (`append_arrow_batch` of the same rows, built
//! beforehand, awaited with a flush), side by side in one run, one batch at a
//! time and with several batches in flight, at 100, 1,000 and 10,000 rows of
//! ~110 B, ~400 B and ~2 KB messages; then the process CPU per row of each.
//! Then (`partitioned_*`) the sink into an unpartitioned table against the
//! sink into a table partitioned by `action` (three partitions mixed in
//! every batch) and fluss-rs direct into that table at its best (one batch
//! per partition, built beforehand, all sent before any is awaited).
//!
//! Needs a cluster: `scripts/fluss-local.sh start`, then
//! `cargo bench -p iggy_connector_fluss_sink --bench writer`.

mod common;

use std::time::Duration;

use arrow::record_batch::RecordBatch;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use fluss::client::{AppendWriter, FlussConnection};
use fluss::metadata::TablePath as FlussPath;
use fluss_row_codec::RowKind;
use futures::future::join_all;
use iggy_connector_fluss_sink::Deadline;
use iggy_connector_fluss_sink::JsonMapping;
use iggy_connector_fluss_sink::MessageBatch;
use iggy_connector_fluss_sink::test_support::AllMade;
use iggy_connector_fluss_sink::test_support::ColumnMapping;
use iggy_connector_fluss_sink::{
    ColumnChunks, DeadLetterKind, FlussWriter, MadeRows, TableKind, WriterSettings,
};
use iggy_connector_fluss_sink::{TablePath, TableSchema};

const SIZES: [(&str, usize); 3] = [("110B", 100), ("400B", 400), ("2KB", 2048)];
const ROWS: [usize; 3] = [100, 1000, 10_000];
/// Bytes of payload in flight at once in the "in flight" benchmarks (the
/// client's buffer is 64 MiB).
const IN_FLIGHT_BYTES: usize = 16 << 20;
const MAX_IN_FLIGHT: usize = 8;
/// Messages a chunk, as a `consume` cuts a batch (`batch_size`'s default).
const CHUNK: usize = 500;

fn bootstrap() -> String {
    std::env::var("FLUSS_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:9123".into())
}

/// Process CPU time (user + system) so far.
fn cpu_time() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// How the sink makes a table's rows: on the lean row path (JSON straight to
/// Arrow columns) where the table takes it, as a `consume` does, else as
/// encoded rows.
enum SinkRows {
    Lean(ColumnMapping),
    Encoded(JsonMapping),
}

impl SinkRows {
    fn for_table(setup: &Setup, mapping: JsonMapping, path: &TablePath) -> Self {
        setup.runtime.block_on(async {
            let deadline = Deadline::after(Duration::from_secs(60));
            match setup.sink.table_kind(path, deadline).await.unwrap() {
                TableKind::Columns(arrow_schema) => {
                    let schema = setup.sink.table_schema(path).await.unwrap();
                    Self::Lean(ColumnMapping::new(mapping, schema, arrow_schema, false))
                }
                _ => Self::Encoded(mapping),
            }
        })
    }
}

/// One batch as the sink handles it: JSON mapped to rows, then written.
async fn through_sink(sink: &FlussWriter, rows: &SinkRows, batch: &MessageBatch, path: &TablePath) {
    let report = match rows {
        SinkRows::Lean(mapping) => {
            let deadline = Deadline::after(sink.settings().delivery_timeout);
            let chunks = AllMade(mapping.map_chunks(batch, CHUNK));
            sink.write_within(batch, ColumnChunks(chunks), path, deadline)
                .await
        }
        SinkRows::Encoded(mapping) => {
            let rows = MadeRows::new(mapping.map_batch(batch), DeadLetterKind::Mapping);
            sink.write(batch, rows, path).await
        }
    };
    assert_eq!(report.unwrap().written, batch.len());
}

/// One append through fluss-rs directly, awaited together with a flush (so
/// that the batch leaves without waiting out the client's batch timeout).
async fn direct_flushed(writer: &AppendWriter, record: &RecordBatch) {
    let ack = writer.append_arrow_batch(record.clone()).unwrap();
    let (ack, flushed) = tokio::join!(ack, writer.flush());
    ack.unwrap();
    flushed.unwrap();
}

/// `count` appends through fluss-rs directly, all sent before any is awaited.
async fn direct_in_flight(writer: &AppendWriter, record: &RecordBatch, count: usize) {
    let acks: Vec<_> = (0..count)
        .map(|_| writer.append_arrow_batch(record.clone()).unwrap())
        .collect();
    let (acks, flushed) = tokio::join!(join_all(acks), writer.flush());
    acks.into_iter().for_each(|a| a.unwrap());
    flushed.unwrap();
}

struct Setup {
    runtime: tokio::runtime::Runtime,
    sink: FlussWriter,
    connection: FlussConnection,
}

impl Setup {
    fn new() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        let sink = runtime.block_on(async {
            let settings = WriterSettings {
                bootstrap_servers: bootstrap(),
                ..WriterSettings::default()
            };
            FlussWriter::connect(settings)
                .await
                .expect("a Fluss cluster: scripts/fluss-local.sh start")
        });
        let connection = runtime
            .block_on(FlussConnection::new(fluss::config::Config {
                bootstrap_servers: bootstrap(),
                ..Default::default()
            }))
            .unwrap();
        Self {
            runtime,
            sink,
            connection,
        }
    }

    /// A fresh table, and fluss-rs's own append writer for it.
    fn table(&self, name: &str) -> (TableSchema, AppendWriter, arrow::datatypes::SchemaRef) {
        self.table_partitioned_by(name, &[])
    }

    /// A fresh table partitioned by `keys` (none: unpartitioned), and
    /// fluss-rs's own append writer for it.
    fn table_partitioned_by(
        &self,
        name: &str,
        keys: &[&str],
    ) -> (TableSchema, AppendWriter, arrow::datatypes::SchemaRef) {
        let path = TablePath::new("bench", format!("{name}_{:08x}", fastrand::u32(..)));
        let mut schema = common::table(path.clone());
        schema.partition_keys = keys.iter().map(|k| k.to_string()).collect();
        self.runtime.block_on(async {
            self.sink.ensure_table(&schema).await.unwrap();
            let table = self
                .connection
                .get_table(&FlussPath::new(path.database.clone(), path.table.clone()))
                .await
                .unwrap();
            let arrow_schema = fluss::record::to_arrow_schema(table.get_table_info().row_type()).unwrap();
            (
                schema,
                table.new_append().unwrap().create_writer().unwrap(),
                arrow_schema,
            )
        })
    }
}

fn writer(c: &mut Criterion) {
    let setup = Setup::new();
    let mut cpu_lines = Vec::new();
    for (size_name, size) in SIZES {
        let (schema, direct, arrow_schema) = setup.table(&format!("writer_{size_name}"));
        let path = schema.path.clone();
        let mapping = JsonMapping::new(&schema, RowKind::Append);
        let sink_rows = SinkRows::for_table(&setup, mapping.clone(), &path);
        for rows in ROWS {
            let batch = common::json_batch_sized(rows, size);
            let record = iggy_connector_fluss_sink::test_support::to_record_batch(
                &mapping.map_batch(&batch),
                &schema,
                &arrow_schema,
            )
            .unwrap();
            let payload_bytes: usize = batch.iter().map(|m| m.payload.len()).sum();
            let in_flight = (IN_FLIGHT_BYTES / payload_bytes.max(1)).clamp(1, MAX_IN_FLIGHT);
            let mut group = c.benchmark_group(format!("writer_{size_name}"));
            group.throughput(Throughput::Elements(rows as u64));
            group.bench_function(BenchmarkId::new("sink_one_at_a_time", rows), |b| {
                b.to_async(&setup.runtime)
                    .iter(|| through_sink(&setup.sink, &sink_rows, &batch, &path))
            });
            group.bench_function(BenchmarkId::new("fluss_rs_direct_one_at_a_time", rows), |b| {
                b.to_async(&setup.runtime)
                    .iter(|| direct_flushed(&direct, &record))
            });
            if in_flight > 1 {
                group.throughput(Throughput::Elements((rows * in_flight) as u64));
                group.bench_function(
                    BenchmarkId::new(format!("sink_{in_flight}_in_flight"), rows),
                    |b| {
                        b.to_async(&setup.runtime).iter(|| async {
                            let writes: Vec<_> = (0..in_flight)
                                .map(|_| through_sink(&setup.sink, &sink_rows, &batch, &path))
                                .collect();
                            join_all(writes).await;
                        })
                    },
                );
                group.bench_function(
                    BenchmarkId::new(format!("fluss_rs_direct_{in_flight}_in_flight"), rows),
                    |b| {
                        b.to_async(&setup.runtime)
                            .iter(|| direct_in_flight(&direct, &record, in_flight))
                    },
                );
            }
            group.finish();

            if rows == 1000 {
                // CPU per row: the same number of rows each way, one batch at a time.
                let rounds = 100;
                let before = cpu_time();
                setup.runtime.block_on(async {
                    for _ in 0..rounds {
                        through_sink(&setup.sink, &sink_rows, &batch, &path).await;
                    }
                });
                let sink_cpu = cpu_time() - before;
                let before = cpu_time();
                setup.runtime.block_on(async {
                    for _ in 0..rounds {
                        direct_flushed(&direct, &record).await;
                    }
                });
                let direct_cpu = cpu_time() - before;
                let per_row = |d: Duration| d.as_nanos() as f64 / (rounds * rows) as f64;
                cpu_lines.push(format!(
                    "{size_name}: process CPU per row: sink {:.0} ns, fluss-rs direct {:.0} ns, the sink's own {:.0} ns",
                    per_row(sink_cpu),
                    per_row(direct_cpu),
                    per_row(sink_cpu) - per_row(direct_cpu)
                ));
            }
        }
    }
    for line in cpu_lines {
        eprintln!("{line}");
    }
}

/// `record`'s rows split by the text of column `column`, one batch each.
fn split_by(record: &RecordBatch, column: usize) -> Vec<RecordBatch> {
    use arrow::array::AsArray;
    let values = record.column(column).as_string::<i32>();
    let mut groups: Vec<(&str, Vec<u32>)> = Vec::new();
    for row in 0..record.num_rows() {
        let value = values.value(row);
        match groups.iter_mut().find(|(v, _)| *v == value) {
            Some((_, rows)) => rows.push(row as u32),
            None => groups.push((value, vec![row as u32])),
        }
    }
    groups
        .into_iter()
        .map(|(_, rows)| {
            arrow::compute::take_record_batch(record, &arrow::array::UInt32Array::from(rows)).unwrap()
        })
        .collect()
}

/// The cost of partitioning: the same rows into an unpartitioned and a
/// partitioned table through the sink, and into the partitioned one through
/// fluss-rs at its best.
fn partitioned(c: &mut Criterion) {
    let setup = Setup::new();
    let (size_name, size) = ("400B", 400);
    let (plain, _, _) = setup.table("plain");
    let (parted, direct, arrow_schema) = setup.table_partitioned_by("parted", &["action"]);
    let plain_mapping = JsonMapping::new(&plain, RowKind::Append);
    let parted_mapping = JsonMapping::new(&parted, RowKind::Append);
    let plain_rows = SinkRows::for_table(&setup, plain_mapping.clone(), &plain.path);
    let parted_rows = SinkRows::for_table(&setup, parted_mapping.clone(), &parted.path);
    for rows in [1000, 10_000] {
        let batch = common::json_batch_sized(rows, size);
        let record = iggy_connector_fluss_sink::test_support::to_record_batch(
            &parted_mapping.map_batch(&batch),
            &parted,
            &arrow_schema,
        )
        .unwrap();
        let parts = split_by(&record, 2);
        // The first write creates the three partitions.
        setup
            .runtime
            .block_on(through_sink(&setup.sink, &parted_rows, &batch, &parted.path));
        let mut group = c.benchmark_group(format!("partitioned_{size_name}"));
        group.throughput(Throughput::Elements(rows as u64));
        group.bench_function(BenchmarkId::new("sink_unpartitioned", rows), |b| {
            b.to_async(&setup.runtime)
                .iter(|| through_sink(&setup.sink, &plain_rows, &batch, &plain.path))
        });
        group.bench_function(BenchmarkId::new("sink_3_partitions", rows), |b| {
            b.to_async(&setup.runtime)
                .iter(|| through_sink(&setup.sink, &parted_rows, &batch, &parted.path))
        });
        group.bench_function(BenchmarkId::new("fluss_rs_direct_3_partitions", rows), |b| {
            b.to_async(&setup.runtime).iter(|| async {
                let acks: Vec<_> = parts
                    .iter()
                    .map(|p| direct.append_arrow_batch(p.clone()).unwrap())
                    .collect();
                let (acks, flushed) = tokio::join!(join_all(acks), direct.flush());
                acks.into_iter().for_each(|a| a.unwrap());
                flushed.unwrap();
            })
        });
        group.finish();
    }
}

/// The cost of metrics on the writer: one writer without, one observed by
/// an instance's metrics (acknowledgement histogram, rows by table, retries),
/// the same rows into the same table, side by side.
fn observed(c: &mut Criterion) {
    use iggy_connector_fluss_sink::InstanceMetrics;
    let setup = Setup::new();
    let observed = setup.runtime.block_on(async {
        FlussWriter::connect(WriterSettings {
            bootstrap_servers: bootstrap(),
            ..WriterSettings::default()
        })
        .await
        .unwrap()
        .observed_by(std::sync::Arc::new(InstanceMetrics::new(1)))
    });
    let (schema, _, _) = setup.table("observed");
    let mapping = JsonMapping::new(&schema, RowKind::Append);
    let sink_rows = SinkRows::for_table(&setup, mapping, &schema.path);
    let batch = common::json_batch_sized(1000, 400);
    let mut group = c.benchmark_group("metrics_400B");
    group.throughput(Throughput::Elements(1000));
    for round in 0..3 {
        group.bench_function(BenchmarkId::new("writer_without_metrics", round), |b| {
            b.to_async(&setup.runtime)
                .iter(|| through_sink(&setup.sink, &sink_rows, &batch, &schema.path))
        });
        group.bench_function(BenchmarkId::new("writer_with_metrics", round), |b| {
            b.to_async(&setup.runtime)
                .iter(|| through_sink(&observed, &sink_rows, &batch, &schema.path))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = writer, partitioned, observed
}
criterion_main!(benches);
