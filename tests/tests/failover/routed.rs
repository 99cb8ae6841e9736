//! One table's trouble does not stall the others: the sink routes every
//! other batch to table `a`, the rest to table `b`, and `a`'s tablet server
//! is stopped and left down. Each table has one bucket and one replica, on
//! different servers: with a replica on every server (replication factor 3
//! on three), an append to any bucket waits (acks = all) until Fluss has
//! taken a lost server out of its ISR, so every table stalls alike. The
//! server is stopped with `TERM`: with one replica, a `KILL` lost 800 of
//! `a`'s rows in one run, all sent in the two seconds before it and not in
//! the table once the server was back. While `a` cannot be written (its
//! batches spooled, in order), `b`'s batches must go on. The rows are
//! routed either by the JSON mapping (`dynamic_routing`) or by a transform
//! (the `tenant-router` component), whose tables the spool learns only from
//! the rows the guest made.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use iggy_connector_fluss_sink::TablePath;
use integration_tests::local_cluster::LocalCluster;
use integration_tests::plugin::{Plugin, TestMessage};
use integration_tests::recovery::longest_stall;
use integration_tests::{figure, free_port, metrics_text};
use serde_json::json;

use super::{
    BEFORE, DATABASE, DELIVERY_TIMEOUT, PER_BATCH, SCRAPE_PACE, assert_at_most_in_flight_batches_repeat,
    consume_at_pace, create_table, leaders, wait_for_drain,
};

/// Who routes each row to its table.
#[derive(Clone, Copy, Debug)]
pub(super) enum Routing {
    /// The JSON mapping, by the payload's `fluss_table` (`dynamic_routing`).
    Json,
    /// The `tenant-router` component, by the payload's `tenant`.
    Transform,
}

/// The table names' prefix the `tenant-router` is given: `a` and `b` are
/// `<prefix><tenant>`.
const TENANT_PREFIX: &str = "routed_";

/// How long `a`'s server stays down once Fluss has seen it go.
const DOWN: Duration = Duration::from_secs(10);

/// Creates the one-bucket log table `path` (`id`, `name`) with one replica;
/// its leader (the server holding it).
async fn one_bucket_table(bootstrap: &str, path: &TablePath) -> i32 {
    create_table(bootstrap, path, 1, &[], Some(1)).await;
    leaders(bootstrap, path, 1).await[0]
}

/// Instance `id`'s acknowledged rows of `table` at `address` now.
fn rows_written(address: &str, id: u32, table: &TablePath) -> f64 {
    let (instance, table) = (format!("instance=\"{id}\""), format!("table=\"{table}\""));
    metrics_text(address)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("fluss_sink_rows_written_total{"))
        .filter(|l| l.contains(&instance) && l.contains(&table))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// When each of `tables` was seen to have more rows acknowledged, read
/// every [`SCRAPE_PACE`] until `stop`.
fn scrape_tables(address: &str, id: u32, tables: &[&TablePath], stop: &AtomicBool) -> Vec<Vec<Instant>> {
    let mut acks = vec![Vec::new(); tables.len()];
    let mut last = vec![0.0; tables.len()];
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        for (i, table) in tables.iter().enumerate() {
            let count = rows_written(address, id, table);
            if count > last[i] {
                acks[i].push(now);
                last[i] = count;
            }
        }
        std::thread::sleep(SCRAPE_PACE);
    }
    acks
}

/// Feeds the sink a batch every [`SINK_PACE`] until `stop`, batch `k` all
/// routed to `tables[k % 2]`; the ids sent to each.
fn routed_stream(plugin: &Plugin, id: u32, tables: [&TablePath; 2], stop: &AtomicBool) -> [Vec<i64>; 2] {
    let mut sent: [Vec<i64>; 2] = Default::default();
    let mut next = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let to = ((next / PER_BATCH) % 2) as usize;
        let messages: Vec<TestMessage> = (next..next + PER_BATCH)
            .map(|i| {
                let (table, tenant) = (tables[to], &tables[to].table[TENANT_PREFIX.len()..]);
                let payload =
                    format!(r#"{{"id":{i},"name":"n{i}","fluss_table":"{table}","tenant":"{tenant}"}}"#);
                TestMessage::text(i, &payload)
            })
            .collect();
        consume_at_pace(plugin, id, next, &messages);
        sent[to].extend((next..next + PER_BATCH).map(|i| i as i64));
        next += PER_BATCH;
    }
    sent
}

/// Tables `a` and `b`, one bucket and one replica each, on different
/// tablet servers: the paths and `a`'s server.
fn tables_led_apart(
    cluster: &LocalCluster,
    runtime: &tokio::runtime::Runtime,
) -> (TablePath, TablePath, i32) {
    let bootstrap = cluster.bootstrap();
    for _ in 0..10 {
        let suffix = format!("{:08x}", fastrand::u32(..));
        let (a, b) = (
            TablePath::new(DATABASE, format!("{TENANT_PREFIX}a_{suffix}")),
            TablePath::new(DATABASE, format!("{TENANT_PREFIX}b_{suffix}")),
        );
        let (leader_a, leader_b) = runtime.block_on(async {
            (
                one_bucket_table(&bootstrap, &a).await,
                one_bucket_table(&bootstrap, &b).await,
            )
        });
        if leader_a != leader_b {
            return (a, b, leader_a);
        }
    }
    panic!("ten pairs of one-bucket tables each had one leader for both");
}

/// The case: `a`'s server stopped (and left down until the measuring is
/// over); `b`'s writes must go on within one `delivery_timeout` (the wait
/// of the `consume` whose batch for `a` is spooled), while `a` stalls until
/// its server is back; then both read back, every message once (but the
/// batch on the wire when `a`'s server stopped, see
/// [`assert_at_most_in_flight_batches_repeat`]).
pub(super) fn a_lost_tables_server_does_not_stall_the_other_tables(cluster: &LocalCluster, routing: Routing) {
    let case =
        &format!("one table's tablet server stopped (TERM), another table's not, routed by {routing:?}");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (a, b, victim) = tables_led_apart(cluster, &runtime);
    eprintln!("{case}: table a on tablet server {victim}, b on another");
    let plugin = Plugin::load();
    let metrics = format!("127.0.0.1:{}", free_port());
    let spool = tempfile::tempdir().unwrap();
    let mut config = json!({
        "bootstrap_servers": cluster.bootstrap(),
        "database": a.database,
        "table": a.table,
        "columns": [
            {"name": "id", "type": "BIGINT", "nullable": false},
            {"name": "name", "type": "STRING"}
        ],
        "dynamic_routing": true,
        "allowed_tables": [a.to_string(), b.to_string()],
        "delivery_timeout": format!("{}s", DELIVERY_TIMEOUT.as_secs()),
        "metrics_address": metrics,
        "spool": {"path": spool.path().display().to_string()}
    });
    if let Routing::Transform = routing {
        config["dynamic_routing"] = json!(false);
        config["transform"] = json!({
            "path": integration_tests::component("tenant-router"),
            "cache_dir": integration_tests::test_cache_dir(),
            "config": {"prefix": TENANT_PREFIX}
        });
    }
    let id = plugin.open_new(&config);
    let stop = Arc::new(AtomicBool::new(false));
    let (sent, acks, began, end) = std::thread::scope(|s| {
        let stream = s.spawn(|| routed_stream(plugin, id, [&a, &b], &stop));
        let scraper = s.spawn(|| scrape_tables(&metrics, id, &[&a, &b], &stop));
        std::thread::sleep(BEFORE);
        let began = Instant::now();
        cluster.script(&["kill-tablet", "TERM", &victim.to_string()]);
        std::thread::sleep(DOWN);
        let end = Instant::now();
        stop.store(true, Ordering::SeqCst);
        (stream.join().unwrap(), scraper.join().unwrap(), began, end)
    });
    cluster.script(&["start-tablet", &victim.to_string()]);
    let (stall_a, stall_b) = (
        longest_stall(&acks[0], began, end),
        longest_stall(&acks[1], began, end),
    );
    figure(&format!(
        "{case}: table a went {stall_a:.1?} without an acknowledged row, table b {stall_b:.1?}"
    ));
    assert!(
        stall_a > stall_b + Duration::from_secs(1),
        "{case}: losing a's server stalled table a for {stall_a:.1?}, table b for {stall_b:.1?}: either b waited \
         behind a, or a never stalled and the case cannot tell"
    );
    let slack = Duration::from_millis(1500);
    assert!(
        stall_b <= DELIVERY_TIMEOUT + slack,
        "{case}: table b went {stall_b:.1?} without an acknowledged row while only a's server was lost; \
         at most one delivery_timeout ({DELIVERY_TIMEOUT:?}) and {slack:?} of slack may pass"
    );

    wait_for_drain(case, &metrics, id);
    assert_eq!(plugin.close(id), 0, "{case}: close");
    for (name, path, ids, leaders_lost) in [("a", &a, &sent[0], 1), ("b", &b, &sent[1], 0)] {
        let counts = cluster.id_counts(path, ids.len(), Duration::from_secs(120));
        let expected: BTreeMap<i64, usize> = ids.iter().map(|&i| (i, 1)).collect();
        let foreign: Vec<i64> = counts
            .keys()
            .filter(|i| !expected.contains_key(i))
            .copied()
            .collect();
        assert!(
            foreign.is_empty(),
            "{case}: table {name} holds ids sent elsewhere: {foreign:?}"
        );
        let (missing, repeated) = missing_and_repeated_of(ids, &counts);
        assert!(
            missing.is_empty(),
            "{case}: table {name}: {} of {} missing (first {:?})",
            missing.len(),
            ids.len(),
            missing.first()
        );
        assert_at_most_in_flight_batches_repeat(case, &counts, &repeated, leaders_lost);
    }
}

/// The ids of `ids` missing from `counts`, and those there more than once.
fn missing_and_repeated_of(ids: &[i64], counts: &BTreeMap<i64, usize>) -> (Vec<i64>, Vec<i64>) {
    let (mut missing, mut repeated) = (Vec::new(), Vec::new());
    for id in ids {
        match counts.get(id) {
            None => missing.push(*id),
            Some(&n) if n > 1 => repeated.push(*id),
            Some(_) => {}
        }
    }
    (missing, repeated)
}
