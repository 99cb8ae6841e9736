//! The spool through the real Apache Iggy runtime (see `iggy_runtime.rs`
//! for the harness's needs), whose commit-on-poll gives the sink one chance
//! at each batch: a 20 s tablet-server restart and a 60 s downtime while a
//! producer runs, and the runtime SIGKILLed while its sink is spooling.
//! Every order id is read back past the expected count: 0 lost, 0 repeated.
//! Each case prints what it measured (spool peak, drain time).

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use iggy_connector_fluss_sink::TablePath;
use integration_tests::fluss_cluster::{id_counts, missing_and_repeated, unique_table};
use integration_tests::iggy::{Connector, Server, binaries_present, start_runtime, wait_for_table_at};
use integration_tests::local_cluster::LocalCluster;
use integration_tests::{free_port, scrape_sum};

/// The server's ports are fixed: one test at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn orders_config(bootstrap: &str, table: &TablePath, spool: &Path) -> String {
    format!(
        r#"bootstrap_servers = "{bootstrap}"
database = "{database}"
table = "{name}"
delivery_timeout = "1s"
close_timeout = "3s"
spool = {{ path = "{spool}" }}
columns = [ {{ name = "order_id", type = "BIGINT", nullable = false }}, {{ name = "customer", type = "STRING" }} ]"#,
        database = table.database,
        name = table.table,
        spool = spool.display(),
    )
}

// Bytes and records in a spool folder now.
fn spool_size(dir: &Path) -> (u64, usize) {
    let mut size = (0, 0);
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_name().to_string_lossy().ends_with(".rec") {
            size.0 += entry.metadata().map_or(0, |m| m.len());
            size.1 += 1;
        }
    }
    size
}

/// The offsets named by the records in a spool folder.
fn spooled_offsets(dir: &Path) -> Vec<i64> {
    let mut offsets = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".rec") else {
            continue;
        };
        let parts: Vec<&str> = stem.split('-').collect();
        let (first, last): (i64, i64) = (parts[2].parse().unwrap(), parts[3].parse().unwrap());
        offsets.extend(first..=last);
    }
    offsets.sort();
    offsets
}

/// Samples the spool folder every 100 ms for `window`; its peak (bytes, records).
fn watch_spool(dir: &Path, window: Duration) -> (u64, usize) {
    let started = Instant::now();
    let mut peak = (0, 0);
    while started.elapsed() < window {
        let now = spool_size(dir);
        peak = (peak.0.max(now.0), peak.1.max(now.1));
        std::thread::sleep(Duration::from_millis(100));
    }
    peak
}

/// The plugin's "has drained" line in a runtime's log, if any.
fn drained_line(log: &str) -> Option<String> {
    log.lines()
        .find(|l| l.contains("has drained"))
        .map(str::to_string)
}

/// A tablet-server outage of `downtime` while a producer sends `total`
/// orders in polls of `batch_length`, spaced by `pause` per 200 orders: every
/// order lands once.
///
/// The tablet server is stopped when the producer reaches order `outage_at`,
/// and the producer waits for it before it goes on, so the orders from
/// `outage_at` on are sent while Fluss is away however fast the sink and the
/// producer are (a clock-timed outage once began after a fast sink had taken
/// everything, and tested nothing).
fn outage_through_the_runtime(
    case: &str,
    total: u64,
    pause: Duration,
    batch_length: usize,
    outage_at: u64,
    downtime: Duration,
) {
    assert!(
        outage_at > 200 && outage_at < total && outage_at.is_multiple_of(200),
        "{case}: the outage begins at a request boundary inside the run"
    );
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = LocalCluster::start("runtime", 1);
    let bootstrap = cluster.bootstrap();
    let work = tempfile::tempdir().unwrap();
    let spool = work.path().join("spool");
    let server = Server::start(work.path(), 1);
    let table = unique_table("runtime_spool");
    let mut connector = Connector::new(orders_config(&bootstrap, &table, &spool));
    connector.batch_length = batch_length;
    let runtime = start_runtime(&server, work.path(), "runtime", &connector, &[]);
    server.produce_orders(0, 200);
    wait_for_table_at(&bootstrap, &table);
    let (reached, outage_begins) = std::sync::mpsc::channel::<()>();
    let (stopped, tablet_stopped) = std::sync::mpsc::channel::<()>();
    let server = &server;
    let peak = std::thread::scope(|scope| {
        let producer = scope.spawn(move || {
            for from in (200..total).step_by(200) {
                if from == outage_at {
                    reached.send(()).unwrap();
                    tablet_stopped.recv().unwrap();
                }
                server.produce_orders(from, (from + 200).min(total));
                std::thread::sleep(pause);
            }
        });
        outage_begins.recv().unwrap();
        cluster.script(&["kill-tablet", "TERM", "0"]);
        stopped.send(()).unwrap();
        let peak = watch_spool(&spool, downtime);
        cluster.script(&["start-tablet", "0"]);
        producer.join().unwrap();
        peak
    });
    let back = Instant::now();
    let counts = id_counts(&bootstrap, &table, total as usize, Duration::from_secs(240));
    let (missing, repeated) = missing_and_repeated(total, &counts);
    let log = runtime.log();
    eprintln!(
        "{case}: {} of {total} landed, {} missing ({:?}..={:?}), {} repeated; spool peak {} bytes in {} records; \
         read back {:.1?} after the tablet server came back; plugin: {:?}",
        counts.len(),
        missing.len(),
        missing.first(),
        missing.last(),
        repeated.len(),
        peak.0,
        peak.1,
        back.elapsed(),
        drained_line(&log)
    );
    assert!(
        peak.1 > 0,
        "{case}: the outage spooled something (else it tested nothing)"
    );
    assert!(
        missing.is_empty() && repeated.is_empty(),
        "{case}: missing {missing:?}, repeated {repeated:?}"
    );
    assert!(
        drained_line(&log).is_some(),
        "{case}: the plugin logged the drain"
    );
    assert_eq!(
        spool_size(&spool),
        (0, 0),
        "{case}: the spool is empty after the drain"
    );
}

/// The measured case of the spool's issue (6,000 of 20,000 lost before):
/// `delivery_timeout = "1s"`, polls of 200, 20,000 orders over ~28 s, the
/// only tablet server stopped gracefully for 20 s (from order 3,000, about
/// 4 s in) and started again.
#[test]
fn a_twenty_second_tablet_restart_under_the_runtime_loses_and_repeats_nothing() {
    if !binaries_present("a_twenty_second_tablet_restart_under_the_runtime_loses_and_repeats_nothing") {
        return;
    }
    outage_through_the_runtime(
        "20 s tablet restart",
        20_000,
        Duration::from_millis(280),
        200,
        3_000,
        Duration::from_secs(20),
    );
}

/// A 60 s downtime with the producer at full speed (no pause between its
/// requests) and polls of 1,000: 20,000 orders before the outage, 80,000
/// during it.
#[test]
fn a_minute_of_tablet_downtime_at_full_speed_loses_and_repeats_nothing() {
    if !binaries_present("a_minute_of_tablet_downtime_at_full_speed_loses_and_repeats_nothing") {
        return;
    }
    outage_through_the_runtime(
        "60 s downtime, producer at full speed",
        100_000,
        Duration::ZERO,
        1000,
        20_000,
        Duration::from_secs(60),
    );
}

/// The runtime SIGKILLed while its sink is spooling, Fluss restarted, the
/// runtime started again: everything spooled lands, once. Only the poll the
/// runtime had committed and not yet handed over (or whose consume had not
/// reached its deadline) may be lost: one run of at most `batch_length`.
#[test]
fn a_runtime_killed_while_spooling_replays_its_spool_at_the_next_start() {
    if !binaries_present("a_runtime_killed_while_spooling_replays_its_spool_at_the_next_start") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = LocalCluster::start("runtime", 1);
    let bootstrap = cluster.bootstrap();
    let work = tempfile::tempdir().unwrap();
    let spool = work.path().join("spool");
    let server = Server::start(work.path(), 1);
    let table = unique_table("runtime_spool_kill");
    let mut connector = Connector::new(orders_config(&bootstrap, &table, &spool));
    connector.batch_length = 500;
    let mut runtime = start_runtime(&server, work.path(), "runtime", &connector, &[]);
    server.produce_orders(0, 500);
    wait_for_table_at(&bootstrap, &table);
    assert_eq!(
        id_counts(&bootstrap, &table, 500, Duration::from_secs(30)).len(),
        500
    );

    cluster.script(&["kill-tablet", "TERM", "0"]);
    server.produce_orders(500, 5_000);
    let started = Instant::now();
    while spool_size(&spool).1 < 5 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the sink spools while Fluss is away"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    runtime.kill();
    let spooled = spooled_offsets(&spool);
    cluster.script(&["start-tablet", "0"]);
    let _again = start_runtime(&server, work.path(), "runtime", &connector, &[]);
    server.produce_orders(5_000, 6_000);

    let counts = id_counts(&bootstrap, &table, 6_000, Duration::from_secs(120));
    let (missing, repeated) = missing_and_repeated(6_000, &counts);
    eprintln!(
        "SIGKILL while spooling: {} offsets were in the spool at the kill; {} of 6000 landed, {} missing ({:?}..={:?}), {} repeated",
        spooled.len(),
        counts.len(),
        missing.len(),
        missing.first(),
        missing.last(),
        repeated.len()
    );
    assert!(repeated.is_empty(), "repeated {repeated:?}");
    assert!(
        spooled.iter().all(|o| counts.get(o) == Some(&1)),
        "every spooled offset landed once"
    );
    let consecutive = missing.windows(2).all(|w| w[1] == w[0] + 1);
    assert!(
        consecutive && missing.len() <= connector.batch_length,
        "at most the one poll in the runtime's hands may be lost: {missing:?}"
    );
}

/// One SIGKILL of the runtime inside a `consume`, in `mode`, on `cluster`:
/// its tablet server is stopped, a poll of 200 orders arrives (the runtime
/// commits a poll's offsets when it polls, before it calls `consume`), and
/// the runtime is killed once the plugin holds that poll in a consume (the
/// `messages_in_flight` gauge; with `always`, once its record is on disk
/// too, which is the window that mode protects). Then the tablet server
/// and the runtime start again and 200 more orders come. Gives the
/// (missing, repeated) ids of the 600, read past the count.
fn killed_inside_a_consume(cluster: &LocalCluster, mode: &str) -> (Vec<i64>, Vec<i64>) {
    let bootstrap = cluster.bootstrap();
    let work = tempfile::tempdir().unwrap();
    let spool = work.path().join("spool");
    let server = Server::start(work.path(), 1);
    let table = unique_table("runtime_kill_in_consume");
    let metrics = format!("127.0.0.1:{}", free_port());
    let config = format!(
        "{}\nspool_mode = \"{mode}\"\nmetrics_address = \"{metrics}\"",
        // Long enough that the consume is still waiting when it is killed.
        orders_config(&bootstrap, &table, &spool)
            .replace("delivery_timeout = \"1s\"", "delivery_timeout = \"60s\"")
    );
    let mut connector = Connector::new(config);
    connector.batch_length = 200;
    let mut runtime = start_runtime(&server, work.path(), "runtime", &connector, &[]);
    server.produce_orders(0, 200);
    wait_for_table_at(&bootstrap, &table);
    assert_eq!(
        id_counts(&bootstrap, &table, 200, Duration::from_secs(30)).len(),
        200
    );

    cluster.script(&["kill-tablet", "TERM", "0"]);
    server.produce_orders(200, 400);
    let started = Instant::now();
    loop {
        let in_flight = scrape_sum(&metrics, "fluss_sink_messages_in_flight").unwrap_or(0.0) >= 1.0;
        let journaled = mode != "always" || spool_size(&spool).1 >= 1;
        if in_flight && journaled {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{mode}: no consume in flight (journaled: {journaled}) within 30 s of the poll"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    runtime.kill();
    cluster.script(&["start-tablet", "0"]);
    let _again = start_runtime(&server, work.path(), "runtime", &connector, &[]);
    server.produce_orders(400, 600);
    // What `mode` should land (every order, or all but the poll in flight),
    // read on past it until the table is quiet.
    let landing = if mode == "always" { 600 } else { 400 };
    let counts = id_counts(&bootstrap, &table, landing, Duration::from_secs(120));
    missing_and_repeated(600, &counts)
}

/// `always` against `on_failure`, the runtime SIGKILLed while a poll it has
/// committed is inside a consume (Fluss away, so the consume waits):
/// `always` had journaled the poll when it was handed over and replays it
/// at the next start, so nothing is lost, and at most that batch repeats;
/// `on_failure` loses exactly that poll (nothing reached Fluss, nothing
/// was on disk) and repeats nothing.
#[test]
fn always_mode_against_on_failure_with_a_kill_inside_a_consume() {
    if !binaries_present("always_mode_against_on_failure_with_a_kill_inside_a_consume") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = LocalCluster::start("runtime", 1);
    for mode in ["on_failure", "always"] {
        let (missing, repeated) = killed_inside_a_consume(&cluster, mode);
        eprintln!(
            "spool.mode = {mode}, a SIGKILL inside a consume: {} of 600 lost ({:?}..={:?}), {} repeated",
            missing.len(),
            missing.first(),
            missing.last(),
            repeated.len()
        );
        match mode {
            "always" => {
                assert!(missing.is_empty(), "always loses nothing: {missing:?}");
                assert!(
                    repeated.iter().all(|id| (200..400).contains(id)),
                    "always repeats at most the batch in flight: {repeated:?}"
                );
            }
            _ => {
                assert!(repeated.is_empty(), "on_failure repeats nothing: {repeated:?}");
                let consecutive = missing.windows(2).all(|w| w[1] == w[0] + 1);
                assert!(
                    !missing.is_empty() && consecutive && missing.iter().all(|id| (200..400).contains(id)),
                    "on_failure loses the poll in flight, and only it: {missing:?}"
                );
            }
        }
    }
}
