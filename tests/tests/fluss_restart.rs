//! Tablet servers stopped and restarted in the middle of a stream: every
//! message is accounted for (written + filtered + dead-lettered = sent), no
//! acknowledged row is lost, the log table holds each row once and the
//! primary-key table ends in exactly the state the stream describes.
//!
//! - A crash (SIGKILL) of the bucket leader, on a cluster of three tablet
//!   servers with replication factor 3 that this test starts itself
//!   (`scripts/fluss-local.sh` with `FLUSS_TABLETS=3`, in
//!   `target/fluss-replicated`). On a single replica Fluss 0.9.1 itself loses
//!   acknowledged rows after a crash: the restarted server truncates its log
//!   to its last high-watermark checkpoint (every 5 s by default) before it
//!   leads again (apache/fluss#673, seen here: 2,400 rows acknowledged, 1,900
//!   readable). No client can prevent that, so the crash is tested where
//!   Fluss promises durability: with replicas.
//! - A graceful restart (SIGTERM) of the only tablet server of the shared
//!   local cluster (`scripts/fluss-local.sh start`).
//!
//! Both fail, never skip, when a cluster cannot be had.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use fluss::metadata::{TableBucket, TablePath as FlussPath};
use fluss::row::{DataGetters, GenericRow};
use fluss_row_codec::RowKind;
use iggy_connector_fluss_sink::JsonMapping;
use iggy_connector_fluss_sink::{DeadLetterKind, FlussWriter, MadeRows, WriteReport, WriterSettings};
use iggy_connector_fluss_sink::{TablePath, TableSchema};
use integration_tests::fluss_cluster::{
    bootstrap, connection_to, read_log_at, settings, unique_table, writer,
};
use integration_tests::local_cluster::{LocalCluster, fluss_script};
use integration_tests::{table, text_batch};

const PER_BATCH: usize = 100;
/// Batches written after the last restart, so that the stream is seen to go on.
const BATCHES_AFTER: usize = 5;

fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// A cluster of three tablet servers of this test's own, on ports apart from
/// the shared one.
struct ReplicatedCluster(LocalCluster);

impl ReplicatedCluster {
    fn start() -> Self {
        Self(LocalCluster::start("replicated", 3))
    }

    fn bootstrap(&self) -> String {
        self.0.bootstrap()
    }

    /// Restarts tablet server `id` after stopping it with `signal`.
    async fn restart(&self, signal: &str, id: i32) {
        let env = self.0.env();
        let (signal, id) = (signal.to_string(), id.to_string());
        tokio::task::spawn_blocking(move || fluss_script(&env, &["restart-tablet", &signal, &id]))
            .await
            .expect("restart the tablet server");
    }
}

/// The id of the tablet server leading bucket 0 of `path`, as the cluster says now.
async fn leader_of(bootstrap_servers: &str, path: &TablePath) -> i32 {
    let conn = connection_to(bootstrap_servers).await;
    let table = conn
        .get_table(&FlussPath::new(path.database.clone(), path.table.clone()))
        .await
        .expect("the table exists");
    let bucket = TableBucket::new(table.get_table_info().table_id, 0);
    conn.get_metadata()
        .get_cluster()
        .leader_for(&bucket)
        .map(|node| node.id())
        .expect("bucket 0 has a leader")
}

/// Message `n` of the stream: a JSON object with its id and batch number.
fn payload(id: usize, batch: usize) -> String {
    format!(r#"{{"id":{id},"batch":{batch}}}"#)
}

/// Writes `payloads` to `path` as rows of `kind` and adds the outcome to `total`.
async fn write_json(
    w: &FlussWriter,
    schema: &TableSchema,
    kind: RowKind,
    payloads: &[String],
    total: &mut WriteReport,
) {
    let refs: Vec<&str> = payloads.iter().map(String::as_str).collect();
    let batch = text_batch(&refs);
    let out = JsonMapping::new(schema, kind).map_batch(&batch);
    let r = w
        .write(&batch, MadeRows::new(out, DeadLetterKind::Mapping), &schema.path)
        .await
        .unwrap_or_else(|e| panic!("a batch to {} was not delivered: {e}", schema.path));
    total.written += r.written;
    total.filtered += r.filtered;
    total.dead_lettered += r.dead_lettered;
}

/// What a stream into one log table and one primary-key table did.
struct StreamOutcome {
    batches: usize,
    log: WriteReport,
    keyed: WriteReport,
}

/// Writes batch after batch of [`PER_BATCH`] messages into the log table
/// (appends) and the primary-key table (upserts of this batch's ids, then
/// deletes of every tenth id of the batch before) until `stop` is set and
/// [`BATCHES_AFTER`] more have been written.
async fn stream(
    w: Arc<FlussWriter>,
    log: TableSchema,
    keyed: TableSchema,
    stop: Arc<AtomicBool>,
    progress: Arc<AtomicUsize>,
) -> StreamOutcome {
    let mut outcome = StreamOutcome {
        batches: 0,
        log: WriteReport::default(),
        keyed: WriteReport::default(),
    };
    let mut after_stop = 0;
    while after_stop < BATCHES_AFTER {
        let b = outcome.batches;
        let payloads: Vec<String> = (0..PER_BATCH).map(|i| payload(b * PER_BATCH + i, b)).collect();
        write_json(&w, &log, RowKind::Append, &payloads, &mut outcome.log).await;
        write_json(&w, &keyed, RowKind::Upsert, &payloads, &mut outcome.keyed).await;
        if b > 0 {
            let deletes: Vec<String> = (0..PER_BATCH)
                .step_by(10)
                .map(|i| payload((b - 1) * PER_BATCH + i, b - 1))
                .collect();
            write_json(&w, &keyed, RowKind::Delete, &deletes, &mut outcome.keyed).await;
        }
        outcome.batches += 1;
        progress.store(outcome.batches, Ordering::SeqCst);
        if stop.load(Ordering::SeqCst) {
            after_stop += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    outcome
}

/// The primary-key table's state the stream describes: id → batch.
fn expected_keyed_state(batches: usize) -> BTreeMap<i64, i32> {
    let mut state = BTreeMap::new();
    for b in 0..batches {
        for i in 0..PER_BATCH {
            state.insert((b * PER_BATCH + i) as i64, b as i32);
        }
        if b > 0 {
            for i in (0..PER_BATCH).step_by(10) {
                state.remove(&(((b - 1) * PER_BATCH + i) as i64));
            }
        }
    }
    state
}

/// Looks up ids `0..ids` in the primary-key table: id → batch of the rows found.
async fn keyed_state(bootstrap_servers: &str, path: &TablePath, ids: usize) -> BTreeMap<i64, i32> {
    // One key at a time: do not let each wait out the client's 100 ms lookup batching.
    let config = fluss::config::Config {
        bootstrap_servers: bootstrap_servers.to_string(),
        lookup_batch_timeout_ms: 1,
        ..Default::default()
    };
    let conn = fluss::client::FlussConnection::new(config)
        .await
        .expect("Fluss is reachable");
    let table = conn
        .get_table(&FlussPath::new(path.database.clone(), path.table.clone()))
        .await
        .unwrap();
    let mut lookuper = table.new_lookup().unwrap().create_lookuper().unwrap();
    let mut state = BTreeMap::new();
    for id in 0..ids as i64 {
        let mut key = GenericRow::new(1);
        key.set_field(0, id);
        let found = lookuper.lookup(&key).await.expect("lookup");
        if let Some(row) = found.get_single_row().unwrap() {
            state.insert(id, row.get_int(1).unwrap());
        }
    }
    state
}

/// Checks what the stream reported and what the tables hold.
async fn assert_nothing_lost(
    bootstrap_servers: &str,
    w: &FlussWriter,
    out: &StreamOutcome,
    log: &TablePath,
    keyed: &TablePath,
) {
    let sent = out.batches * PER_BATCH;
    let keyed_sent = sent + out.batches.saturating_sub(1) * PER_BATCH / 10;
    assert_eq!(out.log.written + out.log.filtered + out.log.dead_lettered, sent);
    assert_eq!(
        out.keyed.written + out.keyed.filtered + out.keyed.dead_lettered,
        keyed_sent
    );
    assert_eq!(
        (out.log.dead_lettered, out.keyed.dead_lettered),
        (0, 0),
        "a restart is transient, not a reason to dead-letter"
    );
    let dlq = w.settings().dead_letter_table.clone().unwrap();
    assert_eq!(
        read_log_at(bootstrap_servers, &dlq, 1, Duration::from_secs(3))
            .await
            .len(),
        0,
        "nothing in the dead-letter table"
    );

    let rows = read_log_at(bootstrap_servers, log, sent, Duration::from_secs(60)).await;
    let ids: BTreeSet<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(ids.len(), sent, "every acknowledged row is in the log table");
    let again = read_log_at(bootstrap_servers, log, sent + 1, Duration::from_secs(3)).await;
    assert_eq!(again.len(), sent, "the log table holds each row once");

    assert_eq!(
        keyed_state(bootstrap_servers, keyed, sent).await,
        expected_keyed_state(out.batches),
        "the primary-key table holds every upsert and none of the deleted keys"
    );
}

async fn tables(w: &FlussWriter) -> (TableSchema, TableSchema) {
    let columns = [("id", "BIGINT", false), ("batch", "INT", true)];
    let log = w
        .ensure_table(&table(&unique_table("restart_log").to_string(), &columns, &[]))
        .await
        .unwrap();
    let keyed = w
        .ensure_table(&table(&unique_table("restart_pk").to_string(), &columns, &["id"]))
        .await
        .unwrap();
    (log, keyed)
}

fn restart_settings(bootstrap_servers: String) -> WriterSettings {
    WriterSettings {
        bootstrap_servers,
        delivery_timeout: Duration::from_secs(120),
        max_retries: 50,
        ..settings()
    }
}

/// A stream (see [`stream`]) running against the cluster at `bootstrap`.
struct RunningStream {
    bootstrap: String,
    writer: Arc<FlussWriter>,
    log: TableSchema,
    keyed: TableSchema,
    stop: Arc<AtomicBool>,
    progress: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<StreamOutcome>,
}

impl RunningStream {
    /// Creates fresh tables on the cluster at `bootstrap` and starts streaming.
    async fn start(bootstrap: String) -> Self {
        let writer = Arc::new(writer(restart_settings(bootstrap.clone())).await);
        let (log, keyed) = tables(&writer).await;
        let (stop, progress) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
        let task = tokio::spawn(stream(
            writer.clone(),
            log.clone(),
            keyed.clone(),
            stop.clone(),
            progress.clone(),
        ));
        Self {
            bootstrap,
            writer,
            log,
            keyed,
            stop,
            progress,
            task,
        }
    }

    /// Waits until `more` batches beyond those written so far are written,
    /// failing the test when the stream ended or 120 s (the writer's own
    /// delivery timeout) passed without them.
    async fn wait_for_batches(&self, more: usize) {
        const LIMIT: Duration = Duration::from_secs(120);
        let started = std::time::Instant::now();
        let target = self.progress.load(Ordering::SeqCst) + more;
        while self.progress.load(Ordering::SeqCst) < target {
            assert!(
                !self.task.is_finished(),
                "the stream ended (panicked or stopped) before writing {more} more batches"
            );
            assert!(
                started.elapsed() < LIMIT,
                "the stream wrote {} of {more} more batches in {LIMIT:?}",
                more - (target - self.progress.load(Ordering::SeqCst))
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Lets the stream write its last batches, then checks that nothing was lost.
    async fn finish_and_check(self) {
        self.stop.store(true, Ordering::SeqCst);
        let out = self.task.await.expect("the stream ran to its end");
        assert_nothing_lost(
            &self.bootstrap,
            &self.writer,
            &out,
            &self.log.path,
            &self.keyed.path,
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bucket_leaders_killed_mid_stream_lose_nothing_with_replicas() {
    init_logging();
    let cluster = tokio::task::spawn_blocking(ReplicatedCluster::start)
        .await
        .unwrap();
    let run = RunningStream::start(cluster.bootstrap()).await;

    // Crash the leader of the log table's bucket, then, once the stream has
    // gone on, the leader of the primary-key table's bucket (maybe the same server).
    run.wait_for_batches(5).await;
    let leader = leader_of(&cluster.bootstrap(), &run.log.path).await;
    cluster.restart("KILL", leader).await;
    run.wait_for_batches(3).await;
    let leader = leader_of(&cluster.bootstrap(), &run.keyed.path).await;
    cluster.restart("KILL", leader).await;
    run.finish_and_check().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_tablet_server_restarted_gracefully_mid_stream_loses_nothing() {
    init_logging();
    let run = RunningStream::start(bootstrap()).await;
    run.wait_for_batches(5).await;
    tokio::task::spawn_blocking(|| fluss_script(&[], &["restart-tablet", "TERM", "0"]))
        .await
        .unwrap();
    run.finish_and_check().await;
}
