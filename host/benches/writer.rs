//! Rows per second into a local Fluss log table through the sink's writer,
//! against fluss-rs used directly (`append_arrow_batch` with the same Arrow
//! batches) in the same run, plus the process CPU time per row of each.
//!
//! Needs a cluster: `scripts/fluss-local.sh start`, then
//! `cargo bench -p iggy_connector_fluss_sink --bench writer`.

mod common;

use std::time::Duration;

use arrow::record_batch::RecordBatch;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use fluss::client::FlussConnection;
use fluss::metadata::TablePath as FlussPath;
use fluss_row_codec::RowKind;
use iggy_connector_fluss_sink::mapping::JsonMapping;
use iggy_connector_fluss_sink::schema::TablePath;
use iggy_connector_fluss_sink::writer::{DeadLetterKind, FlussWriter, WriterSettings};

const ROWS_PER_BATCH: usize = 1000;

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

fn writer(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let path = TablePath::new("bench", format!("writer_{:08x}", fastrand::u32(..)));
    let schema = common::table(path.clone());
    let sink = runtime.block_on(async {
        let settings = WriterSettings {
            bootstrap_servers: bootstrap(),
            ..WriterSettings::default()
        };
        let w = FlussWriter::connect(settings)
            .await
            .expect("a Fluss cluster: scripts/fluss-local.sh start");
        w.ensure_table(&schema).await.unwrap();
        w
    });
    let batch = common::json_batch(ROWS_PER_BATCH);
    let output = JsonMapping::new(&schema, RowKind::Append).map_batch(&batch);

    // The same rows as an Arrow batch, for fluss-rs used directly.
    let connection = runtime.block_on(FlussConnection::new(fluss::config::Config {
        bootstrap_servers: bootstrap(),
        ..Default::default()
    }));
    let connection = connection.unwrap();
    let (direct, record): (fluss::client::AppendWriter, RecordBatch) = runtime.block_on(async {
        let table = connection
            .get_table(&FlussPath::new(path.database.clone(), path.table.clone()))
            .await
            .unwrap();
        let arrow_schema = fluss::record::to_arrow_schema(table.get_table_info().row_type()).unwrap();
        let record =
            iggy_connector_fluss_sink::writer::to_record_batch(&output, &schema, &arrow_schema).unwrap();
        (table.new_append().unwrap().create_writer().unwrap(), record)
    });

    let mut group = c.benchmark_group("fluss_log_append");
    group.throughput(Throughput::Elements(ROWS_PER_BATCH as u64));
    group.bench_function(BenchmarkId::new("sink_writer", ROWS_PER_BATCH), |b| {
        b.to_async(&runtime).iter(|| async {
            let report = sink
                .write(&batch, output.clone(), &path, DeadLetterKind::Mapping)
                .await
                .unwrap();
            assert_eq!(report.written, ROWS_PER_BATCH);
        })
    });
    // fluss-rs used directly at its best: the append's future awaited
    // together with a flush, so the batch leaves without the client's
    // 100 ms batch timeout (what the sink's writer does).
    group.bench_function(BenchmarkId::new("fluss_rs_direct_flushed", ROWS_PER_BATCH), |b| {
        b.to_async(&runtime).iter(|| direct_flushed(&direct, &record))
    });
    // fluss-rs used directly, the append's future awaited alone.
    group.bench_function(BenchmarkId::new("fluss_rs_direct", ROWS_PER_BATCH), |b| {
        b.to_async(&runtime)
            .iter(|| async { direct.append_arrow_batch(record.clone()).unwrap().await.unwrap() })
    });
    group.finish();

    // CPU per row: 200 batches each way, process CPU time.
    let rounds = 200;
    let before = cpu_time();
    runtime.block_on(async {
        for _ in 0..rounds {
            sink.write(&batch, output.clone(), &path, DeadLetterKind::Mapping)
                .await
                .unwrap();
        }
    });
    let sink_cpu = cpu_time() - before;
    let before = cpu_time();
    runtime.block_on(async {
        for _ in 0..rounds {
            direct_flushed(&direct, &record).await;
        }
    });
    let direct_cpu = cpu_time() - before;
    let per_row = |d: Duration| d.as_nanos() as f64 / (rounds * ROWS_PER_BATCH) as f64;
    eprintln!(
        "process CPU per row: sink writer {:.0} ns, fluss-rs direct (flushed) {:.0} ns, sink's own share {:.0} ns",
        per_row(sink_cpu),
        per_row(direct_cpu),
        per_row(sink_cpu) - per_row(direct_cpu)
    );
}

/// One append through fluss-rs directly, awaited together with a flush.
async fn direct_flushed(writer: &fluss::client::AppendWriter, record: &RecordBatch) {
    let ack = writer.append_arrow_batch(record.clone()).unwrap();
    let (ack, flushed) = tokio::join!(ack, writer.flush());
    ack.unwrap();
    flushed.unwrap();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(5));
    targets = writer
}
criterion_main!(benches);
