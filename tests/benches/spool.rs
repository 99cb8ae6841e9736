//! What the spool costs and how fast it drains, through the dlopen'd
//! plugin against a local cluster, side by side in one run:
//!
//! - `consume` of 1,000 and 10,000 ~400 B JSON messages with `spool.mode`
//!   `off`, `on_failure` and `always`, Fluss healthy (off and on_failure do
//!   no disk I/O; always journals every batch and deletes it once acknowledged);
//! - `drain`: a cluster of the bench's own frozen while 10 batches of 1,000 are spooled
//!   (untimed), then the time from the thaw until the spool is empty:
//!   spooled messages written per second after an outage.
//!
//! `cargo build --release -p iggy_connector_fluss_sink`,
//! `scripts/fluss-local.sh start`, then `cargo bench -p integration-tests --bench spool`.

use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use integration_tests::fluss_cluster::bootstrap;
use integration_tests::local_cluster::LocalCluster;
use integration_tests::plugin::{Plugin, TestMessage, encode, logged, next_id};
use serde_json::json;

const MESSAGES: [usize; 2] = [1000, 10_000];
/// Batches spooled per drain sample.
const DRAIN_BATCHES: u64 = 10;

fn payload(i: usize) -> String {
    let base = format!(
        r#"{{"id":{i},"name":"customer-{i:06}","amount":"{}.{:02}","note":""}}"#,
        i % 10_000,
        i % 100
    );
    let pad = "n".repeat(400usize.saturating_sub(base.len()));
    format!(
        r#"{{"id":{i},"name":"customer-{i:06}","amount":"{}.{:02}","note":"{pad}"}}"#,
        i % 10_000,
        i % 100
    )
}

fn open(
    plugin: &Plugin,
    servers: &str,
    table: &str,
    mode: &str,
    spool: &Path,
    delivery_timeout: &str,
) -> u32 {
    let id = next_id();
    let config = json!({
        "bootstrap_servers": servers,
        "database": "bench",
        "table": table,
        "columns": [
            {"name": "id", "type": "BIGINT", "nullable": false},
            {"name": "name", "type": "STRING"},
            {"name": "amount", "type": "DECIMAL(10, 2)"},
            {"name": "note", "type": "STRING"}
        ],
        "delivery_timeout": delivery_timeout,
        "spool": {"mode": mode, "path": spool.display().to_string()}
    });
    assert_eq!(
        plugin.open(id, &config.to_string()),
        0,
        "{:?}",
        logged(&format!("instance={id}"))
    );
    id
}

struct Encoded {
    topic: Vec<u8>,
    meta: Vec<u8>,
    raw: Vec<u8>,
}

fn encoded(from: usize, n: usize) -> Encoded {
    let messages: Vec<TestMessage> = (from..from + n)
        .map(|i| TestMessage::text(i as u64, &payload(i)))
        .collect();
    Encoded {
        topic: encode::topic_metadata("bench", "spool"),
        meta: encode::messages_metadata(1, from as u64, 0),
        raw: encode::raw_messages(0, &messages),
    }
}

fn records_in(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".rec"))
                .count()
        })
        .unwrap_or(0)
}

fn spool_modes(c: &mut Criterion) {
    let plugin = Plugin::load();
    let spools = tempfile::tempdir().unwrap();
    let mut group = c.benchmark_group("spool_consume_400B");
    for n in MESSAGES {
        let batch = encoded(0, n);
        group.throughput(Throughput::Elements(n as u64));
        for mode in ["off", "on_failure", "always"] {
            let table = format!("spool_{mode}_{n}_{:08x}", fastrand::u32(..));
            let id = open(
                plugin,
                &bootstrap(),
                &table,
                mode,
                &spools.path().join(&table),
                "120s",
            );
            group.bench_function(BenchmarkId::new(mode, n), |b| {
                b.iter(|| assert_eq!(plugin.consume_raw(id, &batch.topic, &batch.meta, &batch.raw), 0))
            });
            assert_eq!(plugin.close(id), 0);
        }
    }
    group.finish();
}

fn drain(c: &mut Criterion) {
    let plugin = Plugin::load();
    let spools = tempfile::tempdir().unwrap();
    let table = format!("spool_drain_{:08x}", fastrand::u32(..));
    let dir = spools.path().join("drain");
    // Frozen and thawed: a cluster of its own, so that nothing running
    // beside the bench sees the outage.
    let cluster = LocalCluster::start("bench-drain", 1);
    let id = open(plugin, &cluster.bootstrap(), &table, "on_failure", &dir, "500ms");
    let batches: Vec<Encoded> = (0..DRAIN_BATCHES)
        .map(|b| encoded(b as usize * 1000, 1000))
        .collect();
    let mut group = c.benchmark_group("spool_drain_400B");
    group.throughput(Throughput::Elements(DRAIN_BATCHES * 1000));
    group.sample_size(10);
    group.bench_function(BenchmarkId::new("after_an_outage", DRAIN_BATCHES * 1000), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                cluster.script(&["pause"]);
                for batch in &batches {
                    assert_eq!(plugin.consume_raw(id, &batch.topic, &batch.meta, &batch.raw), 0);
                }
                assert_eq!(records_in(&dir), DRAIN_BATCHES as usize, "every batch spooled");
                cluster.script(&["resume"]);
                let thawed = Instant::now();
                while records_in(&dir) > 0 {
                    assert!(thawed.elapsed() < Duration::from_secs(120), "the spool drains");
                    std::thread::sleep(Duration::from_millis(2));
                }
                total += thawed.elapsed();
            }
            total
        })
    });
    group.finish();
    assert_eq!(plugin.close(id), 0);
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(4));
    targets = spool_modes, drain
}
criterion_main!(benches);
