//! Losing a tablet server of three: how long the sink goes without an
//! acknowledged write, against fluss-rs alone in the same run on the same
//! cluster and the same kill. Both write to a 3-bucket log table with
//! replication factor 3 whose buckets the lost server leads one of; the
//! promise is the ratio (the sink stalls at most twice as long as its own
//! client library does), and that every message is in the table, once
//! (except the batch on the wire when a leader is lost, which can land
//! twice: see [`assert_at_most_in_flight_batches_repeat`]).
//!
//! The cluster is this test's own (`scripts/fluss-local.sh` with
//! `FLUSS_TABLETS=3`, in `target/fluss-failover`); the sink is the
//! dlopen'd plugin with its default spool and a `delivery_timeout` of 2 s,
//! fed 100 messages every 125 ms. Fails, never skips, when a cluster
//! cannot be had.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::array::{Int64Array, StringArray};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use fluss::metadata::{DataTypes, Schema, TableBucket, TableDescriptor, TablePath as FlussPath};
use iggy_connector_fluss_sink::TablePath;
use integration_tests::fluss_cluster::{connection_to, missing_and_repeated};
use integration_tests::local_cluster::LocalCluster;
use integration_tests::plugin::{Plugin, TestMessage, logged};
use integration_tests::{free_port, metrics_text};
use serde_json::json;

/// Messages in each of the sink's batches, rows in each of fluss-rs's.
const PER_BATCH: u64 = 100;
/// How often the sink is handed a batch (800 messages a second).
const SINK_PACE: Duration = Duration::from_millis(125);
/// How often fluss-rs alone appends a batch once the last was acknowledged.
const DIRECT_PACE: Duration = Duration::from_millis(50);
/// How often the sink's metrics are read.
const SCRAPE_PACE: Duration = Duration::from_millis(100);
/// Writing before the disturbance begins, and after it is over.
const BEFORE: Duration = Duration::from_secs(5);
const SETTLE: Duration = Duration::from_secs(20);
const DATABASE: &str = "failover";

/// When writes were acknowledged.
type Acks = Arc<Mutex<Vec<Instant>>>;

/// The longest time between `from` and `to` without an acknowledged write
/// (from `from` to the first acknowledgement after it, between two, or
/// from the last to `to`).
fn longest_stall(acks: &[Instant], from: Instant, to: Instant) -> Duration {
    let mut last = from;
    let mut longest = Duration::ZERO;
    for &ack in acks.iter().filter(|a| **a > from && **a <= to) {
        longest = longest.max(ack - last);
        last = ack;
    }
    longest.max(to.saturating_duration_since(last))
}

/// `id BIGINT NOT NULL, name STRING`, in 3 buckets without a bucket key.
async fn create_table(bootstrap: &str, path: &TablePath) {
    let schema = Schema::builder()
        .column("id", DataTypes::bigint())
        .column("name", DataTypes::string())
        .build()
        .unwrap();
    let descriptor = TableDescriptor::builder()
        .schema(schema)
        .distributed_by(Some(3), vec![])
        .build()
        .unwrap();
    let conn = connection_to(bootstrap).await;
    let admin = conn.get_admin().unwrap();
    admin.create_database(&path.database, None, true).await.unwrap();
    admin
        .create_table(&fluss_path(path), &descriptor, false)
        .await
        .unwrap();
}

fn fluss_path(path: &TablePath) -> FlussPath {
    FlussPath::new(path.database.clone(), path.table.clone())
}

/// The tablet servers leading each bucket of `path`, as the cluster says now.
async fn leaders(bootstrap: &str, path: &TablePath) -> Vec<i32> {
    let conn = connection_to(bootstrap).await;
    let table = conn.get_table(&fluss_path(path)).await.unwrap();
    let id = table.get_table_info().table_id;
    let cluster = conn.get_metadata().get_cluster();
    (0..3)
        .map(|b| {
            cluster
                .leader_for(&TableBucket::new(id, b))
                .map(|node| node.id())
                .expect("every bucket has a leader")
        })
        .collect()
}

/// `PER_BATCH` rows from id `first` on.
fn direct_batch(schema: &SchemaRef, first: u64) -> RecordBatch {
    let ids = Int64Array::from_iter_values((first..first + PER_BATCH).map(|i| i as i64));
    let names = StringArray::from_iter_values((0..PER_BATCH).map(|i| format!("name-{i}")));
    RecordBatch::try_new(schema.clone(), vec![Arc::new(ids), Arc::new(names)]).unwrap()
}

/// fluss-rs alone at its best: appends a batch, awaits its acknowledgement
/// with a flush, and again, until `stop`; each acknowledgement's time in `acks`.
async fn direct_writes(bootstrap: String, path: TablePath, stop: Arc<AtomicBool>, acks: Acks) {
    let conn = connection_to(&bootstrap).await;
    let table = conn.get_table(&fluss_path(&path)).await.unwrap();
    let schema = fluss::record::to_arrow_schema(table.get_table_info().row_type()).unwrap();
    let writer = table.new_append().unwrap().create_writer().unwrap();
    let mut first = 0;
    while !stop.load(Ordering::SeqCst) {
        let ack = writer.append_arrow_batch(direct_batch(&schema, first)).unwrap();
        let acknowledged = async {
            let (ack, flushed) = tokio::join!(ack, writer.flush());
            ack.and(flushed)
        };
        // A flush that never ends is given up when the test stops writing.
        tokio::select! {
            done = acknowledged => done.expect("fluss-rs retries until acknowledged"),
            () = wait_for(&stop) => return,
        }
        acks.lock().unwrap().push(Instant::now());
        first += PER_BATCH;
        tokio::time::sleep(DIRECT_PACE).await;
    }
}

async fn wait_for(flag: &AtomicBool) {
    while !flag.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The sink fed a batch every [`SINK_PACE`] until `stop`; how many messages.
fn sink_stream(plugin: &Plugin, id: u32, stop: &AtomicBool) -> u64 {
    let mut sent = 0;
    while !stop.load(Ordering::SeqCst) {
        let messages: Vec<TestMessage> = (sent..sent + PER_BATCH)
            .map(|i| TestMessage::text(i, &format!(r#"{{"id":{i},"name":"n{i}"}}"#)))
            .collect();
        let (code, took) = plugin.timed_consume(id, "failover", &messages);
        assert_eq!(
            code,
            0,
            "consume of offsets {sent}.. returned {code}: {:?}",
            logged(&format!("instance={id}"))
        );
        sent += PER_BATCH;
        std::thread::sleep(SINK_PACE.saturating_sub(took));
    }
    sent
}

/// The sum of metric `name`'s samples of instance `id` at `address` now (0 when none).
fn instance_metric(address: &str, name: &str, id: u32) -> f64 {
    let label = format!("instance=\"{id}\"");
    metrics_text(address)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{') && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// What the sink's metrics showed, read every [`SCRAPE_PACE`].
#[derive(Default)]
struct Scraped {
    /// When the count of acknowledged writes was seen to grow.
    acks: Vec<Instant>,
    /// When the spool was seen holding batches.
    spooling: Vec<Instant>,
}

/// Reads instance `id`'s metrics at `address` until `stop`.
fn scrape(address: &str, id: u32, stop: &AtomicBool) -> Scraped {
    let mut scraped = Scraped::default();
    let mut last = 0.0;
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        let count = instance_metric(address, "fluss_sink_write_ack_duration_seconds_count", id);
        if count > last {
            scraped.acks.push(now);
            last = count;
        }
        if instance_metric(address, "fluss_sink_spool_batches", id) > 0.0 {
            scraped.spooling.push(now);
        }
        std::thread::sleep(SCRAPE_PACE);
    }
    scraped
}

/// How long the spool held batches each time it did, without a break
/// (samples [`SCRAPE_PACE`] apart), from its first sample to its last.
fn spooling_runs(samples: &[Instant]) -> Vec<Duration> {
    let mut runs: Vec<(Instant, Instant)> = Vec::new();
    for &at in samples {
        match runs.last_mut() {
            Some((_, last)) if at - *last <= SCRAPE_PACE * 3 => *last = at,
            _ => runs.push((at, at)),
        }
    }
    runs.into_iter().map(|(first, last)| last - first).collect()
}

/// What one case measured after the disturbance began.
struct Recovery {
    /// The longest time fluss-rs alone went without an acknowledged write.
    direct_stall: Duration,
    /// The same for the sink.
    sink_stall: Duration,
    /// The longest time the sink's spool held batches (its lag over the
    /// direct way, until it caught up).
    sink_spooling: Duration,
}

/// The sink's `delivery_timeout`: how long a write waits before its batch is spooled.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(2);

/// fluss-rs alone and the sink write side by side into fresh tables of
/// `cluster` while `disturb` acts on it (given a tablet server leading a
/// bucket of both tables; `leaders_lost` times), and for [`SETTLE`] after;
/// then the sink's spool drains and its table is read back: every message
/// there, once (but see [`assert_at_most_in_flight_batches_repeat`]).
fn measure(cluster: &LocalCluster, disturbance: Disturbance) -> Recovery {
    let case = disturbance.name();
    let bootstrap = cluster.bootstrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let suffix = format!("{:08x}", fastrand::u32(..));
    let (direct, sunk) = (
        TablePath::new(DATABASE, format!("direct_{suffix}")),
        TablePath::new(DATABASE, format!("sink_{suffix}")),
    );
    runtime.block_on(create_table(&bootstrap, &direct));
    runtime.block_on(create_table(&bootstrap, &sunk));
    let (direct_leaders, sink_leaders) = (
        runtime.block_on(leaders(&bootstrap, &direct)),
        runtime.block_on(leaders(&bootstrap, &sunk)),
    );
    let victim = *direct_leaders
        .iter()
        .find(|l| sink_leaders.contains(l))
        .expect("a tablet server leads a bucket of both tables");
    eprintln!(
        "{case}: bucket leaders of fluss-rs alone's table {direct_leaders:?}, the sink's {sink_leaders:?}"
    );

    let plugin = Plugin::load();
    let metrics = format!("127.0.0.1:{}", free_port());
    let spool = tempfile::tempdir().unwrap();
    let config = json!({
        "bootstrap_servers": bootstrap,
        "database": sunk.database,
        "table": sunk.table,
        "columns": [
            {"name": "id", "type": "BIGINT", "nullable": false},
            {"name": "name", "type": "STRING"}
        ],
        "delivery_timeout": format!("{}s", DELIVERY_TIMEOUT.as_secs()),
        "metrics_address": metrics,
        "spool": {"path": spool.path().display().to_string()}
    });
    let id = plugin.open_new(&config);

    let stop = Arc::new(AtomicBool::new(false));
    let direct_acks: Acks = Arc::default();
    let direct_task = runtime.spawn(direct_writes(
        bootstrap.clone(),
        direct.clone(),
        stop.clone(),
        direct_acks.clone(),
    ));
    let (sent, scraped, began, end) = std::thread::scope(|s| {
        let stream = s.spawn(|| sink_stream(plugin, id, &stop));
        let scraper = s.spawn(|| scrape(&metrics, id, &stop));
        std::thread::sleep(BEFORE);
        let began = Instant::now();
        eprintln!("{} {case}: begins", chrono::Utc::now().format("%H:%M:%S%.3f"));
        disturbance.act(cluster, victim);
        eprintln!("{case}: done after {:.1?}", began.elapsed());
        std::thread::sleep(SETTLE);
        let end = Instant::now();
        stop.store(true, Ordering::SeqCst);
        (stream.join().unwrap(), scraper.join().unwrap(), began, end)
    });
    runtime.block_on(direct_task).unwrap();
    // fluss-rs's tasks outlive its dropped writer (one sending to a lost
    // server in a tight loop): they end with their runtime.
    runtime.shutdown_background();
    disturbance.heal(cluster, victim);
    let recovery = Recovery {
        direct_stall: longest_stall(&direct_acks.lock().unwrap(), began, end),
        sink_stall: longest_stall(&scraped.acks, began, end),
        sink_spooling: spooling_runs(&scraped.spooling)
            .into_iter()
            .max()
            .unwrap_or_default(),
    };
    eprintln!(
        "{case}: fluss-rs alone went {:.1?} without an acknowledged write, the sink {:.1?}; the \
         sink's spool held batches for {:.1?} at most",
        recovery.direct_stall, recovery.sink_stall, recovery.sink_spooling
    );

    // Every message once, after the spool has drained.
    let drained = Instant::now();
    while instance_metric(&metrics, "fluss_sink_spool_batches", id) > 0.0 {
        assert!(
            drained.elapsed() < Duration::from_secs(180),
            "{case}: the spool has not drained 3 minutes after the stream stopped"
        );
        std::thread::sleep(SCRAPE_PACE);
    }
    // The sink says how long its last recovery took: from the send of the
    // write that was spooled (a delivery_timeout before the spool held it)
    // until the spool was empty, as seen from here.
    if let Some(last) = spooling_runs(&scraped.spooling).last() {
        let said = Duration::from_secs_f64(instance_metric(
            &metrics,
            "fluss_sink_spool_last_recovery_seconds",
            id,
        ));
        let seen = *last + DELIVERY_TIMEOUT;
        assert!(
            said.abs_diff(seen) <= Duration::from_millis(500),
            "{case}: the sink says its last recovery took {said:.1?}; seen from here, {seen:.1?}"
        );
    }
    assert_eq!(plugin.close(id), 0, "{case}: close");
    let counts = cluster.id_counts(&sunk, sent as usize, Duration::from_secs(120));
    let (missing, repeated) = missing_and_repeated(sent, &counts);
    assert!(
        missing.is_empty(),
        "{case}: {} of {sent} missing (first {:?})",
        missing.len(),
        missing.first()
    );
    assert_at_most_in_flight_batches_repeat(case, &counts, &repeated, disturbance.leaders_lost());
    recovery
}

/// Known and not mended: a batch whose append was on the wire when its
/// bucket's leader went down can land twice. The old leader wrote it (and
/// its followers copied it) but never answered; fluss-rs sends it again to
/// the new leader, whose idempotent writer does not recognise it, and
/// appends it again; the sink itself sent it once (seen: the batch of the
/// first spooled write, its fluss-rs `early eof` retry, nothing else). So at
/// most one whole batch of the sink's may repeat, once, per leader lost;
/// any other repeat fails.
fn assert_at_most_in_flight_batches_repeat(
    case: &str,
    counts: &std::collections::BTreeMap<i64, usize>,
    repeated: &[i64],
    leaders_lost: usize,
) {
    let batches: std::collections::BTreeSet<i64> = repeated.iter().map(|id| id / PER_BATCH as i64).collect();
    let whole_and_twice = batches
        .iter()
        .all(|b| (b * PER_BATCH as i64..(b + 1) * PER_BATCH as i64).all(|id| counts.get(&id) == Some(&2)));
    if !repeated.is_empty() {
        eprintln!("{case}: the batches from ids {batches:?} (x{PER_BATCH}) landed twice");
    }
    assert!(
        batches.len() <= leaders_lost && whole_and_twice,
        "{case}: {} ids repeated (batches {batches:?}; at most {leaders_lost} whole batch(es), each twice, may)",
        repeated.len()
    );
}

/// The promise: the sink writes again, and is caught up, within twice the
/// time fluss-rs alone took to write again, and the disturbance did reach
/// the sink (it spooled).
fn assert_recovers_like_fluss_rs(case: &str, r: &Recovery) {
    assert!(
        r.sink_spooling > Duration::ZERO,
        "{case}: the sink never spooled, so the disturbance did not reach its writes"
    );
    let bound = r.direct_stall * 2;
    assert!(
        r.sink_stall <= bound && r.sink_spooling <= bound,
        "{case}: the sink went {:.1?} without an acknowledged write and spooled for {:.1?}, more than \
         twice fluss-rs alone's {:.1?}",
        r.sink_stall,
        r.sink_spooling,
        r.direct_stall
    );
}

/// What happens to the cluster in a case.
#[derive(Clone, Copy)]
enum Disturbance {
    /// A tablet server leading a bucket of both tables is SIGKILLed and
    /// left down (started again once the measuring is over).
    Kill,
    /// The same server stopped with SIGTERM and started again.
    Restart,
    /// All three stopped with SIGTERM and started again, one after another.
    RollingRestart,
}

impl Disturbance {
    fn name(self) -> &'static str {
        match self {
            Self::Kill => "one of three killed (KILL) and left down",
            Self::Restart => "one of three stopped (TERM) and started again",
            Self::RollingRestart => "all three restarted (TERM) one after another",
        }
    }

    /// Bucket leaders it takes away.
    fn leaders_lost(self) -> usize {
        match self {
            Self::Kill | Self::Restart => 1,
            Self::RollingRestart => 3,
        }
    }

    /// Does it to `cluster`, whose tablet server `victim` leads a bucket of both tables.
    fn act(self, cluster: &LocalCluster, victim: i32) {
        match self {
            Self::Kill => cluster.script(&["kill-tablet", "KILL", &victim.to_string()]),
            Self::Restart => cluster.script(&["restart-tablet", "TERM", &victim.to_string()]),
            Self::RollingRestart => {
                for id in ["0", "1", "2"] {
                    cluster.script(&["restart-tablet", "TERM", id]);
                }
            }
        }
    }

    /// Three servers again, before the read-back and the next case.
    fn heal(self, cluster: &LocalCluster, victim: i32) {
        if let Self::Kill = self {
            cluster.script(&["start-tablet", &victim.to_string()]);
        }
    }
}

#[test]
fn the_sink_recovers_from_lost_tablet_servers_within_twice_fluss_rs_alone() {
    // fluss-rs alone logs here (RUST_LOG=fluss=debug), the plugin through
    // its callback (PLUGIN_LOG=1).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let cluster = LocalCluster::start("failover", 3);
    let cases = [
        Disturbance::Kill,
        Disturbance::Restart,
        Disturbance::RollingRestart,
    ]
    .map(|disturbance| (disturbance.name(), measure(&cluster, disturbance)));
    for (case, recovery) in &cases {
        assert_recovers_like_fluss_rs(case, recovery);
    }
}
