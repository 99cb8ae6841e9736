//! Looking at the tables' schemas, and adding a column, while the
//! coordinator hangs.

use std::time::{Duration, Instant};

use integration_tests::fluss_cluster::{add_string_column_at, block, read_log_at, unique_table};
use integration_tests::plugin::{TestMessage, assert_prompt, logged, messages_with_extra, next_id};
use serde_json::json;

use super::{DEADLINE, Suite};

/// How often the instance here looks at its tables.
const REFRESH: Duration = Duration::from_secs(1);
/// The bound of one look at the tables with that interval (the sink's
/// least: `pipeline::follow::MIN_LOOK`).
const MIN_LOOK: Duration = Duration::from_secs(1);

/// The coordinator frozen (sockets open, nothing answers) while the sink
/// looks at its tables every second: the writes, which go to the tablet
/// server, go on, each within its deadline, because a look waits on a task
/// of its own, for at most its bound. Once the coordinator answers again, a
/// column added to the table is followed.
pub(super) fn coordinator_hung_while_the_sink_looks_at_its_tables(suite: &mut Suite) {
    let (path, dlq) = (unique_table("look_hung"), unique_table("look_hung_dlq"));
    let mut config = suite.config(&path, &dlq, DEADLINE);
    config["schema_refresh_interval"] = json!(format!("{}ms", REFRESH.as_millis()));
    let id = next_id();
    suite.plugin.open_ok(id, &config);
    let (code, _) = suite.consume(id, &messages_with_extra(0, 10));
    assert_eq!(code, 0, "before the freeze");

    suite.cluster.script(&["pause", "coordinator"]);
    let frozen = Instant::now();
    let (mut next, mut slowest) = (10, Duration::ZERO);
    // Three looks and more, and well inside the ZooKeeper session (6 s).
    while frozen.elapsed() < REFRESH * 3 + Duration::from_millis(500) {
        let (code, took) = suite.consume(id, &messages_with_extra(next, 10));
        assert_eq!(
            code,
            0,
            "a write while the coordinator hangs: {:?}",
            logged(&format!("instance={id}"))
        );
        assert_prompt("a write while the coordinator hangs", took, DEADLINE);
        // A look holds nothing a write needs: no write waits out a look's
        // bound (a second), which a write of 10 messages is far below.
        assert!(
            took < MIN_LOOK / 2,
            "a write while the coordinator hangs took {took:?}: it waited for a look"
        );
        slowest = slowest.max(took);
        next += 10;
        std::thread::sleep(Duration::from_millis(200));
    }
    suite.cluster.script(&["resume", "coordinator"]);
    suite.wait_until_answering();
    suite.record("writes while the coordinator hangs, looking at tables", slowest);

    let bootstrap = suite.cluster.bootstrap();
    block(add_string_column_at(&bootstrap, &path, "extra"));
    let altered = Instant::now();
    let carried = loop {
        let (code, _) = suite.consume(id, &messages_with_extra(next, 10));
        assert_eq!(code, 0, "after the thaw");
        next += 10;
        let rows = block(read_log_at(
            &bootstrap,
            &path,
            next as usize,
            Duration::from_secs(20),
        ));
        if rows
            .iter()
            .any(|row| row.get(2).is_some_and(|extra| !extra.is_empty()))
        {
            break rows;
        }
        assert!(
            altered.elapsed() < REFRESH * 5,
            "the added column is not written {:?} after the change: {:?}",
            altered.elapsed(),
            logged(&format!("instance={id}"))
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut ids: Vec<i64> = carried.iter().map(|row| row[0].parse().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, (0..next as i64).collect::<Vec<_>>(), "every message once");
    assert_eq!(suite.plugin.close(id), 0);
}

/// The coordinator frozen while the sink adds a column for a new field
/// (`evolve_schema`): the `ALTER TABLE` never answers, and the consume
/// still returns within its deadline, failed, with nothing of the batch
/// written. Once the coordinator answers again, the same batch (as the
/// runtime hands it again) adds the column and lands once.
pub(super) fn coordinator_hung_while_the_sink_adds_a_column(suite: &mut Suite) {
    let (path, dlq) = (unique_table("evolve_hung"), unique_table("evolve_hung_dlq"));
    let mut config = suite.config(&path, &dlq, DEADLINE);
    config["evolve_schema"] = json!(true);
    let id = next_id();
    suite.plugin.open_ok(id, &config);
    let plain: Vec<TestMessage> = (0..10)
        .map(|i| TestMessage::text(i, &format!(r#"{{"id":{i},"name":"n{i}"}}"#)))
        .collect();
    let (code, _) = suite.consume(id, &plain);
    assert_eq!(code, 0, "before the freeze");

    suite.cluster.script(&["pause", "coordinator"]);
    let (code, took) = suite.consume(id, &messages_with_extra(10, 10));
    suite.cluster.script(&["resume", "coordinator"]);
    assert_ne!(code, 0, "a column that cannot be added fails the consume");
    assert_prompt("adding a column while the coordinator hangs", took, DEADLINE);
    suite.record("adding a column while the coordinator hangs", took);
    suite.wait_until_answering();

    let (code, _) = suite.consume(id, &messages_with_extra(10, 10));
    assert_eq!(code, 0, "after the thaw: {:?}", logged(&format!("instance={id}")));
    assert_eq!(suite.plugin.close(id), 0);
    let bootstrap = suite.cluster.bootstrap();
    let rows = block(read_log_at(&bootstrap, &path, 20, Duration::from_secs(20)));
    let mut seen: Vec<(i64, String)> = rows
        .iter()
        .map(|row| (row[0].parse().unwrap(), row.get(2).cloned().unwrap_or_default()))
        .collect();
    seen.sort();
    let expected: Vec<(i64, String)> = (0..20)
        .map(|i| (i, if i < 10 { String::new() } else { format!("e{i}") }))
        .collect();
    assert_eq!(
        seen, expected,
        "every message once, the new ones with their field"
    );
}

/// With dynamic routing, the coordinator frozen while the sink gives a
/// routed table the column a new field added to its own table: the
/// consume returns within its deadline, failed, with nothing of the batch
/// written; the same batch handed again after the thaw lands once, with
/// its field, in the routed table.
pub(super) fn coordinator_hung_while_a_routed_table_takes_a_column(suite: &mut Suite) {
    let (path, dlq) = (unique_table("route_hung"), unique_table("route_hung_dlq"));
    let routed = unique_table("route_hung_to");
    let mut config = suite.config(&path, &dlq, DEADLINE);
    config["evolve_schema"] = json!(true);
    config["dynamic_routing"] = json!(true);
    config["auto_create_table"] = json!(true);
    config["allowed_tables"] = json!([routed.to_string()]);
    let id = next_id();
    suite.plugin.open_ok(id, &config);
    let message = |i: u64, extra: bool, to: bool| {
        let extra = if extra {
            format!(r#","extra":"e{i}""#)
        } else {
            String::new()
        };
        let to = if to {
            format!(r#","fluss_table":"{routed}""#)
        } else {
            String::new()
        };
        TestMessage::text(i, &format!(r#"{{"id":{i},"name":"n{i}"{extra}{to}}}"#))
    };
    // The routed table is made like the sink's; then `extra` is added to
    // the sink's own table by a message that stays there.
    let (code, _) = suite.consume(id, &(0..5).map(|i| message(i, false, true)).collect::<Vec<_>>());
    assert_eq!(code, 0, "the routed table made");
    let (code, _) = suite.consume(id, &[message(5, true, false)]);
    assert_eq!(code, 0, "the sink's table given `extra`");

    let routed_batch: Vec<TestMessage> = (6..16).map(|i| message(i, true, true)).collect();
    suite.cluster.script(&["pause", "coordinator"]);
    let (code, took) = suite.consume(id, &routed_batch);
    suite.cluster.script(&["resume", "coordinator"]);
    assert_ne!(
        code, 0,
        "a routed table that cannot take the column fails the consume"
    );
    assert_prompt(
        "giving a routed table a column while the coordinator hangs",
        took,
        DEADLINE,
    );
    suite.record("giving a routed table a column while the coordinator hangs", took);
    suite.wait_until_answering();

    let (code, _) = suite.consume(id, &routed_batch);
    assert_eq!(code, 0, "after the thaw: {:?}", logged(&format!("instance={id}")));
    assert_eq!(suite.plugin.close(id), 0);
    let bootstrap = suite.cluster.bootstrap();
    let rows = block(read_log_at(&bootstrap, &routed, 15, Duration::from_secs(20)));
    let mut seen: Vec<(i64, String)> = rows
        .iter()
        .map(|row| (row[0].parse().unwrap(), row.get(2).cloned().unwrap_or_default()))
        .collect();
    seen.sort();
    let expected: Vec<(i64, String)> = (0..5)
        .map(|i| (i, String::new()))
        .chain((6..16).map(|i| (i, format!("e{i}"))))
        .collect();
    assert_eq!(
        seen, expected,
        "every routed message once, the later ones with their field"
    );
}
