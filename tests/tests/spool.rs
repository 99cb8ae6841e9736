//! The durable spool against a Fluss cluster of this test's own
//! (`target/fluss-spool`, on free ports), with the plugin loaded
//! with dlopen: the tablet server killed or the cluster frozen while
//! batches arrive, leftovers replayed by the next open, a primary-key
//! table's last writes, a full spool, a second instance on one folder,
//! and a table dropped while its batches sit in the spool. Every case
//! times its calls against the deadline and reads every row back past the
//! expected count, so that a duplicate fails it.
//!
//! Fails, never skips, when the cluster cannot be started.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use iggy_connector_fluss_sink::TablePath;
use integration_tests::fluss_cluster::{block, lookup_string_at, read_log_at, unique_table};
use integration_tests::local_cluster::LocalCluster;
use integration_tests::plugin::{GRACE, Plugin, TestMessage, assert_prompt, logged, next_id};
use serde_json::{Value, json};

/// `delivery_timeout` of every instance here.
const DEADLINE: Duration = Duration::from_secs(2);
/// The longest a spool may take to drain once Fluss is back.
const DRAIN_LIMIT: Duration = Duration::from_secs(120);
/// How long a closed instance's batches are watched for once the server is
/// back: a running client sends what it holds within a second (the spool
/// drains 0.2-0.6 s after the tablet server is started again, here).
const NOTHING_SENT_WINDOW: Duration = Duration::from_secs(5);

#[path = "spool/schema.rs"]
mod schema;

struct Suite {
    cluster: LocalCluster,
    plugin: &'static Plugin,
    spools: tempfile::TempDir,
    timings: Vec<(&'static str, Duration)>,
}

impl Suite {
    fn spool_dir(&self, name: &str) -> PathBuf {
        self.spools.path().join(name)
    }

    fn config(&self, path: &TablePath, dlq: &TablePath, spool: &Path) -> Value {
        json!({
            "bootstrap_servers": self.cluster.bootstrap(),
            "database": path.database,
            "table": path.table,
            "columns": [
                {"name": "id", "type": "BIGINT", "nullable": false},
                {"name": "name", "type": "STRING"}
            ],
            "dead_letter_table": dlq.to_string(),
            "delivery_timeout": format!("{}ms", DEADLINE.as_millis()),
            "open_timeout": "10s",
            "close_timeout": "2s",
            "retry_backoff": "50ms",
            "spool": {"path": spool.display().to_string()}
        })
    }

    fn consume(&self, id: u32, messages: &[TestMessage]) -> (i32, Duration) {
        self.plugin.timed_consume(id, "spool", messages)
    }

    /// Consumes `messages`, which must succeed within the deadline.
    fn consume_ok(&mut self, case: &'static str, id: u32, messages: &[TestMessage]) -> Duration {
        let (code, took) = self.consume(id, messages);
        assert_eq!(code, 0, "{case}: {:?}", logged(&format!("instance={id}")));
        assert_prompt(case, took, DEADLINE);
        took
    }

    /// Stops the only tablet server gracefully (an upgrade's restart): a
    /// SIGKILL of a single replica can lose rows Fluss already acknowledged
    /// (README, "Tablet-server restarts"), which no sink can bring back.
    fn kill_tablet(&self) {
        self.cluster.script(&["kill-tablet", "TERM", "0"]);
    }

    fn start_tablet(&self) {
        self.cluster.script(&["start-tablet", "0"]);
    }

    /// Waits until the spool of `path` says it has drained (the
    /// `drained_before`-th such line), failing after [`DRAIN_LIMIT`].
    fn wait_drained(&mut self, case: &'static str, path: &TablePath, drained_before: usize) -> Duration {
        let needle = format!("the spool of table {path} has drained");
        let started = Instant::now();
        while logged(&needle).len() <= drained_before {
            assert!(
                started.elapsed() < DRAIN_LIMIT,
                "{case}: the spool of {path} did not drain within {DRAIN_LIMIT:?}: {:?}",
                logged("spool")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let took = started.elapsed();
        self.timings.push((case, took));
        took
    }

    /// How often each `id` appears in log table `path`, read past `expected`.
    fn ids_in(&self, path: &TablePath, expected: usize) -> BTreeMap<i64, usize> {
        self.cluster.id_counts(path, expected, Duration::from_secs(60))
    }
}

fn messages(from: u64, count: u64) -> Vec<TestMessage> {
    (from..from + count)
        .map(|i| TestMessage::text(i, &format!(r#"{{"id":{i},"name":"n{i}"}}"#)))
        .collect()
}

/// Each of `ids` exactly once and nothing else.
fn assert_exactly_once(case: &str, found: &BTreeMap<i64, usize>, ids: impl IntoIterator<Item = i64>) {
    let want: BTreeMap<i64, usize> = ids.into_iter().map(|i| (i, 1)).collect();
    if *found != want {
        let missing: Vec<_> = want.keys().filter(|k| !found.contains_key(k)).collect();
        let twice: Vec<_> = found.iter().filter(|(_, n)| **n > 1).map(|(k, _)| k).collect();
        let extra: Vec<_> = found.keys().filter(|k| !want.contains_key(k)).collect();
        panic!(
            "{case}: {} ids missing (first {:?}), {} more than once (first {:?}), {} unexpected (first {:?})",
            missing.len(),
            missing.iter().take(5).collect::<Vec<_>>(),
            twice.len(),
            twice.iter().take(5).collect::<Vec<_>>(),
            extra.len(),
            extra.iter().take(5).collect::<Vec<_>>()
        );
    }
}

/// The record files in a spool folder.
fn records_in(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".rec"))
                .count()
        })
        .unwrap_or(0)
}

/// The tablet server killed while batches arrive: the first consume returns
/// 0 at its deadline with its batch spooled, the next ones at once (queued
/// behind it); once the server is back every row lands exactly once, the
/// dead letter made during the outage too, and the folder is empty.
fn tablet_killed_while_batches_arrive(suite: &mut Suite) {
    let (path, dlq) = (unique_table("killed"), unique_table("killed_dlq"));
    let dir = suite.spool_dir("killed");
    let id = suite.plugin.open_new(&suite.config(&path, &dlq, &dir));
    suite.consume_ok("warm-up", id, &messages(0, 50));

    suite.kill_tablet();
    let took = suite.consume_ok("the first consume of the outage", id, &messages(50, 50));
    assert!(
        took >= DEADLINE - Duration::from_millis(100),
        "the first consume waited for Fluss until its deadline ({took:?})"
    );
    suite.timings.push((
        "first consume while the tablet is dead (spooled at the deadline)",
        took,
    ));
    let mut queued = messages(100, 50);
    queued.push(TestMessage::text(150, "not json"));
    let took = suite.consume_ok("a consume queued behind the spool", id, &queued);
    assert!(
        took < DEADLINE - Duration::from_millis(500),
        "a queued batch returns once durable, not at its deadline: took {took:?}"
    );
    suite.timings.push(("a consume queued behind the spool", took));
    suite.consume_ok("another queued consume", id, &messages(151, 49));
    assert_eq!(records_in(&dir), 3, "three batches on disk");
    assert!(
        !logged(&format!("table {path} starts spooling")).is_empty(),
        "one warn line says the table starts spooling"
    );

    suite.start_tablet();
    suite.wait_drained("drained after the tablet restart", &path, 0);
    let ids = suite.ids_in(&path, 199);
    assert_exactly_once("tablet killed", &ids, (0..200).filter(|i| *i != 150));
    let letters = block(read_log_at(
        &suite.cluster.bootstrap(),
        &dlq,
        1,
        Duration::from_secs(30),
    ));
    assert_eq!(
        letters.len(),
        1,
        "the spooled batch's dead letter, once: {letters:?}"
    );
    assert_eq!(letters[0][3], "150");
    assert_eq!(records_in(&dir), 0, "every record released");
    assert_eq!(suite.plugin.close(id), 0);
}

/// The same outage for a partitioned table: while the only tablet server
/// is away, fluss-rs 1.0's sender task panics on the partition's metadata
/// (see `host/src/writer/client_panics.rs`) and leaves the spool's first
/// attempt without an answer for good; the sink gives that client up, and
/// the spool drains through a new one once the server is back.
fn a_partitioned_table_through_a_tablet_restart(suite: &mut Suite) {
    let (path, dlq) = (unique_table("parted"), unique_table("parted_dlq"));
    let dir = suite.spool_dir("parted");
    let mut config = suite.config(&path, &dlq, &dir);
    config["columns"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "region", "type": "STRING", "nullable": false}));
    config["partition_keys"] = json!(["region"]);
    let id = suite.plugin.open_new(&config);
    let regional = |from: u64, count: u64| -> Vec<TestMessage> {
        (from..from + count)
            .map(|i| {
                let region = ["eu", "us"][i as usize % 2];
                TestMessage::text(i, &format!(r#"{{"id":{i},"name":"n{i}","region":"{region}"}}"#))
            })
            .collect()
    };
    let renewals_before = logged("writer client was renewed").len();
    suite.consume_ok("warm-up of the partitioned table", id, &regional(0, 50));

    suite.kill_tablet();
    let took = suite.consume_ok(
        "a partitioned table's consume during the outage",
        id,
        &regional(50, 50),
    );
    suite
        .timings
        .push(("a partitioned table's consume during the outage", took));
    let took = suite.consume_ok("the next one, queued", id, &regional(100, 50));
    suite
        .timings
        .push(("a partitioned table's consume queued behind it", took));
    suite.start_tablet();
    suite.wait_drained("a partitioned table drained after the restart", &path, 0);
    let ids = block(async {
        let mut all = BTreeMap::new();
        for region in ["eu", "us"] {
            let rows = integration_tests::fluss_cluster::read_partition_at(
                &suite.cluster.bootstrap(),
                &path,
                region,
                76,
                Duration::from_secs(10),
            )
            .await;
            for row in rows {
                *all.entry(row[0].parse::<i64>().unwrap()).or_insert(0) += 1;
            }
        }
        all
    });
    assert_exactly_once("partitioned table through a restart", &ids, 0..150);
    eprintln!(
        "partitioned table through a restart: writer client renewed {} time(s)",
        logged("writer client was renewed").len() - renewals_before
    );
    assert_eq!(records_in(&dir), 0, "every record released");
    assert_eq!(suite.plugin.close(id), 0);
}

/// The cluster frozen (SIGSTOP) during a consume: it returns 0 at its
/// deadline with its batch spooled (a record on disk, and nothing of it in
/// Fluss yet), the next one at once behind it; the rows the client still
/// holds are sent after the thaw by the first attempt, which the drainer
/// settles, so nothing lands twice.
fn cluster_frozen_during_a_consume(suite: &mut Suite) {
    let (path, dlq) = (unique_table("frozen"), unique_table("frozen_dlq"));
    let dir = suite.spool_dir("frozen");
    let id = suite.plugin.open_new(&suite.config(&path, &dlq, &dir));
    suite.consume_ok("warm-up", id, &messages(0, 100));
    suite.cluster.script(&["pause"]);
    let took = suite.consume_ok("consume while frozen", id, &messages(100, 100));
    assert!(
        took >= DEADLINE - Duration::from_millis(100),
        "the frozen cluster held the consume until its deadline ({took:?})"
    );
    assert_eq!(records_in(&dir), 1, "the batch the freeze held is spooled");
    suite
        .timings
        .push(("consume while the cluster is frozen (spooled)", took));
    let took = suite.consume_ok("queued while frozen", id, &messages(200, 100));
    assert!(
        took < DEADLINE - Duration::from_millis(500),
        "a batch queued behind the spool returns once on disk, not at its deadline ({took:?})"
    );
    assert_eq!(records_in(&dir), 2, "queued behind it");
    suite.cluster.script(&["resume"]);
    suite.wait_drained("drained after the thaw", &path, 0);
    assert_exactly_once("frozen", &suite.ids_in(&path, 300), 0..300);
    assert_eq!(suite.plugin.close(id), 0);
}

/// An instance closed while its spool holds batches leaves them on disk;
/// the next open on the folder replays them before new batches, once. A
/// second instance on a held folder is refused, naming it.
fn leftovers_are_replayed_by_the_next_open(suite: &mut Suite) {
    let (path, dlq) = (unique_table("left"), unique_table("left_dlq"));
    let dir = suite.spool_dir("left");
    let config = suite.config(&path, &dlq, &dir);
    let first = suite.plugin.open_new(&config);
    suite.consume_ok("warm-up", first, &messages(0, 50));
    suite.kill_tablet();
    suite.consume_ok("spooled at the deadline", first, &messages(50, 50));
    suite.consume_ok("queued", first, &messages(100, 50));
    let started = Instant::now();
    assert_eq!(suite.plugin.close(first), 0);
    let took = started.elapsed();
    assert!(
        took <= Duration::from_secs(4) + GRACE,
        "close took {took:?}, twice close_timeout is 4 s"
    );
    suite.timings.push(("close while the spool holds batches", took));
    assert_eq!(records_in(&dir), 2, "the spooled batches stay on disk");
    assert!(!logged(&format!("spool {}: 2 batch(es)", dir.display())).is_empty());

    suite.start_tablet();
    // Closed, the first instance's client sends nothing more: the spooled
    // batches stay out of the table until the next open replays them. (A
    // sender left running sent them once the server was back, and the
    // replay wrote them again: seen in CI as 50 ids twice.) Nothing can be
    // awaited for a send that must not come: the window is longer than a
    // running client takes to send a held batch to a server come back.
    std::thread::sleep(NOTHING_SENT_WINDOW);
    assert_exactly_once("nothing sent after close", &suite.ids_in(&path, 50), 0..50);
    let second = suite.plugin.open_new(&config);
    let third = next_id();
    assert_ne!(
        suite.plugin.open(third, &config.to_string()),
        0,
        "a second instance on one folder"
    );
    let refusal = logged(&format!("instance={third}"));
    assert!(
        refusal
            .iter()
            .any(|(_, m)| m.contains(&dir.display().to_string()) && m.contains("in use")),
        "the refusal names the folder: {refusal:?}"
    );
    suite.plugin.close_unopened(third);
    suite.wait_drained("leftovers replayed by the next open", &path, 0);
    suite.consume_ok("a new batch after the leftovers", second, &messages(150, 50));
    assert_exactly_once("leftovers", &suite.ids_in(&path, 200), 0..200);
    assert_eq!(suite.plugin.close(second), 0);
}

/// A primary-key table whose keys are written in every batch while the
/// tablet server is away: each key ends with its last write.
fn primary_key_keeps_the_last_write(suite: &mut Suite) {
    let (path, dlq) = (unique_table("keyed"), unique_table("keyed_dlq"));
    let dir = suite.spool_dir("keyed");
    let mut config = suite.config(&path, &dlq, &dir);
    config["table_type"] = json!("primary_key");
    config["primary_key_columns"] = json!(["id"]);
    let id = suite.plugin.open_new(&config);
    let batch = |n: u64| -> Vec<TestMessage> {
        (0..40)
            .map(|k| TestMessage::text(n * 40 + k, &format!(r#"{{"id":{k},"name":"v{n}"}}"#)))
            .collect()
    };
    suite.consume_ok("warm-up", id, &batch(0));
    suite.kill_tablet();
    for n in 1..=4 {
        suite.consume_ok("a keyed batch during the outage", id, &batch(n));
    }
    suite.start_tablet();
    suite.wait_drained("keyed batches drained", &path, 0);
    let bootstrap = suite.cluster.bootstrap();
    for k in 0..40 {
        let found = block(lookup_string_at(&bootstrap, &path, k, 1));
        assert_eq!(found.as_deref(), Some("v4"), "key {k} ends with its last write");
    }
    assert_eq!(suite.plugin.close(id), 0);
}

/// A spool of a few kilobytes while the cluster is frozen: the consume that
/// finds no room returns 1 at its deadline, loudly; every batch that was
/// accepted lands once after the thaw, and the refused one is not written.
fn a_full_spool_refuses_within_the_deadline(suite: &mut Suite) {
    let (path, dlq) = (unique_table("full"), unique_table("full_dlq"));
    let dir = suite.spool_dir("full");
    let mut config = suite.config(&path, &dlq, &dir);
    config["spool"]["max_size"] = json!("12 KiB");
    let id = suite.plugin.open_new(&config);
    suite.consume_ok("warm-up", id, &messages(0, 50));
    suite.cluster.script(&["pause"]);
    let mut accepted: Vec<std::ops::Range<i64>> = Vec::new();
    accepted.push(0..50);
    let mut refused = None;
    for n in 1..10u64 {
        let batch = messages(n * 50, 50);
        let (code, took) = suite.consume(id, &batch);
        assert_prompt("consume with a spool filling up", took, DEADLINE);
        if code == 0 {
            accepted.push(n as i64 * 50..n as i64 * 50 + 50);
        } else {
            suite.timings.push(("consume refused by a full spool", took));
            refused = Some(n);
            break;
        }
    }
    suite.cluster.script(&["resume"]);
    let n = refused.expect("a 12 KiB spool fills up within nine batches of 50");
    assert!(n >= 2, "at least one batch fitted before the spool was full");
    let loud = logged("the spool is full");
    assert!(
        loud.iter().any(|(level, _)| *level == 4),
        "an error line: {loud:?}"
    );
    assert!(
        !logged(&format!(
            "messages at offsets {}..={} of app/spool",
            n * 50,
            n * 50 + 49
        ))
        .is_empty(),
        "the error line names the refused offsets"
    );
    suite.wait_drained("a full spool drained", &path, 0);
    let total: usize = accepted.iter().map(|r| (r.end - r.start) as usize).sum();
    assert_exactly_once(
        "full spool",
        &suite.ids_in(&path, total),
        accepted.into_iter().flatten(),
    );
    assert_eq!(suite.plugin.close(id), 0);
}

/// The sink's table dropped while its batches sit in the spool: they are
/// dead-lettered with the reason once the table is known to be gone, and
/// the spool moves on.
fn a_table_dropped_under_the_spool(suite: &mut Suite) {
    let (path, dlq) = (unique_table("dropped"), unique_table("dropped_dlq"));
    let dir = suite.spool_dir("dropped");
    let id = suite.plugin.open_new(&suite.config(&path, &dlq, &dir));
    suite.consume_ok("warm-up", id, &messages(0, 10));
    suite.kill_tablet();
    suite.consume_ok("spooled", id, &messages(10, 10));
    suite.consume_ok("queued", id, &messages(20, 10));
    suite.cluster.drop_table(&path);
    suite.start_tablet();
    suite.wait_drained("a dropped table's batches dead-lettered", &path, 0);
    let letters = block(read_log_at(
        &suite.cluster.bootstrap(),
        &dlq,
        20,
        Duration::from_secs(30),
    ));
    let mut offsets: Vec<i64> = letters.iter().map(|l| l[3].parse().unwrap()).collect();
    offsets.sort();
    assert_eq!(
        offsets,
        (10..30).collect::<Vec<_>>(),
        "each spooled message dead-lettered once"
    );
    assert!(
        letters
            .iter()
            .all(|l| l[8].contains("Table not found") || l[8].contains("no longer exists")),
        "the reason says the table is gone: {:?}",
        letters.first()
    );
    assert_eq!(records_in(&dir), 0);
    assert_eq!(suite.plugin.close(id), 0);
}

/// A tmpfs of `size` mounted at `dir` (root only: CI runs as root), and
/// unmounted when dropped.
struct Mounted(PathBuf);

impl Mounted {
    fn tmpfs(dir: &Path, options: &str) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(dir)
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "mounting a tmpfs ({options}) at {} failed: the disk-error cases need root",
            dir.display()
        );
        Self(dir.to_path_buf())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// A spool on a disk that fills up (a 64 KiB tmpfs) while the cluster is
/// frozen: a batch whose record cannot be written is never taken as
/// durable; `consume` returns 1 within its deadline and the log says why.
/// A read-only folder fails `open`, naming it.
fn disk_errors_are_never_taken_as_durable(suite: &mut Suite) {
    let (path, dlq) = (unique_table("nospace"), unique_table("nospace_dlq"));
    let dir = suite.spool_dir("nospace");
    let _disk = Mounted::tmpfs(&dir, "size=64k,mode=0700");
    let id = suite.plugin.open_new(&suite.config(&path, &dlq, &dir));
    suite.consume_ok("warm-up", id, &messages(0, 50));
    suite.cluster.script(&["pause"]);
    let mut accepted: Vec<std::ops::Range<i64>> = Vec::new();
    accepted.push(0..50);
    let mut failed = None;
    for n in 1..40u64 {
        let (code, took) = suite.consume(id, &messages(n * 50, 50));
        assert_prompt("consume onto a filling disk", took, DEADLINE);
        if code != 0 {
            failed = Some(n);
            break;
        }
        accepted.push(n as i64 * 50..n as i64 * 50 + 50);
    }
    suite.cluster.script(&["resume"]);
    let n = failed.expect("a 64 KiB disk fills up within 40 batches");
    let why = logged("No space left on device");
    assert!(!why.is_empty(), "the log says the disk is full");
    assert!(
        !logged(&format!(
            "messages at offsets {}..={} of app/spool",
            n * 50,
            n * 50 + 49
        ))
        .is_empty(),
        "the error line names the batch that was not durable"
    );
    suite.wait_drained("a full disk's spool drained", &path, 0);
    let total: usize = accepted.iter().map(|r| (r.end - r.start) as usize).sum();
    assert_exactly_once(
        "full disk",
        &suite.ids_in(&path, total),
        accepted.into_iter().flatten(),
    );
    assert_eq!(suite.plugin.close(id), 0);

    let read_only = suite.spool_dir("read_only");
    let _ro = Mounted::tmpfs(&read_only, "ro,mode=0700");
    let id = next_id();
    let config = suite.config(&unique_table("read_only"), &dlq, &read_only);
    assert_ne!(
        suite.plugin.open(id, &config.to_string()),
        0,
        "a read-only spool folder fails open"
    );
    let said = logged(&format!("instance={id}"));
    assert!(
        said.iter()
            .any(|(_, m)| m.contains(&read_only.display().to_string()) && m.contains("Read-only")),
        "the error names the folder and why: {said:?}"
    );
    suite.plugin.close_unopened(id);
}

#[test]
fn nothing_is_lost_while_fluss_is_away() {
    let cluster = LocalCluster::start("spool", 1);
    let mut suite = Suite {
        cluster,
        plugin: Plugin::load(),
        spools: tempfile::tempdir().expect("a folder for the spools"),
        timings: Vec::new(),
    };
    tablet_killed_while_batches_arrive(&mut suite);
    a_partitioned_table_through_a_tablet_restart(&mut suite);
    cluster_frozen_during_a_consume(&mut suite);
    leftovers_are_replayed_by_the_next_open(&mut suite);
    primary_key_keeps_the_last_write(&mut suite);
    a_full_spool_refuses_within_the_deadline(&mut suite);
    a_table_dropped_under_the_spool(&mut suite);
    schema::a_column_added_while_a_batch_is_spooled(&mut suite);
    schema::a_column_added_while_a_closed_instance_left_a_batch_spooled(&mut suite);
    disk_errors_are_never_taken_as_durable(&mut suite);
    eprintln!("\nspool case | time");
    for (case, took) in &suite.timings {
        eprintln!("{case} | {took:.2?}");
    }
}
