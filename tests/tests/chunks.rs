//! A consume of many chunks (`batch_size` messages each, one transform call
//! each) through the dlopen'd plugin, against the real local Fluss: chunks
//! are made side by side and each is sent as soon as it is made, with and
//! without a transform, and every row lands once, in message order, even
//! when a chunk half-way names a table the lean path cannot write.
//! The tests fail, never skip, when no cluster is reachable.

use std::time::Duration;

use fluss::metadata::DataTypes;
use iggy_connector_fluss_sink::TablePath;
use integration_tests::fluss_cluster::{
    block, bootstrap, create_bucketed_log_table, lookup_string, read_log, unique_table,
};
use integration_tests::plugin::{Plugin, TestMessage, log_config, logged, next_id, tenant_router_config};
use integration_tests::{component, test_cache_dir};
use serde_json::json;

const JSON: u32 = 0;

/// The config of an instance writing to the log table `path` (dead letters
/// to `dlq`), with `batch_size` when given and the `transform` component
/// when named.
fn log_sink_config(
    path: &TablePath,
    dlq: &TablePath,
    batch_size: Option<u64>,
    transform: Option<&str>,
) -> serde_json::Value {
    let mut config = log_config(path, dlq);
    if let Some(size) = batch_size {
        config["batch_size"] = json!(size);
    }
    if let Some(name) = transform {
        config["transform"] = json!({
            "path": component(name).display().to_string(),
            "cache_dir": test_cache_dir().display().to_string(),
        });
    }
    config
}

/// Opens an instance of [`log_sink_config`].
fn open_log_sink(
    plugin: &Plugin,
    path: &TablePath,
    dlq: &TablePath,
    batch_size: Option<u64>,
    transform: Option<&str>,
) -> u32 {
    plugin.open_new(&log_sink_config(path, dlq, batch_size, transform))
}

/// A consume of many chunks (`batch_size` 50), with and without a
/// transform: the chunks are made side by side and sent as each is made,
/// and the table holds every row once, in message order (one bucket), the
/// bad messages dead-lettered with the writer's words.
#[test]
fn a_consume_of_many_chunks_lands_whole_and_in_order() {
    let plugin = Plugin::load();
    for transform in [None, Some("json-to-row")] {
        let (path, dlq) = (unique_table("abi_chunks"), unique_table("abi_chunks_dlq"));
        let id = open_log_sink(plugin, &path, &dlq, Some(50), transform);
        let bad = [13u64, 377, 998];
        let messages: Vec<TestMessage> = (0..1000u64)
            .map(|i| match i {
                _ if bad.contains(&i) => {
                    TestMessage::text(i, &format!(r#"{{"id":{i},"amount":"123456789012.5"}}"#))
                }
                _ => TestMessage::text(i, &format!(r#"{{"id":{i},"name":"n{i}","amount":"{i}.50"}}"#)),
            })
            .collect();
        plugin.consume_json_ok(id, "events", &messages);
        let ids: Vec<String> = block(read_log(&path, 997, Duration::from_secs(30)))
            .into_iter()
            .map(|row| row[0].clone())
            .collect();
        let expected: Vec<String> = (0..1000u64)
            .filter(|i| !bad.contains(i))
            .map(|i| i.to_string())
            .collect();
        assert_eq!(ids, expected, "{transform:?}: every row once, in message order");
        let letters = block(read_log(&dlq, 3, Duration::from_secs(30)));
        assert_eq!(letters.len(), 3, "{transform:?}: {letters:?}");
        assert!(
            letters
                .iter()
                .all(|l| l.iter().any(|c| c.contains("DECIMAL(10, 2)"))),
            "{transform:?}: {letters:?}"
        );
        assert_eq!(plugin.close(id), 0);
    }
}

/// A consume of many chunks into a table partitioned by `name`, with and
/// without a transform (both on the lean path): each partition holds its
/// rows once, in message order, across the chunks; a message whose
/// partition value is NULL or cannot name a Fluss partition is
/// dead-lettered with the reason, and nothing of it is written.
#[test]
fn a_partitioned_consume_of_many_chunks_lands_each_row_in_its_partition_in_order() {
    use integration_tests::fluss_cluster::{partition_names, read_partition};
    let plugin = Plugin::load();
    for transform in [None, Some("json-to-row")] {
        let (path, dlq) = (unique_table("abi_pchunks"), unique_table("abi_pchunks_dlq"));
        let mut config = log_sink_config(&path, &dlq, Some(50), transform);
        config["partition_keys"] = json!(["name"]);
        let id = next_id();
        plugin.open_ok(id, &config);
        let (null, unnamable) = (77u64, 555u64);
        let messages: Vec<TestMessage> = (0..600u64)
            .map(|i| match i {
                _ if i == null => TestMessage::text(i, &format!(r#"{{"id":{i},"amount":"1.00"}}"#)),
                _ if i == unnamable => {
                    TestMessage::text(i, &format!(r#"{{"id":{i},"name":"no/such","amount":"1.00"}}"#))
                }
                _ => TestMessage::text(
                    i,
                    &format!(r#"{{"id":{i},"name":"p{}","amount":"{i}.50"}}"#, i % 3),
                ),
            })
            .collect();
        plugin.consume_json_ok(id, "events", &messages);
        assert_eq!(
            block(partition_names(&path)),
            vec!["p0", "p1", "p2"],
            "{transform:?}"
        );
        for p in 0..3u64 {
            let expected: Vec<String> = (0..600u64)
                .filter(|i| i % 3 == p && ![null, unnamable].contains(i))
                .map(|i| i.to_string())
                .collect();
            let ids: Vec<String> = block(read_partition(
                &path,
                &format!("p{p}"),
                expected.len(),
                Duration::from_secs(30),
            ))
            .into_iter()
            .map(|row| row[0].clone())
            .collect();
            assert_eq!(
                ids, expected,
                "{transform:?}: partition p{p}: every row once, in message order"
            );
        }
        let letters = block(read_log(&dlq, 2, Duration::from_secs(30)));
        assert_eq!(letters.len(), 2, "{transform:?}: {letters:?}");
        for (reason, offset) in [("NULL", null), ("cannot name a Fluss partition", unnamable)] {
            assert!(
                letters.iter().any(|l| l[3] == offset.to_string()
                    && l[7] == "partition"
                    && l[8].contains(reason)
                    && l[8].contains("partition key `name`")),
                "{transform:?}: offset {offset} dead-lettered for `{reason}`: {letters:?}"
            );
        }
        assert_eq!(plugin.close(id), 0);
    }
}

/// `tenant-router` over chunks of 2 messages: the first three chunks go to
/// a table the lean path writes, the fourth to one it cannot (a bucket
/// key), the fifth to the first table again. What the lean path sent is
/// settled, then the fourth chunk and the rest go the encoded way: each
/// table holds each of its rows once, the first one in message order.
#[test]
fn a_chunk_for_a_table_the_lean_path_cannot_write_sends_it_and_the_rest_the_encoded_way() {
    let plugin = Plugin::load();
    let path = unique_table("chunks_route");
    let (mut config, prefix) = tenant_router_config(&path);
    let (lean, bucketed) = (
        TablePath::new(path.database.clone(), format!("{prefix}lean")),
        TablePath::new(path.database.clone(), format!("{prefix}bucketed")),
    );
    block(create_bucketed_log_table(
        &bucketed,
        &[("tenant", DataTypes::string()), ("v", DataTypes::int())],
        "v",
    ));
    let id = next_id();
    config["bucket_count"] = json!(1);
    config["batch_size"] = json!(2);
    plugin.open_ok(id, &config);
    let tenant_of = |v: u64| if v == 6 || v == 7 { "bucketed" } else { "lean" };
    let messages: Vec<TestMessage> = (0..10u64)
        .map(|v| TestMessage::text(v, &format!(r#"{{"tenant":"{}","v":{v}}}"#, tenant_of(v))))
        .collect();
    plugin.consume_json_ok(id, "events", &messages);
    let values = |rows: Vec<Vec<String>>| -> Vec<String> { rows.into_iter().map(|r| r[1].clone()).collect() };
    assert_eq!(
        values(block(read_log(&lean, 8, Duration::from_secs(30)))),
        ["0", "1", "2", "3", "4", "5", "8", "9"],
        "the lean table: every row once, in message order"
    );
    let mut routed = values(block(read_log(&bucketed, 2, Duration::from_secs(30))));
    routed.sort();
    assert_eq!(routed, ["6", "7"], "the bucketed table: every row once");
    assert_eq!(plugin.close(id), 0);
}

/// `tenant-router` into three tables over two consumes of chunks of 2
/// messages: in the first, the routed tables are created and opened by the
/// writer; in the second, each chunk's rows go into their tables' columns
/// beside the transform. Either way each table holds each of its rows once,
/// in message order.
#[test]
fn routed_rows_land_once_and_in_order_before_and_after_their_tables_are_open() {
    let plugin = Plugin::load();
    let path = unique_table("chunks_tenants");
    let (mut config, prefix) = tenant_router_config(&path);
    config["batch_size"] = json!(2);
    let id = next_id();
    plugin.open_ok(id, &config);
    let tenants = ["a", "b", "c"];
    for consume in 0..2u64 {
        let messages: Vec<TestMessage> = (consume * 12..consume * 12 + 12)
            .map(|v| {
                let tenant = tenants[(v as usize * 7 / 3) % 3];
                TestMessage::text(v, &format!(r#"{{"tenant":"{tenant}","v":{v}}}"#))
            })
            .collect();
        plugin.consume_json_ok(id, "events", &messages);
    }
    for (t, tenant) in tenants.iter().enumerate() {
        let table = TablePath::new(path.database.clone(), format!("{prefix}{tenant}"));
        let want: Vec<String> = (0..24u64)
            .filter(|v| (*v as usize * 7 / 3) % 3 == t)
            .map(|v| v.to_string())
            .collect();
        let rows = block(read_log(&table, want.len(), Duration::from_secs(30)));
        let got: Vec<String> = rows.into_iter().map(|r| r[1].clone()).collect();
        assert_eq!(got, want, "table {table}: every row once, in message order");
    }
    assert_eq!(plugin.close(id), 0);
}

/// A transform's rows for a primary-key table, two messages a chunk: whole
/// rows take the keyed lean path, chunk by chunk, until a chunk with a
/// partial update (an upsert that leaves a column out); what was sent is
/// settled, then that chunk and the rest go the encoded way. Each key ends
/// in the state of its last message: an upsert or delete applied out of
/// order, or twice, across the switch would leave another.
#[test]
fn a_primary_key_table_takes_whole_rows_chunk_by_chunk_then_a_partial_update_the_encoded_way() {
    let plugin = Plugin::load();
    let path = unique_table("chunks_keyed");
    let id = next_id();
    let config = json!({
        "bootstrap_servers": bootstrap(),
        "database": path.database,
        "table": path.table,
        "table_type": "primary_key",
        "primary_key_columns": ["id"],
        "columns": [
            {"name": "id", "type": "BIGINT"},
            {"name": "name", "type": "STRING"},
            {"name": "email", "type": "STRING"}
        ],
        "batch_size": 2,
        "transform": {
            "path": component("cdc-upsert"),
            "cache_dir": test_cache_dir(),
            "config": {"partial_update": "true"}
        }
    });
    plugin.open_ok(id, &config);
    let messages = [
        r#"{"op":"c","id":1,"name":"a","email":"a@1"}"#,
        r#"{"op":"c","id":2,"name":"b","email":"b@1"}"#,
        r#"{"op":"u","id":1,"name":"a2","email":"a@2"}"#,
        r#"{"op":"d","id":2}"#,
        // The first partial update: from here on, the encoded way.
        r#"{"op":"u","id":1,"email":"a@partial"}"#,
        r#"{"op":"c","id":2,"name":"b2","email":"b@2"}"#,
        r#"{"op":"u","id":1,"name":"a3","email":"a@3"}"#,
        r#"{"op":"c","id":3,"name":"c","email":"c@1"}"#,
        r#"{"op":"d","id":3}"#,
    ];
    let messages: Vec<TestMessage> = messages
        .iter()
        .enumerate()
        .map(|(i, p)| TestMessage::text(i as u64, p))
        .collect();
    assert_eq!(
        plugin.consume(id, "app", "cdc", JSON, &messages),
        0,
        "{:?}",
        logged(&format!("instance={id}"))
    );
    let cell = |key: i64, column: usize| block(lookup_string(&path, key, column));
    assert_eq!((cell(1, 1), cell(1, 2)), (some("a3"), some("a@3")));
    assert_eq!(
        (cell(2, 1), cell(2, 2)),
        (some("b2"), some("b@2")),
        "deleted in the keyed chunks, created again after the switch"
    );
    assert_eq!(cell(3, 1), None, "created and deleted after the switch");
    assert_eq!(plugin.close(id), 0);
    assert!(
        logged(&format!("closed instance={id}"))
            .iter()
            .any(|(_, m)| m.contains("received=9 written=9 filtered=0 dead_lettered=0")),
        "{:?}",
        logged(&format!("instance={id}"))
    );
}

fn some(text: &str) -> Option<String> {
    Some(text.to_string())
}

/// A large consume of small messages with `batch_size` left out is made in
/// fewer, larger chunks (`auto`): with and without a transform, every row
/// lands once, in message order (one bucket).
#[test]
fn a_large_consume_in_auto_sized_chunks_lands_whole_and_in_order() {
    let plugin = Plugin::load();
    for transform in [None, Some("json-to-row")] {
        let (path, dlq) = (
            unique_table("abi_auto_chunks"),
            unique_table("abi_auto_chunks_dlq"),
        );
        let id = open_log_sink(plugin, &path, &dlq, None, transform);
        let messages: Vec<TestMessage> = (0..6000u64)
            .map(|i| TestMessage::text(i, &format!(r#"{{"id":{i},"name":"n{i}","amount":"{i}.50"}}"#)))
            .collect();
        plugin.consume_json_ok(id, "events", &messages);
        let ids: Vec<String> = block(read_log(&path, 6000, Duration::from_secs(30)))
            .into_iter()
            .map(|row| row[0].clone())
            .collect();
        let expected: Vec<String> = (0..6000u64).map(|i| i.to_string()).collect();
        assert_eq!(ids, expected, "{transform:?}: every row once, in message order");
        assert_eq!(plugin.close(id), 0);
    }
}
