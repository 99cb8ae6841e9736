//! Delivery through the real Apache Iggy runtime (see `iggy_runtime.rs` for
//! the harness's needs): what a runtime stopped or crashing mid-stream loses
//! or repeats, and two runtimes sharing a topic in one consumer group. The
//! runtime commits a poll's offsets when it polls, before `consume`: these
//! tests measure what that allows, and assert it.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use iggy_connector_fluss_sink::TablePath;
use integration_tests::fluss_cluster::{
    block, bootstrap, id_counts, missing_and_repeated, read_log, unique_table,
};
use integration_tests::iggy::{
    Connector, Outgoing, Server, binaries_present, start_runtime, wait_for_table, wait_for_table_at,
};
use integration_tests::local_cluster::LocalCluster;
use integration_tests::{free_port, scrape_sum};

/// The server's ports are fixed: one test at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// How a runtime process is stopped mid-stream.
#[derive(Clone, Copy, Debug)]
enum Stop {
    /// SIGTERM: the runtime shuts down (waits for its tasks, calls `close`).
    Graceful,
    /// SIGKILL: the process is gone at once.
    Crash,
}

/// Each order id in `table` (at `bootstrap`) and how many times it was
/// written, read past `expected` rows until the table is quiet (or 30 s).
fn order_counts(bootstrap: &str, table: &TablePath, expected: usize) -> BTreeMap<i64, usize> {
    id_counts(bootstrap, table, expected, Duration::from_secs(30))
}

fn orders_config(bootstrap: &str, table: &TablePath) -> String {
    format!(
        r#"bootstrap_servers = "{bootstrap}"
database = "{database}"
table = "{name}"
delivery_timeout = "60s"
columns = [ {{ name = "order_id", type = "BIGINT", nullable = false }}, {{ name = "customer", type = "STRING" }} ]"#,
        database = table.database,
        name = table.table,
    )
}

/// The runtime commits a poll's offsets when it polls, before it calls
/// `consume` (at-most-once). Stopped mid-stream while a producer keeps
/// writing, then started again, it loses at most one poll (one run of
/// consecutive offsets, at most `batch_length`) and repeats nothing, with
/// SIGTERM as with SIGKILL: on SIGTERM the poll taken when the signal came
/// is never handed to the plugin, which wrote every message it was given
/// (its close line: received = written); on SIGKILL the poll being
/// consumed is lost unless its rows had already reached Fluss.
#[test]
fn a_runtime_stopped_mid_stream_loses_at_most_one_poll_and_repeats_nothing() {
    if !binaries_present("a_runtime_stopped_mid_stream_loses_at_most_one_poll_and_repeats_nothing") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for stop in [Stop::Graceful, Stop::Crash] {
        let work = tempfile::tempdir().unwrap();
        let server = Server::start(work.path(), 1);
        let table = unique_table("runtime_restart");
        const TOTAL: u64 = 20_000;
        server.produce_orders(0, 2_000);
        let connector = Connector::new(orders_config(&bootstrap(), &table));
        let mut runtime = start_runtime(&server, work.path(), "runtime", &connector, &[]);
        wait_for_table(&table);
        assert_eq!(order_counts(&bootstrap(), &table, 2_000).len(), 2_000);
        use std::sync::atomic::{AtomicU64, Ordering};
        let produced = AtomicU64::new(2_000);
        let (stopped, producing_at_stop, landed_at_stop) = std::thread::scope(|scope| {
            // 200 messages every 50 ms: the stream lasts about 4.5 s, so a
            // stop a third of the way in falls inside it (with a quicker
            // producer every message had landed before the stop).
            let producer = scope.spawn(|| {
                for from in (2_000..TOTAL).step_by(200) {
                    server.produce_orders(from, from + 200);
                    produced.store(from + 200, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(50));
                }
            });
            let waiting = std::time::Instant::now();
            while produced.load(Ordering::SeqCst) < 8_000 {
                assert!(
                    waiting.elapsed() < Duration::from_secs(60),
                    "the producer stalled"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            let stopped = match stop {
                Stop::Graceful => runtime.terminate(Duration::from_secs(30)),
                Stop::Crash => {
                    runtime.kill();
                    true
                }
            };
            let producing = produced.load(Ordering::SeqCst) < TOTAL;
            // What had landed by the stop (read until the table is quiet).
            let landed = id_counts(&bootstrap(), &table, TOTAL as usize, Duration::from_secs(2)).len();
            eprintln!("{stop:?}: {landed} rows landed by the stop");
            runtime = start_runtime(&server, work.path(), "runtime", &connector, &[]);
            producer.join().unwrap();
            (stopped, producing, landed)
        });
        assert!(stopped, "the runtime stopped within 30 s of SIGTERM");
        // The stop fell mid-stream: messages were still being produced and
        // most had not landed yet.
        assert!(
            producing_at_stop,
            "{stop:?}: the producer had finished before the stop"
        );
        assert!(
            (2_001..TOTAL as usize).contains(&landed_at_stop),
            "{stop:?}: the sink was writing the live stream, and not all of it, at the stop ({landed_at_stop})"
        );
        let counts = order_counts(&bootstrap(), &table, TOTAL as usize);
        let (missing, repeated) = missing_and_repeated(TOTAL, &counts);
        eprintln!(
            "{stop:?} mid-stream: {} of {TOTAL} landed, {} missing ({:?}..={:?}), {} repeated",
            counts.len(),
            missing.len(),
            missing.first(),
            missing.last(),
            repeated.len()
        );
        assert!(repeated.is_empty(), "{stop:?}: repeated {repeated:?}");
        let consecutive = missing.windows(2).all(|w| w[1] == w[0] + 1);
        assert!(
            consecutive && missing.len() <= connector.batch_length,
            "{stop:?} may lose one poll, no more: {missing:?}"
        );
        if let Stop::Graceful = stop {
            // What the runtime handed the plugin before SIGTERM, it wrote: the
            // loss, if any, is a poll the runtime committed and never handed over.
            let log = runtime.log();
            let closed = log
                .lines()
                .find(|l| l.contains("closed instance="))
                .expect("the runtime closed the sink on SIGTERM");
            let field = |name: &str| -> u64 {
                let at = closed.find(&format!("{name}=")).unwrap() + name.len() + 1;
                closed[at..]
                    .split(|c: char| !c.is_ascii_digit())
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap()
            };
            assert_eq!(field("received"), field("written"), "{closed}");
            if let Some(first) = missing.first() {
                assert_eq!(
                    *first as u64,
                    field("received"),
                    "the lost poll comes right after what the plugin got"
                );
            }
        }
    }
}

/// A crash *during* a `consume` (Fluss hung, so the consume waits for its
/// acknowledgements) loses what the runtime had already committed and the
/// sink had not got acknowledged: at most that one poll's messages, here
/// offsets 2,000..3,000. Nothing is repeated (at-most-once), nothing
/// outside that poll is lost. The kill is shown to land inside a consume
/// (the plugin's `messages_in_flight` gauge); in the runs here the append
/// was already in the frozen server's socket and landed after the thaw, so
/// nothing was lost.
#[test]
fn a_runtime_crashing_during_a_consume_loses_at_most_that_poll_and_repeats_nothing() {
    if !binaries_present("a_runtime_crashing_during_a_consume_loses_at_most_that_poll_and_repeats_nothing") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = LocalCluster::start("runtime", 1);
    let bootstrap = cluster.bootstrap();
    let work = tempfile::tempdir().unwrap();
    let server = Server::start(work.path(), 1);
    let table = unique_table("runtime_crash");
    server.produce_orders(0, 2_000);
    let metrics = format!("127.0.0.1:{}", free_port());
    let config = format!(
        "{}\nmetrics_address = \"{metrics}\"",
        orders_config(&bootstrap, &table)
    );
    let connector = Connector::new(config);
    let mut runtime = start_runtime(&server, work.path(), "runtime", &connector, &[]);
    wait_for_table_at(&bootstrap, &table);
    assert_eq!(order_counts(&bootstrap, &table, 2_000).len(), 2_000);

    cluster.script(&["pause"]);
    server.produce_orders(2_000, 3_000);
    // The runtime polled (and so committed) the new messages, and the
    // plugin holds them in a consume that waits on the frozen cluster.
    let started = std::time::Instant::now();
    while scrape_sum(&metrics, "fluss_sink_messages_in_flight").unwrap_or(0.0) < 1.0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no consume was in flight within 30 s of the pause"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    runtime.kill();
    cluster.script(&["resume"]);
    let _runtime = start_runtime(&server, work.path(), "runtime", &connector, &[]);
    server.produce_orders(3_000, 4_000);

    let counts = order_counts(&bootstrap, &table, 4_000);
    let (missing, repeated) = missing_and_repeated(4_000, &counts);
    eprintln!(
        "Crash during a consume: {} of 4000 landed, {} missing ({:?}..={:?}), {} repeated",
        counts.len(),
        missing.len(),
        missing.first(),
        missing.last(),
        repeated.len()
    );
    assert!(repeated.is_empty(), "repeated {repeated:?}");
    assert!(
        missing.iter().all(|id| (2_000..3_000).contains(id)),
        "only the poll in flight at the crash may be lost: {missing:?}"
    );
    assert!(
        (3_000..4_000).all(|id| counts.get(&id) == Some(&1)),
        "the runtime went on after its restart"
    );
}

/// The `received=` count of the plugin's close line in a runtime's log.
fn received_at_close(log: &str) -> u64 {
    let line = log
        .lines()
        .find(|l| l.contains("closed instance="))
        .expect("the runtime closed the sink on SIGTERM");
    let at = line.find("received=").unwrap() + "received=".len();
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn two_runtimes_in_one_consumer_group_share_a_four_partition_topic_and_write_each_message_once() {
    if !binaries_present(
        "two_runtimes_in_one_consumer_group_share_a_four_partition_topic_and_write_each_message_once",
    ) {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let work = tempfile::tempdir().unwrap();
    let server = Server::start(work.path(), 4);
    let table = unique_table("runtime_group");
    let config = format!(
        r#"bootstrap_servers = "{bootstrap}"
database = "{database}"
table = "{name}"
include_metadata = true
columns = [
  {{ name = "order_id", type = "BIGINT", nullable = false }},
  {{ name = "customer", type = "STRING" }},
  {{ name = "iggy_partition", type = "INT" }},
]"#,
        bootstrap = bootstrap(),
        database = table.database,
        name = table.table,
    );
    let connector = Connector::new(config);
    // Two instances never share a spool: each runtime gets its own folder
    // through the runtime's environment override of a top-level key.
    let spool_of = |name: &str| {
        vec![(
            "IGGY_CONNECTORS_SINK_FLUSS_PLUGIN_CONFIG_SPOOL_PATH".to_string(),
            work.path().join(name).join("spool").display().to_string(),
        )]
    };
    let mut first = start_runtime(
        &server,
        work.path(),
        "runtime-a",
        &connector,
        &spool_of("runtime-a"),
    );
    wait_for_table(&table);
    let mut second = start_runtime(
        &server,
        work.path(),
        "runtime-b",
        &connector,
        &spool_of("runtime-b"),
    );
    server.wait_for_group_members(&connector.consumer_group, 2);
    const TOTAL: u64 = 8_000;
    let messages: Vec<Outgoing> = (0..TOTAL)
        .map(|i| {
            Outgoing::with_header(
                format!(r#"{{"order_id":{i},"customer":"c{i}"}}"#),
                "source",
                "e2e",
            )
        })
        .collect();
    for chunk in messages.chunks(100) {
        server.produce_messages(None, chunk);
    }
    let rows = block(read_log(&table, TOTAL as usize, Duration::from_secs(60)));
    let mut counts: BTreeMap<i64, usize> = BTreeMap::new();
    let mut partitions = std::collections::BTreeSet::new();
    for row in &rows {
        *counts.entry(row[0].parse().unwrap()).or_insert(0) += 1;
        partitions.insert(row[2].clone());
    }
    let (missing, repeated) = missing_and_repeated(TOTAL, &counts);
    assert!(first.terminate(Duration::from_secs(30)) && second.terminate(Duration::from_secs(30)));
    let (a, b) = (received_at_close(&first.log()), received_at_close(&second.log()));
    eprintln!(
        "consumer group: {} rows, {} missing, {} repeated, partitions {partitions:?}, runtime a got {a}, b got {b}",
        rows.len(),
        missing.len(),
        repeated.len()
    );
    assert!(
        missing.is_empty() && repeated.is_empty(),
        "missing {missing:?}, repeated {repeated:?}"
    );
    assert_eq!(partitions.len(), 4, "messages came from all four partitions");
    assert!(a > 0 && b > 0, "both runtimes took a share: {a} and {b}");
    assert_eq!(a + b, TOTAL, "each message was handed to one runtime only");
}
