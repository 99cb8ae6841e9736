//! The fault-injection suite: the plugin loaded with dlopen, against a Fluss
//! cluster of this test's own (`target/fluss-faults`, on free ports)
//! whose servers it freezes (SIGSTOP: sockets stay open, nothing answers),
//! kills and restarts, or whose tables it drops under the sink. Every case
//! asserts the accounting (what was written, dead-lettered, or named in a
//! failed return) and how long the call took. The cases run one after the
//! other in one test, since they share the cluster they break; a table of
//! each case's timing is printed at the end.
//!
//! Fails, never skips, when the cluster cannot be started.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use iggy_connector_fluss_sink::TablePath;
use integration_tests::fluss_cluster::Times::{AtMostOnce, Once};
use integration_tests::fluss_cluster::{
    assert_accounting, block, connection_to, fluss_path, lookup_string_at, read_log_at, unique_table,
};
use integration_tests::local_cluster::LocalCluster;
use integration_tests::plugin::{Plugin, TestMessage, assert_prompt, logged, next_id};
use integration_tests::{component, test_cache_dir};
use serde_json::{Value, json};

#[path = "faults/schema.rs"]
mod schema;
#[path = "faults/streamed.rs"]
mod streamed;

/// `delivery_timeout` of the instances that meet a hung or dead cluster.
const DEADLINE: Duration = Duration::from_secs(2);

/// How long a consume may take before it is taken for hung: past the
/// longest `delivery_timeout` here (60 s).
const HUNG: Duration = Duration::from_secs(120);

struct Suite {
    cluster: LocalCluster,
    plugin: &'static Plugin,
    timings: Vec<(&'static str, Duration)>,
}

impl Suite {
    fn config(&self, path: &TablePath, dlq: &TablePath, delivery_timeout: Duration) -> Value {
        json!({
            "bootstrap_servers": self.cluster.bootstrap(),
            "database": path.database,
            "table": path.table,
            "columns": [
                {"name": "id", "type": "BIGINT", "nullable": false},
                {"name": "name", "type": "STRING"}
            ],
            "dead_letter_table": dlq.to_string(),
            "delivery_timeout": format!("{}ms", delivery_timeout.as_millis()),
            "open_timeout": "3s",
            "retry_backoff": "50ms",
            // These cases hold the sink to its bounded failure path, the
            // one `spool.mode = "off"` keeps (tests/tests/spool.rs has the spool's).
            "spool": {"mode": "off"}
        })
    }

    /// Consumes `messages`; the return code and how long it took. A consume
    /// that has not returned after [`HUNG`] fails the test (it is left
    /// running): a deadline that does not hold fails here, named, instead
    /// of hanging the suite.
    fn consume(&self, id: u32, messages: &[TestMessage]) -> (i32, Duration) {
        let (plugin, messages) = (self.plugin, messages.to_vec());
        let (done, returned) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(plugin.timed_consume(id, "faults", &messages));
        });
        returned
            .recv_timeout(HUNG)
            .unwrap_or_else(|_| panic!("a consume of instance {id} has not returned after {HUNG:?}"))
    }

    fn record(&mut self, case: &'static str, took: Duration) {
        self.timings.push((case, took));
    }

    fn freeze(&self) {
        self.cluster.script(&["pause"]);
    }

    fn thaw(&self) {
        self.cluster.script(&["resume"]);
    }

    /// The `id` column of every row of log table `path`, with how often each appears.
    fn ids_in(&self, path: &TablePath, expected: usize) -> BTreeMap<i64, usize> {
        self.cluster.id_counts(path, expected, Duration::from_secs(20))
    }

    /// Waits until the coordinator answers a catalog request again after a
    /// thaw (ZooKeeper and the coordinator may take a few seconds to settle
    /// after SIGCONT), failing the test after 30 s; how long it took.
    fn wait_until_answering(&self) -> Duration {
        let started = Instant::now();
        loop {
            let answered = block(async {
                let probe = async {
                    let conn = connection_to(&self.cluster.bootstrap()).await;
                    conn.get_admin().unwrap().list_databases().await.is_ok()
                };
                tokio::time::timeout(Duration::from_secs(2), probe)
                    .await
                    .unwrap_or(false)
            });
            if answered {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the cluster did not answer within 30 s of the thaw"
            );
        }
    }
}

fn messages(from: u64, count: u64) -> Vec<TestMessage> {
    (from..from + count)
        .map(|i| TestMessage::text(i, &format!(r#"{{"id":{i},"name":"n{i}"}}"#)))
        .collect()
}

/// Both servers frozen during `consume`: it returns 1 within its deadline,
/// naming the offsets; after the thaw the same instance writes again. With
/// `transform` the rows are the component's (on the lean path's writes too).
fn hung_during_consume(suite: &mut Suite, transform: Option<&str>) {
    let (path, dlq) = (unique_table("hung"), unique_table("hung_dlq"));
    let mut config = suite.config(&path, &dlq, DEADLINE);
    if let Some(name) = transform {
        config["transform"] = json!({
            "path": component(name).display().to_string(),
            "cache_dir": test_cache_dir().display().to_string(),
        });
    }
    let id = suite.plugin.open_new(&config);
    assert_eq!(suite.consume(id, &messages(0, 100)).0, 0, "the warm-up batch");

    suite.freeze();
    let (code, took) = suite.consume(id, &messages(100, 100));
    suite.thaw();
    suite.record(
        match transform {
            None => "cluster hung (SIGSTOP) during consume",
            Some(_) => "cluster hung (SIGSTOP) during consume, rows from json-to-row",
        },
        took,
    );
    assert_eq!(code, 1, "a consume that could not be acknowledged fails");
    assert_prompt("hung during consume", took, DEADLINE);
    assert!(
        logged("offsets 100..=199 of app/faults partition 1 may not be in Fluss")
            .iter()
            .any(|(_, line)| line.contains(&format!("instance={id}"))),
        "the offsets that may be missing are logged: {:?}",
        logged(&format!("instance={id}"))
    );

    let (code, took) = suite.consume(id, &messages(200, 100));
    suite.record("first consume after the thaw", took);
    assert_eq!(
        code,
        0,
        "the instance is usable once Fluss answers: {:?}",
        logged(&format!("instance={id}"))
    );
    let ids = suite.ids_in(&path, 300);
    assert_accounting(
        "hung during consume",
        &ids,
        &[(0..100, Once), (200..300, Once), (100..200, AtMostOnce)],
    );
    assert_eq!(suite.plugin.close(id), 0);
}

/// The cluster frozen while a batch needs a partition that does not exist
/// yet: listing and creating partitions are bounded by the same deadline,
/// the call fails within it, and after the thaw the partition is made and
/// the rows land in it.
fn hung_while_a_partition_is_made(suite: &mut Suite) {
    let (path, dlq) = (unique_table("hung_part"), unique_table("hung_part_dlq"));
    let mut config = suite.config(&path, &dlq, DEADLINE);
    config["columns"] = json!([
        {"name": "id", "type": "BIGINT", "nullable": false},
        {"name": "name", "type": "STRING", "nullable": false}
    ]);
    config["partition_keys"] = json!(["name"]);
    let id = suite.plugin.open_new(&config);
    assert_eq!(suite.consume(id, &messages(0, 10)).0, 0, "the warm-up batch");

    // messages() names every row `n<id>`: each batch needs new partitions.
    suite.freeze();
    let (code, took) = suite.consume(id, &messages(10, 10));
    suite.thaw();
    suite.record("cluster hung while partitions are made", took);
    assert_eq!(code, 1, "a consume whose partitions could not be made fails");
    assert_prompt("hung while partitions are made", took, DEADLINE);

    let (code, _) = suite.consume(id, &messages(20, 10));
    assert_eq!(code, 0, "after the thaw: {:?}", logged(&format!("instance={id}")));
    let fluss = fluss_path(&path);
    let partitions = block(async {
        let conn = connection_to(&suite.cluster.bootstrap()).await;
        conn.get_admin()
            .unwrap()
            .list_partition_infos(&fluss)
            .await
            .unwrap()
    });
    let names: Vec<String> = partitions.iter().map(|p| p.get_partition_name()).collect();
    for i in (0..10).chain(20..30) {
        assert!(names.contains(&format!("n{i}")), "partition n{i} made: {names:?}");
    }
    let ids = suite.ids_in(&path, 20);
    assert_accounting(
        "hung while partitions are made",
        &ids,
        &[(0..10, Once), (20..30, Once), (10..20, AtMostOnce)],
    );
    assert_eq!(suite.plugin.close(id), 0);
}

/// The cluster frozen during `open`: it fails within `open_timeout`; `close`
/// after the failed open is harmless, and an open after the thaw works.
fn hung_during_open(suite: &mut Suite) {
    let (path, dlq) = (unique_table("hung_open"), unique_table("hung_open_dlq"));
    let config = suite.config(&path, &dlq, DEADLINE);
    let id = next_id();
    suite.freeze();
    let started = Instant::now();
    let code = suite.plugin.open(id, &config.to_string());
    let took = started.elapsed();
    suite.thaw();
    suite.record("cluster hung (SIGSTOP) during open", took);
    assert_ne!(code, 0, "open against a hung cluster fails");
    assert_prompt("hung during open", took, Duration::from_secs(3));
    suite.plugin.close_unopened(id);
    let settled = suite.wait_until_answering();
    suite.record("the cluster answering again after the thaw", settled);
    // The servers may take a few more seconds to serve the table (seen: an
    // open 4 s after SIGCONT timed out connecting): as the runtime would,
    // open again, each attempt bounded by open_timeout, for at most 30 s.
    let started = Instant::now();
    let id = loop {
        let id = next_id();
        let attempt = Instant::now();
        let code = suite.plugin.open(id, &config.to_string());
        assert_prompt(
            "an open after the thaw",
            attempt.elapsed(),
            Duration::from_secs(3),
        );
        if code == 0 {
            break id;
        }
        suite.plugin.close_unopened(id);
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no open succeeded within 30 s of the thaw: {:?}",
            logged(&format!("instance={id}"))
        );
    };
    suite.record("until an open succeeded after the thaw", started.elapsed());
    // The table is made by that open, its bucket's leader chosen by a
    // cluster just thawed: as with the opens, a first consume may fail
    // within its deadline (seen once in ~10 runs). Each attempt sends ten
    // new ids; one must succeed within 30 s, its rows once, the failed
    // attempts' at most once.
    let (consuming, mut expected) = (Instant::now(), Vec::new());
    for attempt in 0.. {
        let ids = attempt * 10..attempt * 10 + 10;
        let (code, took) = suite.consume(id, &messages(ids.start, 10));
        assert_prompt("a consume after the thaw", took, DEADLINE);
        let range = ids.start as i64..ids.end as i64;
        if code == 0 {
            expected.push((range, Once));
            break;
        }
        expected.push((range, AtMostOnce));
        assert!(
            consuming.elapsed() < Duration::from_secs(30),
            "no consume succeeded within 30 s of the open: {:?}",
            logged(&format!("instance={id}"))
        );
    }
    let ids = suite.ids_in(&path, 10);
    assert_accounting("after a hung open", &ids, &expected);
    assert_eq!(suite.plugin.close(id), 0);
}

/// The only tablet server stopped for longer than the deadline: `consume`
/// fails within it; once the server is back a consume writes again, and
/// the batch acknowledged before the stop is there exactly once. (Stopped
/// with SIGTERM: a SIGKILL of the only replica can lose rows it had
/// acknowledged, seen in CI, and that loss would be the server's.)
fn tablet_dead_longer_than_the_deadline(suite: &mut Suite) {
    let (path, dlq) = (unique_table("dead"), unique_table("dead_dlq"));
    let id = suite.plugin.open_new(&suite.config(&path, &dlq, DEADLINE));
    assert_eq!(suite.consume(id, &messages(0, 50)).0, 0);

    suite.cluster.script(&["kill-tablet", "TERM", "0"]);
    let (code, took) = suite.consume(id, &messages(50, 50));
    suite.record("tablet server killed during consume", took);
    assert_eq!(code, 1);
    assert_prompt("tablet dead", took, DEADLINE);
    suite.cluster.script(&["start-tablet", "0"]);

    // The server takes a while to lead its buckets again: the runtime keeps
    // calling, each call bounded by its deadline.
    let started = Instant::now();
    let mut from = 100;
    loop {
        let (code, took) = suite.consume(id, &messages(from, 50));
        assert_prompt("consume while the tablet server recovers", took, DEADLINE);
        if code == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "no consume succeeded after the restart"
        );
        from += 50;
    }
    suite.record(
        "recovery after the restart (until a consume succeeded)",
        started.elapsed(),
    );
    let ids = suite.ids_in(&path, 100);
    let from = from as i64;
    // The acknowledged warm-up exactly once, the failed calls at most once.
    assert_accounting(
        "tablet dead longer than the deadline",
        &ids,
        &[(0..50, Once), (from..from + 50, Once), (50..from, AtMostOnce)],
    );
    assert_eq!(suite.plugin.close(id), 0);
}

/// Fluss refuses part of a batch for good (a routed table dropped under the
/// sink): those messages are dead-lettered with the server's reason, the
/// rest are written, and the call succeeds.
fn permanent_refusal_of_part_of_a_batch(suite: &mut Suite) {
    let (base, other, dlq) = (
        unique_table("refuse"),
        unique_table("refuse_other"),
        unique_table("refuse_dlq"),
    );
    let mut config = suite.config(&base, &dlq, Duration::from_secs(20));
    config["dynamic_routing"] = json!(true);
    config["auto_create_table"] = json!(true);
    config["allowed_tables"] = json!([format!("{}.refuse_other_*", other.database)]);
    let id = suite.plugin.open_new(&config);
    let routed = |from: u64, count: u64| -> Vec<TestMessage> {
        (from..from + count)
            .map(|i| {
                let to = if i % 2 == 0 {
                    base.to_string()
                } else {
                    other.to_string()
                };
                TestMessage::text(i, &format!(r#"{{"id":{i},"name":"n{i}","fluss_table":"{to}"}}"#))
            })
            .collect()
    };
    assert_eq!(suite.consume(id, &routed(0, 20)).0, 0, "both tables take rows");
    suite.cluster.drop_table(&other);

    // The tablet server takes the dropped table's replica down a moment after
    // the drop: until then it still acknowledges writes. Go on until the
    // first refusal reaches the dead-letter table, then check one batch whole.
    let bootstrap = suite.cluster.bootstrap();
    let letters_from = |from: i64| -> Vec<Vec<String>> {
        block(read_log_at(&bootstrap, &dlq, 1, Duration::from_secs(2)))
            .into_iter()
            .filter(|l| l[3].parse::<i64>().unwrap() >= from)
            .collect()
    };
    let started = Instant::now();
    let mut from = 20;
    while letters_from(0).is_empty() {
        assert_eq!(suite.consume(id, &routed(from, 20)).0, 0);
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the dropped table was never refused"
        );
        from += 20;
    }
    let (code, took) = suite.consume(id, &routed(from, 20));
    suite.record("routed table dropped (permanent refusal of half a batch)", took);
    assert_eq!(code, 0, "{:?}", logged(&format!("instance={id}")));
    assert_prompt("permanent refusal", took, Duration::from_secs(20));
    let from = from as i64;
    let letters = letters_from(from);
    let dead: Vec<i64> = letters.iter().map(|l| l[3].parse().unwrap()).collect();
    assert_eq!(
        dead,
        (from + 1..from + 20).step_by(2).collect::<Vec<_>>(),
        "the odd offsets, routed to the dropped table: {:?}",
        logged(&format!("instance={id}"))
    );
    assert!(
        letters
            .iter()
            .all(|l| l[7] == "write" && l[8].contains("Fluss refused")),
        "{letters:?}"
    );
    let ids = suite.ids_in(&base, (from / 2 + 10) as usize);
    let even_of_the_batch: Vec<i64> = ids.keys().copied().filter(|i| *i >= from).collect();
    assert_eq!(
        even_of_the_batch,
        (from..from + 20).step_by(2).collect::<Vec<_>>()
    );
    assert!(ids.values().all(|n| *n == 1), "every row once");
    assert_eq!(suite.plugin.close(id), 0);
}

/// A dead-letter table of another schema is refused at `open`.
fn wrong_schema_dead_letter_table(suite: &mut Suite) {
    let (path, dlq) = (unique_table("dlq_schema"), unique_table("dlq_schema_t"));
    // Make `dlq` an ordinary table of the sink's schema first.
    let id = suite
        .plugin
        .open_new(&suite.config(&dlq, &unique_table("dlq_schema_dlq"), DEADLINE));
    assert_eq!(suite.plugin.close(id), 0);
    let id = next_id();
    let started = Instant::now();
    let code = suite
        .plugin
        .open(id, &suite.config(&path, &dlq, DEADLINE).to_string());
    let took = started.elapsed();
    suite.record("dead-letter table of another schema (open)", took);
    assert_ne!(code, 0);
    assert_prompt(
        "dead-letter table of another schema",
        took,
        Duration::from_secs(3),
    );
    let said = logged(&format!("{dlq} (dead_letter_table)"));
    assert!(
        said.iter()
            .any(|(level, m)| *level == 4 && m.contains("a dead-letter table needs")),
        "{:?}",
        logged(&format!("instance={id}"))
    );
    suite.plugin.close_unopened(id);
}

/// A dead letter that cannot be written fails the call, naming the offsets.
fn unwritable_dead_letter_table(suite: &mut Suite) {
    let (path, dlq) = (unique_table("dlq_gone"), unique_table("dlq_gone_t"));
    let id = suite
        .plugin
        .open_new(&suite.config(&path, &dlq, Duration::from_secs(5)));
    suite.cluster.drop_table(&dlq);
    let mut batch = messages(0, 10);
    batch.push(TestMessage::text(10, "not json"));
    let (code, took) = suite.consume(id, &batch);
    suite.record("dead-letter table dropped (consume with a dead letter)", took);
    assert_eq!(
        code, 1,
        "a dead letter that cannot be written is never dropped silently"
    );
    assert_prompt("unwritable dead letter", took, Duration::from_secs(5));
    assert!(!logged("offsets 0..=10 of app/faults partition 1 may not be in Fluss").is_empty());
    assert_eq!(suite.plugin.close(id), 0, "an open instance closes");
}

/// The same key written twice in every batch while the tablet server
/// restarts: the final state of each key is its last write.
fn same_key_twice_during_a_restart(suite: &mut Suite) {
    let (path, dlq) = (unique_table("twice"), unique_table("twice_dlq"));
    let mut config = suite.config(&path, &dlq, Duration::from_secs(60));
    config["table_type"] = json!("primary_key");
    config["primary_key_columns"] = json!(["id"]);
    let id = suite.plugin.open_new(&config);
    let batch = |n: u64| -> Vec<TestMessage> {
        let first =
            (0..50).map(|k| TestMessage::text(n * 100 + k, &format!(r#"{{"id":{k},"name":"a{n}"}}"#)));
        let second =
            (0..50).map(|k| TestMessage::text(n * 100 + 50 + k, &format!(r#"{{"id":{k},"name":"b{n}"}}"#)));
        first.chain(second).collect()
    };
    let env = suite.cluster.env();
    let restart = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        integration_tests::local_cluster::fluss_script(&env, &["restart-tablet", "TERM", "0"]);
    });
    let started = Instant::now();
    let mut n = 0;
    let mut longest = Duration::ZERO;
    while !restart.is_finished() || n < 3 {
        let (code, took) = suite.consume(id, &batch(n));
        assert_prompt("a batch during the restart", took, Duration::from_secs(60));
        longest = longest.max(took);
        assert_eq!(code, 0, "batch {n}: {:?}", logged(&format!("instance={id}")));
        n += 1;
        if restart.is_finished() && n >= 3 {
            break;
        }
    }
    restart.join().unwrap();
    suite.record(
        "same key twice per batch through a tablet restart (whole stream)",
        started.elapsed(),
    );
    let last = format!("b{}", n - 1);
    let bootstrap = suite.cluster.bootstrap();
    // A batch that met the restart waited it out (a normal one takes
    // milliseconds; the client retries inside fluss-rs, which logs only its
    // metadata refreshes).
    assert!(
        longest > Duration::from_secs(1),
        "no batch met the restart (the longest took {longest:?}): {:?}",
        logged(&format!("instance={id}"))
    );
    for k in 0..50 {
        let found = block(lookup_string_at(&bootstrap, &path, k, 1));
        assert_eq!(
            found.as_deref(),
            Some(last.as_str()),
            "key {k} ends with its last write"
        );
    }
    assert_eq!(suite.plugin.close(id), 0);
}

#[test]
fn every_promise_holds_under_faults() {
    let cluster = LocalCluster::start("faults", 1);
    let mut suite = Suite {
        cluster,
        plugin: Plugin::load(),
        timings: Vec::new(),
    };
    hung_during_consume(&mut suite, None);
    hung_during_consume(&mut suite, Some("json-to-row"));
    streamed::hung_while_a_transform_batch_streams(&mut suite);
    streamed::deadline_while_a_spooled_transform_batch_is_made(&mut suite);
    hung_during_open(&mut suite);
    hung_while_a_partition_is_made(&mut suite);
    permanent_refusal_of_part_of_a_batch(&mut suite);
    wrong_schema_dead_letter_table(&mut suite);
    unwritable_dead_letter_table(&mut suite);
    same_key_twice_during_a_restart(&mut suite);
    schema::coordinator_hung_while_the_sink_looks_at_its_tables(&mut suite);
    schema::coordinator_hung_while_the_sink_adds_a_column(&mut suite);
    schema::coordinator_hung_while_a_routed_table_takes_a_column(&mut suite);
    tablet_dead_longer_than_the_deadline(&mut suite);
    eprintln!("\nfault case | time");
    for (case, took) in &suite.timings {
        eprintln!("{case} | {took:.2?}");
    }
}
