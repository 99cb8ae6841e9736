//! Tables that change, through the real runtime: a column another client
//! adds mid-stream is followed; `evolve_schema` adds the columns of new
//! fields mid-stream, also from two runtimes of one consumer group at once.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use integration_tests::fluss_cluster::{
    add_string_column, block, bootstrap, columns_of, read_log, unique_table,
};
use integration_tests::iggy::{Connector, Outgoing, Server, binaries_present, start_runtime, wait_for_table};

use super::ONE_AT_A_TIME;

/// A producer runs while another client adds a column to the sink's table;
/// the messages carry the field from the start. Through the real runtime,
/// every message lands once, none written before the change carries the
/// field, and every one produced more than `schema_refresh_interval` and a
/// poll's slack after the change does.
#[test]
fn a_column_added_mid_stream_is_written_through_the_real_runtime() {
    if !binaries_present("a_column_added_mid_stream_is_written_through_the_real_runtime") {
        return;
    }
    const REFRESH: Duration = Duration::from_secs(1);
    const CHUNK: u64 = 100;
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let work = tempfile::tempdir().unwrap();
    let server = Server::start(work.path(), 1);
    let table = unique_table("runtime_follow");
    let config = format!(
        r#"bootstrap_servers = "{bootstrap}"
database = "{database}"
table = "{name}"
schema_refresh_interval = "{refresh}ms"
columns = [
  {{ name = "order_id", type = "BIGINT", nullable = false }},
  {{ name = "customer", type = "STRING" }},
]"#,
        bootstrap = bootstrap(),
        database = table.database,
        name = table.table,
        refresh = REFRESH.as_millis(),
    );
    let produce = |from: u64| {
        let messages: Vec<Outgoing> = (from..from + CHUNK)
            .map(|i| Outgoing {
                payload: format!(r#"{{"order_id":{i},"customer":"c{i}","channel":"web{i}"}}"#),
                headers: vec![],
            })
            .collect();
        server.produce_messages(Some(0), &messages);
    };
    let _runtime = start_runtime(&server, work.path(), "runtime", &Connector::new(config), &[]);
    produce(0);
    wait_for_table(&table);
    // The first chunk in Fluss before the change: it cannot carry the field.
    block(read_log(&table, CHUNK as usize, Duration::from_secs(60)));
    block(add_string_column(&table, "channel"));
    let altered = Instant::now();
    // (first id of a chunk, when it was produced after the change)
    let mut produced = Vec::new();
    let mut next = CHUNK;
    while altered.elapsed() < REFRESH + Duration::from_secs(5) {
        produced.push((next, altered.elapsed()));
        produce(next);
        next += CHUNK;
        std::thread::sleep(Duration::from_millis(100));
    }
    let rows = block(read_log(&table, next as usize, Duration::from_secs(90)));
    let mut channel_of = BTreeMap::new();
    for row in &rows {
        let id: u64 = row[0].parse().unwrap();
        let channel = row.get(2).filter(|c| !c.is_empty()).cloned();
        assert!(
            channel_of.insert(id, channel).is_none(),
            "order {id} landed twice"
        );
    }
    assert_eq!(
        channel_of.len() as u64,
        next,
        "every order once: {} of {next}",
        channel_of.len()
    );
    assert!(
        (0..CHUNK).all(|id| channel_of[&id].is_none()),
        "written before the change"
    );
    let mut lag = None;
    for &(first, after) in &produced {
        let carried = (first..first + CHUNK)
            .filter(|id| channel_of[id].as_deref() == Some(format!("web{id}").as_str()))
            .count() as u64;
        if carried > 0 && lag.is_none() {
            lag = Some(after);
        }
        if after >= REFRESH + Duration::from_secs(3) {
            assert_eq!(
                carried, CHUNK,
                "orders from {first}, produced {after:?} after the change, carry the new column"
            );
        }
    }
    let lag = lag.expect("some order carries the new column");
    eprintln!("the first order with the new column was produced {lag:?} after the change");
}

/// `evolve_schema` through the real runtime with a producer running: the
/// orders gain fields mid-stream (`channel` from order 150, `qty` from
/// order 250); each field's column is added before the first order that
/// carries it is written, so every order carries what it was produced
/// with, and the columns take the types of their JSON values.
#[test]
fn new_fields_add_their_columns_mid_stream_through_the_real_runtime() {
    if !binaries_present("new_fields_add_their_columns_mid_stream_through_the_real_runtime") {
        return;
    }
    const CHUNK: u64 = 50;
    const TOTAL: u64 = 400;
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let work = tempfile::tempdir().unwrap();
    let server = Server::start(work.path(), 1);
    let table = unique_table("runtime_evolve");
    let config = format!(
        r#"bootstrap_servers = "{bootstrap}"
database = "{database}"
table = "{name}"
evolve_schema = true
columns = [
  {{ name = "order_id", type = "BIGINT", nullable = false }},
  {{ name = "customer", type = "STRING" }},
]"#,
        bootstrap = bootstrap(),
        database = table.database,
        name = table.table,
    );
    let payload = |i: u64| match i {
        0..150 => format!(r#"{{"order_id":{i},"customer":"c{i}"}}"#),
        150..250 => format!(r#"{{"order_id":{i},"customer":"c{i}","channel":"web{i}"}}"#),
        _ => format!(r#"{{"order_id":{i},"customer":"c{i}","channel":"web{i}","qty":{i}}}"#),
    };
    let _runtime = start_runtime(&server, work.path(), "runtime", &Connector::new(config), &[]);
    for from in (0..TOTAL).step_by(CHUNK as usize) {
        let messages: Vec<Outgoing> = (from..from + CHUNK)
            .map(|i| Outgoing {
                payload: payload(i),
                headers: vec![],
            })
            .collect();
        server.produce_messages(Some(0), &messages);
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_for_table(&table);
    let rows = block(read_log(&table, TOTAL as usize, Duration::from_secs(90)));
    let mut seen = BTreeMap::new();
    for row in &rows {
        let id: u64 = row[0].parse().unwrap();
        let cell = |i: usize| row.get(i).cloned().unwrap_or_default();
        assert!(
            seen.insert(id, (cell(2), cell(3))).is_none(),
            "order {id} landed twice"
        );
    }
    assert_eq!(
        seen.len() as u64,
        TOTAL,
        "every order once: {} of {TOTAL}",
        seen.len()
    );
    for (id, (channel, qty)) in &seen {
        let expected = match id {
            0..150 => (String::new(), String::new()),
            150..250 => (format!("web{id}"), String::new()),
            _ => (format!("web{id}"), id.to_string()),
        };
        assert_eq!((channel, qty), (&expected.0, &expected.1), "order {id}");
    }
    let columns = block(columns_of(&table));
    assert_eq!(
        columns[2..],
        [
            ("channel".to_string(), "STRING".to_string()),
            ("qty".to_string(), "BIGINT".to_string())
        ]
    );
}

/// `evolve_schema` in two runtimes of one consumer group (four partitions):
/// the orders gain a field mid-stream in every partition, so both runtimes
/// meet it at about the same time and both ask Fluss for its column; the
/// one Fluss refuses, or whose write meets the change first, takes the
/// column the other added. Every order lands once, with the field it was
/// produced with.
#[test]
fn two_runtimes_in_one_consumer_group_add_the_same_column_and_both_go_on() {
    if !binaries_present("two_runtimes_in_one_consumer_group_add_the_same_column_and_both_go_on") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let work = tempfile::tempdir().unwrap();
    let server = Server::start(work.path(), 4);
    let table = unique_table("runtime_group_evolve");
    // Neither runtime looks at the table by itself during the test: what
    // one learns of the other's column, it learns by asking for it.
    let config = format!(
        r#"bootstrap_servers = "{bootstrap}"
database = "{database}"
table = "{name}"
evolve_schema = true
schema_refresh_interval = "1h"
columns = [
  {{ name = "order_id", type = "BIGINT", nullable = false }},
  {{ name = "customer", type = "STRING" }},
]"#,
        bootstrap = bootstrap(),
        database = table.database,
        name = table.table,
    );
    let connector = Connector::new(config);
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
    const TOTAL: u64 = 4_000;
    const FROM: u64 = 1_000;
    let messages: Vec<Outgoing> = (0..TOTAL)
        .map(|i| Outgoing {
            payload: if i < FROM {
                format!(r#"{{"order_id":{i},"customer":"c{i}"}}"#)
            } else {
                format!(r#"{{"order_id":{i},"customer":"c{i}","channel":"web{i}"}}"#)
            },
            headers: vec![],
        })
        .collect();
    for chunk in messages.chunks(100) {
        server.produce_messages(None, chunk);
    }
    let rows = block(read_log(&table, TOTAL as usize, Duration::from_secs(60)));
    let mut channel_of: BTreeMap<i64, String> = BTreeMap::new();
    for row in &rows {
        let id: i64 = row[0].parse().unwrap();
        let channel = row.get(2).cloned().unwrap_or_default();
        assert!(
            channel_of.insert(id, channel).is_none(),
            "order {id} landed twice"
        );
    }
    assert_eq!(channel_of.len() as u64, TOTAL, "every order once");
    for (id, channel) in &channel_of {
        let expected = if (*id as u64) < FROM {
            String::new()
        } else {
            format!("web{id}")
        };
        assert_eq!(*channel, expected, "order {id}");
    }
    assert!(first.terminate(Duration::from_secs(30)) && second.terminate(Duration::from_secs(30)));
    let (a, b) = (first.log(), second.log());
    // A runtime takes the column the other added in one of two ways: its
    // own request to add it is refused (`found`), or a write of its, made
    // before the change, is refused first and the table opened again
    // (`followed`), after which the field has its column.
    let added = format!("table {table} changed: added column(s) channel");
    let found = format!("table {table} already has column(s) channel");
    let followed = format!("a write met a change of table {table}: it is opened again");
    for (name, log) in [("a", &a), ("b", &b)] {
        assert!(
            log.contains(&added) || log.contains(&found) || log.contains(&followed),
            "runtime {name} added the column or took the one the other added"
        );
    }
    assert!(
        a.contains(&added) || b.contains(&added),
        "one of the runtimes added the column"
    );
    eprintln!(
        "runtime a: added {}, took {}, followed {}; runtime b: added {}, took {}, followed {}",
        a.contains(&added),
        a.contains(&found),
        a.contains(&followed),
        b.contains(&added),
        b.contains(&found),
        b.contains(&followed)
    );
}
