//! Network faults between the sink and one tablet server, through the test
//! harness's fault proxy (`integration_tests::fault_proxy`): the tablet
//! server advertises the proxy to clients while the coordinator answers
//! them directly, so the proxy can hang, stall, slow down or reset the data
//! path alone, mid-request. The plugin is loaded with dlopen, as the runtime
//! loads it, against a cluster of this test's own (`target/fluss-netfaults`,
//! on free ports).
//!
//! Every case is timed against its deadline and reads every row back past
//! the expected count: acknowledged batches exactly once, a failed batch at
//! most once, nothing else. Fails, never skips, when the cluster cannot start.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use iggy_connector_fluss_sink::TablePath;
use integration_tests::fault_proxy::{Direction, Fault, FaultProxy};
use integration_tests::fluss_cluster::Times::{AtMostOnce, Once};
use integration_tests::fluss_cluster::{assert_accounting, block, connection_to, unique_table};
use integration_tests::local_cluster::LocalCluster;
use integration_tests::plugin::{GRACE, Plugin, TestMessage, assert_prompt, logged};
use serde_json::{Value, json};

const JSON: u32 = 0;
/// `delivery_timeout` of every instance here.
const DEADLINE: Duration = Duration::from_secs(2);

struct Suite {
    cluster: LocalCluster,
    proxy: FaultProxy,
    plugin: &'static Plugin,
    timings: Vec<(&'static str, Duration)>,
}

impl Suite {
    /// A log table of (`id`, `name`) with the bounded failure path (no spool).
    fn config(&self, path: &TablePath) -> Value {
        json!({
            "bootstrap_servers": self.cluster.bootstrap(),
            "database": path.database,
            "table": path.table,
            "columns": [
                {"name": "id", "type": "BIGINT", "nullable": false},
                {"name": "name", "type": "STRING"}
            ],
            "delivery_timeout": format!("{}ms", DEADLINE.as_millis()),
            "open_timeout": "3s",
            "close_timeout": "2s",
            "retry_backoff": "50ms",
            "spool": {"mode": "off"}
        })
    }

    fn consume(&self, id: u32, messages: &[TestMessage]) -> (i32, Duration) {
        self.plugin.timed_consume(id, "netfaults", messages)
    }

    fn record(&mut self, case: &'static str, took: Duration) {
        self.timings.push((case, took));
    }

    /// How often each id appears in `path`, read past `expected` rows.
    fn ids_in(&self, path: &TablePath, expected: usize) -> BTreeMap<i64, usize> {
        self.cluster.id_counts(path, expected, Duration::from_secs(30))
    }

    /// Whether the coordinator answers a catalog request within 2 s.
    fn coordinator_answers(&self) -> bool {
        block(async {
            let probe = async {
                let conn = connection_to(&self.cluster.bootstrap()).await;
                conn.get_admin().unwrap().list_databases().await.is_ok()
            };
            tokio::time::timeout(Duration::from_secs(2), probe)
                .await
                .unwrap_or(false)
        })
    }

    /// Consumes `messages` until a call returns 0 (the first after a heal
    /// may still meet the fault's leftovers), each call bounded by the
    /// deadline, for at most 60 s; the ids it wrote.
    fn consume_until_written(&self, id: u32, from: i64, count: i64) -> std::ops::Range<i64> {
        let started = Instant::now();
        let mut from = from;
        loop {
            let (code, took) = self.consume(id, &messages(from, count, 20));
            assert_prompt("a consume after the heal", took, DEADLINE);
            if code == 0 {
                return from..from + count;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "no consume succeeded within 60 s of the heal: {:?}",
                logged(&format!("instance={id}"))
            );
            from += count;
        }
    }
}

/// `count` messages of ids `from..`, each with a name of `name_len` random
/// letters (Fluss compresses its Arrow batches: the bytes on the wire must
/// not shrink to nothing).
fn messages(from: i64, count: i64, name_len: usize) -> Vec<TestMessage> {
    (from..from + count)
        .map(|i| {
            let mut rng = fastrand::Rng::with_seed(i as u64);
            let name: String = (0..name_len).map(|_| rng.alphanumeric()).collect();
            TestMessage::text(i as u64, &format!(r#"{{"id":{i},"name":"{name}"}}"#))
        })
        .collect()
}

/// The tablet server hangs (nothing answers on its socket, which stays
/// open) while the coordinator answers: `consume` fails within its
/// deadline naming the offsets; after the heal the instance writes again.
fn tablet_hangs_while_the_coordinator_answers(suite: &mut Suite) {
    let path = unique_table("tablet_hang");
    let id = suite.plugin.open_new(&suite.config(&path));
    assert_eq!(suite.consume(id, &messages(0, 100, 20)).0, 0, "the warm-up batch");
    assert!(
        suite.proxy.connections() > 0 && suite.proxy.forwarded(Direction::ToClient) > 0,
        "the sink reaches the tablet server through the proxy"
    );

    suite.proxy.set(Direction::ToServer, Fault::Stall);
    suite.proxy.set(Direction::ToClient, Fault::Stall);
    let (code, took) = suite.consume(id, &messages(100, 100, 20));
    let coordinator_answered = suite.coordinator_answers();
    suite.proxy.heal();
    suite.record("tablet server hung, coordinator answering", took);
    assert!(
        coordinator_answered,
        "the coordinator answers during the tablet-only hang"
    );
    assert_eq!(code, 1, "a consume that could not be acknowledged fails");
    assert_prompt("tablet-only hang", took, DEADLINE);
    assert!(
        !logged("offsets 100..=199 of app/netfaults partition 1 may not be in Fluss").is_empty(),
        "the offsets that may be missing are logged: {:?}",
        logged(&format!("instance={id}"))
    );

    let after = suite.consume_until_written(id, 200, 100);
    let ids = suite.ids_in(&path, 200);
    assert_accounting(
        "tablet-only hang",
        &ids,
        &[(0..100, Once), (after, Once), (100..200, AtMostOnce)],
    );
    assert_eq!(suite.plugin.close(id), 0);
}

/// A large append (about 1.7 MB) stalls after its first 256 KiB reached the
/// tablet server: the call fails within its deadline; the stall is shown to
/// have landed inside the request.
fn stall_in_the_middle_of_a_large_append(suite: &mut Suite) {
    let path = unique_table("mid_stall");
    let id = suite.plugin.open_new(&suite.config(&path));
    assert_eq!(suite.consume(id, &messages(0, 10, 20)).0, 0, "the warm-up batch");

    const PREFIX: u64 = 256 * 1024;
    let before = suite.proxy.forwarded(Direction::ToServer);
    suite.proxy.set(Direction::ToServer, Fault::StallAfter(PREFIX));
    let (code, took) = suite.consume(id, &messages(10, 4_000, 400));
    let sent = suite.proxy.forwarded(Direction::ToServer) - before;
    suite.proxy.heal();
    suite.record("stall after 256 KiB of a 1.7 MB append", took);
    assert_eq!(
        sent, PREFIX,
        "the stall landed inside the request (it forwarded exactly the prefix)"
    );
    assert_eq!(code, 1, "a consume whose append stalled fails");
    assert_prompt("stall mid-append", took, DEADLINE);

    let after = suite.consume_until_written(id, 10_000, 100);
    let ids = suite.ids_in(&path, 110);
    assert_accounting(
        "stall mid-append",
        &ids,
        &[(0..10, Once), (after, Once), (10..4_010, AtMostOnce)],
    );
    assert_eq!(suite.plugin.close(id), 0);
}

/// The connection is reset (RST) once, on the next byte going `direction`:
/// toward the client, after the append reached the tablet server and before
/// its response reached the sink; toward the server, while the append is on
/// its way. Either way the client connects again and sends the batch whole,
/// and Fluss's idempotent writer keeps it from landing twice.
fn connection_reset_once(suite: &mut Suite, direction: Direction, case: &'static str) {
    let path = unique_table("reset");
    let id = suite.plugin.open_new(&suite.config(&path));
    assert_eq!(suite.consume(id, &messages(0, 10, 20)).0, 0, "the warm-up batch");

    let (resets, connections) = (suite.proxy.resets(), suite.proxy.connections());
    let sent_before = suite.proxy.forwarded(Direction::ToServer);
    suite.proxy.set(direction, Fault::ResetOnce);
    let (code, took) = suite.consume(id, &messages(10, 100, 20));
    suite.proxy.heal();
    suite.record(case, took);
    assert_eq!(
        suite.proxy.resets(),
        resets + 1,
        "{case}: the fault reset one connection"
    );
    if direction == Direction::ToClient {
        // The append itself reached the server: 100 rows of 20 random
        // alphanumeric characters take 1,500 bytes however compressed (6
        // bits a character), far past any other request of the client's.
        let sent = suite.proxy.forwarded(Direction::ToServer) - sent_before;
        assert!(
            sent >= 1_500,
            "the append reached the server before the reset ({sent} bytes toward it)"
        );
    }
    assert!(
        suite.proxy.connections() > connections,
        "{case}: the client connected again after the reset"
    );
    assert_prompt(case, took, DEADLINE);
    assert_eq!(
        code,
        0,
        "{case}: the batch is sent again and acknowledged: {:?}",
        logged(&format!("instance={id}"))
    );
    let ids = suite.ids_in(&path, 110);
    assert_accounting(case, &ids, &[(0..110, Once)]);
    assert_eq!(suite.plugin.close(id), 0);
}

/// A slow network: every response arrives 3 s late (after the 2 s
/// deadline), then requests trickle at 40 KB/s. Each call fails within its
/// deadline; the late acknowledgement's rows land once.
fn slow_network(suite: &mut Suite) {
    let path = unique_table("slow");
    let id = suite.plugin.open_new(&suite.config(&path));
    assert_eq!(suite.consume(id, &messages(0, 10, 20)).0, 0, "the warm-up batch");

    suite
        .proxy
        .set(Direction::ToClient, Fault::Delay(Duration::from_secs(3)));
    let (code, took) = suite.consume(id, &messages(10, 100, 20));
    suite.record("every response 3 s late (deadline 2 s)", took);
    assert_eq!(code, 1, "an acknowledgement after the deadline fails the call");
    assert_prompt("late acknowledgement", took, DEADLINE);
    suite.proxy.heal();

    let before = suite.proxy.forwarded(Direction::ToServer);
    suite.proxy.set(Direction::ToServer, Fault::Trickle(4 * 1024));
    let (code, took) = suite.consume(id, &messages(110, 1_000, 400));
    let sent = suite.proxy.forwarded(Direction::ToServer) - before;
    suite.proxy.heal();
    suite.record("requests trickling at 40 KB/s (a 420 KB append)", took);
    assert!(
        sent > 0 && sent < 200 * 1024,
        "the trickle held the append: {sent} bytes went through"
    );
    assert_eq!(
        code, 1,
        "an append that cannot get through by the deadline fails the call"
    );
    assert_prompt("trickle", took, DEADLINE);

    let after = suite.consume_until_written(id, 10_000, 100);
    let ids = suite.ids_in(&path, 210);
    // The late acknowledgement's request had reached the server: those
    // rows are in Fluss, once, although the call reported a failure.
    assert_accounting(
        "slow network",
        &ids,
        &[(0..110, Once), (after, Once), (110..1_110, AtMostOnce)],
    );
    assert_eq!(suite.plugin.close(id), 0);
}

/// `close` while the tablet server hangs and a spooled batch's first
/// attempt is still waiting: it returns within twice `close_timeout`,
/// leaving the batch on disk; the next open after the heal replays it, and
/// nothing is lost (the abandoned attempt may land too: at least once).
fn close_while_the_tablet_hangs(suite: &mut Suite) {
    let path = unique_table("close_hang");
    let spool = tempfile::tempdir().expect("a spool folder");
    let mut config = suite.config(&path);
    config["spool"] = json!({"mode": "on_failure", "path": spool.path().join("s")});
    let id = suite.plugin.open_new(&config);
    assert_eq!(suite.consume(id, &messages(0, 10, 20)).0, 0, "the warm-up batch");

    suite.proxy.set(Direction::ToServer, Fault::Stall);
    suite.proxy.set(Direction::ToClient, Fault::Stall);
    let (code, took) = suite.consume(id, &messages(10, 100, 20));
    assert_eq!(code, 0, "the batch is spooled at its deadline");
    assert_prompt("spooled under a hang", took, DEADLINE);
    let started = Instant::now();
    let closed = suite.plugin.close(id);
    let took = started.elapsed();
    suite.record("close while the tablet server hangs (close_timeout 2 s)", took);
    assert!(
        took <= 2 * Duration::from_secs(2) + GRACE,
        "close took {took:?}, more than twice close_timeout"
    );
    assert_eq!(closed, 0, "{:?}", logged(&format!("instance={id}")));
    suite.proxy.heal();

    let id = suite.plugin.open_new(&config);
    let after = suite.consume_until_written(id, 200, 10);
    let ids = suite.ids_in(&path, 120);
    // The spooled batch's first attempt had left the sink when it closed:
    // after the heal it can still land, and the replay writes it again. No
    // client can call back a request already on the wire, so this batch is
    // at least once (README, delivery): never lost, never more than twice.
    let spooled: BTreeMap<i64, usize> = ids.range(10..110).map(|(k, v)| (*k, *v)).collect();
    let twice = spooled.values().filter(|n| **n == 2).count();
    eprintln!("close under a hang: {twice} of the spooled batch's 100 rows landed twice");
    assert!(
        (10..110).all(|i| matches!(spooled.get(&i), Some(1 | 2))),
        "every spooled row lands once or twice: {spooled:?}"
    );
    let rest: BTreeMap<i64, usize> = ids.into_iter().filter(|(k, _)| !(10..110).contains(k)).collect();
    assert_accounting(
        "close under a hang, then replay",
        &rest,
        &[(0..10, Once), (after, Once)],
    );
    assert_eq!(suite.plugin.close(id), 0);
}

/// `request_timeout` of the instances of [`a_connection_that_never_answers_is_replaced`].
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// The connections open to the tablet server hang for good (`stalled`
/// ways held, sockets open) while new ones pass, with the spool on: the
/// batch is spooled at its deadline and a second one queued behind it. The
/// first attempt holds the queue until it has waited `request_timeout`;
/// then the sink closes the hung connections and the client sends the
/// append again on a new one, with the sequence number it had. Every row
/// lands once: when only the answer was held, the request had reached
/// Fluss, and the resend is acknowledged as a duplicate. The spool drains
/// within `request_timeout` and a few seconds (the acknowledgement is
/// looked at every 2 s, then the client reconnects and sends again).
fn a_connection_that_never_answers_is_replaced(suite: &mut Suite, stalled: &[Direction], case: &'static str) {
    let path = unique_table("unanswered");
    let spool = tempfile::tempdir().expect("a spool folder");
    let mut config = suite.config(&path);
    config["spool"] = json!({"mode": "on_failure", "path": spool.path().join("s")});
    config["request_timeout"] = json!(format!("{}s", REQUEST_TIMEOUT.as_secs()));
    let id = suite.plugin.open_new(&config);
    assert_eq!(suite.consume(id, &messages(0, 10, 20)).0, 0, "the warm-up batch");
    let connections = suite.proxy.connections();

    for direction in stalled {
        suite.proxy.stall_open(*direction);
    }
    let stalled_at = Instant::now();
    let (code, took) = suite.consume(id, &messages(10, 100, 20));
    assert_eq!(code, 0, "the batch is spooled at its deadline");
    assert_prompt(case, took, DEADLINE);
    assert_eq!(
        suite.consume(id, &messages(110, 10, 20)).0,
        0,
        "the next batch is queued"
    );

    let bound = REQUEST_TIMEOUT + Duration::from_secs(15);
    let drained = format!("the spool of table {path} has drained");
    while logged(&drained).is_empty() {
        assert!(
            stalled_at.elapsed() < bound,
            "{case}: the spool did not drain within {bound:?} of the hang: {:?}",
            logged(&format!("instance={id}"))
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    suite.record(case, stalled_at.elapsed());
    assert!(
        !logged(&format!("Fluss has not answered a write to table {path}")).is_empty(),
        "{case}: the sink says why it closed the connections"
    );
    assert!(
        suite.proxy.connections() > connections,
        "{case}: the client opened a new connection"
    );
    let ids = suite.ids_in(&path, 120);
    assert_accounting(case, &ids, &[(0..120, Once)]);
    assert_eq!(suite.plugin.close(id), 0);
}

/// `close` while a consume is provably in flight (its append is on the
/// wire and each response held back 300 ms): close waits for it, the
/// consume finishes its batch, and a consume after the close is refused.
fn close_during_a_consume_waits_for_it(suite: &mut Suite) {
    let path = unique_table("close_during");
    let id = suite.plugin.open_new(&suite.config(&path));
    assert_eq!(suite.consume(id, &messages(0, 10, 20)).0, 0, "the warm-up batch");

    let before = suite.proxy.forwarded(Direction::ToServer);
    suite
        .proxy
        .set(Direction::ToClient, Fault::Delay(Duration::from_millis(300)));
    let plugin = suite.plugin;
    let batch = messages(10, 1_000, 20);
    let consume = std::thread::spawn(move || plugin.consume(id, "app", "netfaults", JSON, &batch));
    let started = Instant::now();
    while suite.proxy.forwarded(Direction::ToServer) == before {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the append never went out"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        !consume.is_finished(),
        "the consume is in flight when close is called"
    );
    let started = Instant::now();
    let closed = suite.plugin.close(id);
    let took = started.elapsed();
    suite.proxy.heal();
    suite.record("close during a consume (acknowledgements 300 ms late)", took);
    assert_eq!(closed, 0);
    assert_eq!(
        consume.join().unwrap(),
        0,
        "the running consume finished its batch: {:?}",
        logged(&format!("instance={id}"))
    );
    assert!(
        took >= Duration::from_millis(100) && took <= 2 * Duration::from_secs(2) + GRACE,
        "close waited for the consume, within twice close_timeout: {took:?}"
    );
    assert_eq!(
        suite
            .plugin
            .consume(id, "app", "netfaults", JSON, &messages(2_000, 1, 20)),
        -1,
        "a consume after close is refused"
    );
    let ids = suite.ids_in(&path, 1_010);
    assert_accounting("close during a consume", &ids, &[(0..1_010, Once)]);
}

#[test]
fn every_promise_holds_when_the_network_misbehaves() {
    let (cluster, proxy) = LocalCluster::start_behind_proxy("netfaults");
    let mut suite = Suite {
        cluster,
        proxy,
        plugin: Plugin::load(),
        timings: Vec::new(),
    };
    tablet_hangs_while_the_coordinator_answers(&mut suite);
    stall_in_the_middle_of_a_large_append(&mut suite);
    connection_reset_once(
        &mut suite,
        Direction::ToClient,
        "connection reset between request and response",
    );
    connection_reset_once(
        &mut suite,
        Direction::ToServer,
        "connection reset while the request is sent",
    );
    slow_network(&mut suite);
    a_connection_that_never_answers_is_replaced(
        &mut suite,
        &[Direction::ToServer, Direction::ToClient],
        "connection hung both ways, spooled batch sent again on a new one",
    );
    a_connection_that_never_answers_is_replaced(
        &mut suite,
        &[Direction::ToClient],
        "answer lost on a hung connection, the append sent again (a duplicate Fluss drops)",
    );
    close_while_the_tablet_hangs(&mut suite);
    close_during_a_consume_waits_for_it(&mut suite);
    eprintln!("\nnetwork fault | time");
    for (case, took) in &suite.timings {
        eprintln!("{case} | {took:.2?}");
    }
}
