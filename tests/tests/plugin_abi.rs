//! The plugin loaded with dlopen exactly as the connectors runtime loads it,
//! driven through its four C symbols with postcard buffers from the test's
//! own encoder, against the real local Fluss (`scripts/fluss-local.sh start`).
//! The tests that need Fluss fail, never skip, when no cluster is reachable.

use std::time::Duration;

use iggy_connector_fluss_sink::TablePath;
use integration_tests::fluss_cluster::{
    block, bootstrap, fluss_path, lookup_string, newest_auto_partition, read_log, recent_days, unique_table,
};
use integration_tests::plugin::{
    Plugin, TestMessage, encode, log_config, logged, next_id, tenant_router_config,
};
use integration_tests::{component, test_cache_dir};
use serde_json::json;

const JSON: u32 = 0;

fn json_messages(from: u64, count: u64) -> Vec<TestMessage> {
    (from..from + count)
        .map(|i| TestMessage::text(i, &format!(r#"{{"id":{i},"name":"n{i}","amount":"{i}.50"}}"#)))
        .collect()
}

#[test]
fn the_version_is_the_crate_version() {
    assert_eq!(Plugin::load().version(), env!("CARGO_PKG_VERSION"));
}

#[test]
fn json_lands_in_a_log_table_and_bad_messages_in_the_dead_letter_table() {
    let plugin = Plugin::load();
    let (path, dlq) = (unique_table("abi_log"), unique_table("abi_dlq"));
    let id = next_id();
    plugin.open_ok(id, &log_config(&path, &dlq));
    assert!(
        logged(&format!("Fluss sink open instance={id}"))
            .iter()
            .any(|(level, _)| *level == 2),
        "the open is logged at INFO through the callback"
    );

    let mut messages = json_messages(0, 50);
    messages.push(TestMessage::text(50, r#"{"id":"fifty"}"#));
    messages.push(TestMessage::text(51, "not json"));
    assert_eq!(plugin.consume(id, "app", "orders", JSON, &messages), 0);

    let rows = block(read_log(&path, 50, Duration::from_secs(30)));
    let expected: Vec<Vec<String>> = (0..50)
        .map(|i| vec![i.to_string(), format!("n{i}"), format!("{i}.50")])
        .collect();
    assert_eq!(rows, expected, "every good message, in order");

    let letters = block(read_log(&dlq, 2, Duration::from_secs(30)));
    assert_eq!(letters.len(), 2);
    // stream, topic, partition, offset, message_id, timestamp, payload, error_kind, error, failed_at
    assert_eq!(&letters[0][..5], &["app", "orders", "1", "50", "10050"]);
    assert_eq!(letters[0][8], "column `id` (BIGINT): \"fifty\" is not a BIGINT");
    assert_eq!(letters[1][3], "51");
    assert!(letters[1][8].contains("JSON"), "{}", letters[1][8]);
    assert_eq!(plugin.close(id), 0);
    assert!(
        logged(&format!("closed instance={id}"))
            .iter()
            .any(|(_, m)| m.contains("received=52 written=50 filtered=0 dead_lettered=2")),
        "{:?}",
        logged(&format!("instance={id}"))
    );
}

#[test]
fn a_wasm_transform_upserts_and_deletes_in_a_primary_key_table() {
    let plugin = Plugin::load();
    let (path, dlq) = (unique_table("abi_cdc"), unique_table("abi_dlq"));
    let id = next_id();
    let config = json!({
        "bootstrap_servers": bootstrap(),
        "database": path.database,
        "table": path.table,
        "table_type": "primary_key",
        "primary_key_columns": ["id"],
        "columns": [{"name": "id", "type": "BIGINT"}, {"name": "name", "type": "STRING"}],
        "dead_letter_table": dlq.to_string(),
        "transform": {
            "path": component("cdc-upsert"),
            "cache_dir": test_cache_dir(),
            "config": {"op_field": "op"}
        }
    });
    plugin.open_ok(id, &config);
    let messages = [
        r#"{"op":"c","id":1,"name":"a"}"#,
        r#"{"op":"c","id":2,"name":"b"}"#,
        r#"{"op":"u","id":1,"name":"a2"}"#,
        r#"{"op":"d","id":2}"#,
        r#"{"op":"x","id":3,"name":"c"}"#,
    ];
    let messages: Vec<TestMessage> = messages
        .iter()
        .enumerate()
        .map(|(i, p)| TestMessage::text(i as u64, p))
        .collect();
    assert_eq!(plugin.consume(id, "app", "cdc", JSON, &messages), 0);
    assert_eq!(block(lookup_string(&path, 1, 1)).as_deref(), Some("a2"));
    assert_eq!(block(lookup_string(&path, 2, 1)), None, "id 2 was deleted");
    assert_eq!(block(lookup_string(&path, 3, 1)), None, "op x is not written");
    let letters = block(read_log(&dlq, 1, Duration::from_secs(30)));
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0][7], "transform");
    assert!(
        letters[0][8].contains("unknown operation `x`"),
        "{}",
        letters[0][8]
    );
    assert_eq!(plugin.close(id), 0);
}

#[test]
fn a_cdc_transform_writes_partial_updates_that_keep_the_other_columns() {
    let plugin = Plugin::load();
    let path = unique_table("abi_cdc_partial");
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
        "transform": {
            "path": component("cdc-upsert"),
            "cache_dir": test_cache_dir(),
            "config": {"partial_update": "true"}
        }
    });
    plugin.open_ok(id, &config);
    let messages = [
        r#"{"op":"c","id":1,"name":"ann","email":"ann@a"}"#,
        r#"{"op":"c","id":2,"name":"bob","email":"bob@b"}"#,
        r#"{"op":"u","id":1,"email":"ann@new"}"#,
        r#"{"op":"u","id":2,"name":"robert"}"#,
        r#"{"op":"u","id":3,"email":"cy@c"}"#,
        r#"{"op":"u","id":2,"email":null}"#,
    ];
    let messages: Vec<TestMessage> = messages
        .iter()
        .enumerate()
        .map(|(i, p)| TestMessage::text(i as u64, p))
        .collect();
    assert_eq!(plugin.consume(id, "app", "cdc", JSON, &messages), 0);
    let cell = |key: i64, column: usize| block(lookup_string(&path, key, column));
    assert_eq!(
        (cell(1, 1), cell(1, 2)),
        (Some("ann".into()), Some("ann@new".into()))
    );
    assert_eq!(
        cell(2, 1),
        Some("robert".into()),
        "the later update kept the name"
    );
    assert_eq!(
        cell(3, 2),
        Some("cy@c".into()),
        "a new key's left-out columns are NULL"
    );
    assert_eq!(plugin.close(id), 0);
}

#[test]
fn json_with_an_op_header_deletes_from_a_primary_key_table() {
    let plugin = Plugin::load();
    let path = unique_table("abi_pk");
    let id = next_id();
    let config = json!({
        "bootstrap_servers": bootstrap(),
        "database": path.database,
        "table": path.table,
        "table_type": "primary_key",
        "primary_key_columns": ["id"],
        "columns": [{"name": "id", "type": "BIGINT"}, {"name": "name", "type": "STRING"}]
    });
    plugin.open_ok(id, &config);
    let messages = vec![
        TestMessage::text(0, r#"{"id":1,"name":"a"}"#),
        TestMessage::text(1, r#"{"id":2,"name":"b"}"#),
        TestMessage::text(2, r#"{"id":1}"#).with_header("op", "delete"),
    ];
    assert_eq!(plugin.consume(id, "app", "users", JSON, &messages), 0);
    assert_eq!(block(lookup_string(&path, 1, 1)), None);
    assert_eq!(block(lookup_string(&path, 2, 1)).as_deref(), Some("b"));
    assert_eq!(plugin.close(id), 0);
}

#[test]
fn a_tenant_router_writes_two_tables() {
    let plugin = Plugin::load();
    let path = unique_table("abi_tenants");
    let (config, prefix) = tenant_router_config(&path);
    let id = next_id();
    plugin.open_ok(id, &config);
    let messages: Vec<TestMessage> = [("acme", 1), ("globex", 2), ("acme", 3)]
        .iter()
        .enumerate()
        .map(|(i, (t, v))| TestMessage::text(i as u64, &format!(r#"{{"tenant":"{t}","v":{v}}}"#)))
        .collect();
    assert_eq!(plugin.consume(id, "app", "events", JSON, &messages), 0);
    let acme = TablePath::new(path.database.clone(), format!("{prefix}acme"));
    let globex = TablePath::new(path.database.clone(), format!("{prefix}globex"));
    assert_eq!(
        block(read_log(&acme, 2, Duration::from_secs(30))),
        vec![
            vec!["acme".to_string(), "1".into()],
            vec!["acme".into(), "3".into()]
        ]
    );
    assert_eq!(
        block(read_log(&globex, 1, Duration::from_secs(30))),
        vec![vec!["globex".to_string(), "2".into()]]
    );
    assert_eq!(plugin.close(id), 0);
}

#[test]
fn a_transform_routes_into_partitioned_tables_with_metadata_columns() {
    use integration_tests::fluss_cluster::{partition_names, read_partition};
    let plugin = Plugin::load();
    let path = unique_table("abi_parts");
    let dlq = unique_table("abi_parts_dlq");
    let prefix = format!("{}_", path.table);
    let id = next_id();
    let config = json!({
        "bootstrap_servers": bootstrap(),
        "database": path.database,
        "table": path.table,
        "columns": [
            {"name": "tenant", "type": "STRING"},
            {"name": "region", "type": "STRING"},
            {"name": "v", "type": "INT"},
            {"name": "iggy_offset", "type": "BIGINT"}
        ],
        "partition_keys": ["region"],
        "include_metadata": true,
        "auto_create_table": true,
        "allowed_tables": [format!("{}.{prefix}*", path.database)],
        "dead_letter_table": dlq.to_string(),
        "delivery_timeout": "60s",
        "transform": {
            "path": component("tenant-router"),
            "cache_dir": test_cache_dir(),
            "config": {"prefix": prefix}
        }
    });
    plugin.open_ok(id, &config);
    let rows = [
        ("acme", Some("eu")),
        ("globex", Some("us")),
        ("acme", Some("us")),
        ("acme", None),
        ("globex", Some("us")),
        ("acme", Some("eu")),
    ];
    let messages: Vec<TestMessage> = rows
        .iter()
        .enumerate()
        .map(|(i, (tenant, region))| {
            let region = region.map_or(String::new(), |r| format!(r#","region":"{r}""#));
            TestMessage::text(i as u64, &format!(r#"{{"tenant":"{tenant}","v":{i}{region}}}"#))
        })
        .collect();
    assert_eq!(plugin.consume(id, "app", "events", JSON, &messages), 0);

    let acme = TablePath::new(path.database.clone(), format!("{prefix}acme"));
    let globex = TablePath::new(path.database.clone(), format!("{prefix}globex"));
    assert_eq!(
        block(partition_names(&acme)),
        vec!["eu", "us"],
        "the routed table is partitioned like the sink's"
    );
    assert_eq!(block(partition_names(&globex)), vec!["us"]);
    let offsets = |table: &TablePath, partition: &str, n: usize| -> Vec<String> {
        block(read_partition(table, partition, n, Duration::from_secs(30)))
            .into_iter()
            .map(|row| format!("{}/{}/{}", row[1], row[2], row[3]))
            .collect()
    };
    assert_eq!(offsets(&acme, "eu", 2), ["eu/0/0", "eu/5/5"]);
    assert_eq!(offsets(&acme, "us", 1), ["us/2/2"]);
    assert_eq!(offsets(&globex, "us", 2), ["us/1/1", "us/4/4"]);
    let letters = block(read_log(&dlq, 1, Duration::from_secs(30)));
    assert_eq!(letters.len(), 1);
    assert_eq!(
        (letters[0][3].as_str(), letters[0][7].as_str()),
        ("3", "partition")
    );
    assert!(
        letters[0][8].contains("partition key `region`"),
        "{}",
        letters[0][8]
    );
    assert_eq!(plugin.close(id), 0);
}

#[test]
fn open_creates_the_auto_partitioned_table_the_config_declares() {
    use integration_tests::fluss_cluster::{connection, partition_names, read_partition};
    let plugin = Plugin::load();
    let path = unique_table("abi_auto");
    let dlq = unique_table("abi_auto_dlq");
    let id = next_id();
    let config = json!({
        "bootstrap_servers": bootstrap(),
        "database": path.database,
        "table": path.table,
        "columns": [{"name": "id", "type": "BIGINT"}, {"name": "day", "type": "STRING", "nullable": false}],
        "partition_keys": ["day"],
        "auto_partition_time_unit": "day",
        "auto_partition_time_zone": "UTC",
        "auto_partition_num_precreate": 3,
        "table_properties": {"table.log.ttl": "2d"},
        "dead_letter_table": dlq.to_string(),
        "delivery_timeout": "60s"
    });
    plugin.open_ok(id, &config);
    let info = block(async {
        let conn = connection().await;
        let table = conn.get_table(&fluss_path(&path)).await.unwrap();
        table.get_table_info().clone()
    });
    assert!(info.is_auto_partitioned());
    assert_eq!(info.get_partition_keys().to_vec(), vec!["day".to_string()]);
    let properties = info.get_properties();
    assert_eq!(
        properties
            .get("table.auto-partition.time-unit")
            .map(String::as_str),
        Some("DAY")
    );
    assert_eq!(
        properties
            .get("table.auto-partition.num-precreate")
            .map(String::as_str),
        Some("3")
    );
    assert_eq!(properties.get("table.log.ttl").map(String::as_str), Some("2d"));

    // num-precreate 3: day's partition and the next two; the row goes to
    // the newest, whose name Fluss gave (midnight-proof).
    let day = block(newest_auto_partition(&path, 3));
    let names = block(partition_names(&path));
    assert!(
        recent_days().iter().any(|d| names.contains(d)),
        "Fluss made today's partition: {names:?}"
    );
    let messages = vec![
        TestMessage::text(0, &format!(r#"{{"id":1,"day":"{day}"}}"#)),
        TestMessage::text(1, r#"{"id":2,"day":"19990101"}"#),
    ];
    assert_eq!(plugin.consume(id, "app", "events", JSON, &messages), 0);
    let rows = block(read_partition(&path, &day, 1, Duration::from_secs(30)));
    assert_eq!(rows, vec![vec!["1".to_string(), day.clone()]]);
    let letters = block(read_log(&dlq, 1, Duration::from_secs(30)));
    assert_eq!(
        (letters[0][3].as_str(), letters[0][7].as_str()),
        ("1", "partition")
    );
    assert!(
        letters[0][8].contains("partition `19990101`"),
        "{}",
        letters[0][8]
    );
    assert_eq!(plugin.close(id), 0);
}

#[test]
fn a_bad_config_is_refused_naming_what_is_wrong() {
    let plugin = Plugin::load();
    let id = next_id();
    let config =
        json!({"bootstrap_servers": "127.0.0.1:1", "database": "d", "table": "t", "tabel_type": "log"});
    assert_eq!(plugin.open(id, &config.to_string()), -1);
    let lines = logged(&format!("instance={id}"));
    assert!(
        lines
            .iter()
            .any(|(level, m)| *level == 4 && m.contains("unknown field `tabel_type`")),
        "{lines:?}"
    );
    assert_eq!(plugin.open(id, "null"), -1);
    assert!(
        logged("the connector has no [plugin_config]")
            .iter()
            .any(|(l, _)| *l == 4),
        "a null config says what is missing"
    );
    assert_eq!(plugin.open(id, "{not json"), -1);
    assert_eq!(
        plugin.consume(id, "app", "t", JSON, &json_messages(0, 1)),
        -1,
        "never opened"
    );
}

#[test]
fn an_unknown_id_is_refused() {
    let plugin = Plugin::load();
    assert_eq!(
        plugin.consume(999_999, "app", "t", JSON, &json_messages(0, 1)),
        -1
    );
    assert_eq!(plugin.close(999_999), -1);
    assert!(!logged("no open instance 999999").is_empty());
}

#[test]
fn garbage_buffers_are_refused_and_the_instance_keeps_working() {
    let plugin = Plugin::load();
    let (path, dlq) = (unique_table("abi_garbage"), unique_table("abi_dlq"));
    let id = next_id();
    plugin.open_ok(id, &log_config(&path, &dlq));
    let topic = encode::topic_metadata("app", "t");
    let meta = encode::messages_metadata(1, 0, JSON);
    let good = encode::raw_messages(JSON, &json_messages(0, 3));
    let mut huge = Vec::new();
    encode::varint(&mut huge, JSON as u128);
    encode::varint(&mut huge, u64::MAX as u128); // a count no buffer can hold
    type Buffers<'a> = (&'a str, &'a [u8], &'a [u8], &'a [u8]);
    let cases: [Buffers<'_>; 6] = [
        ("garbage topic", &[0xff, 0xff, 0xff], &meta, &good),
        ("truncated metadata", &topic, &meta[..1], &good),
        ("unknown schema", &topic, &[1, 0, 9], &good),
        ("truncated messages", &topic, &meta, &good[..good.len() - 3]),
        ("enormous length", &topic, &meta, &huge),
        ("trailing bytes", &topic, &meta, &[good.as_slice(), &[0]].concat()),
    ];
    for (what, t, m, msgs) in cases {
        assert_eq!(plugin.consume_raw(id, t, m, msgs), -1, "{what}");
    }
    // This instance's refusals only: tests running beside it log theirs.
    let this_instance = format!("instance={id}");
    let refused = logged("consume refused")
        .into_iter()
        .filter(|(_, m)| m.split_whitespace().any(|word| word == this_instance))
        .count();
    assert_eq!(refused, cases.len(), "one refusal logged per bad call");
    assert_eq!(plugin.consume_raw(id, &topic, &meta, &good), 0);
    // Read past the count: the good call's rows once each.
    let ids: Vec<String> = block(read_log(&path, 3, Duration::from_secs(30)))
        .into_iter()
        .map(|row| row[0].clone())
        .collect();
    assert_eq!(ids, ["0", "1", "2"]);
    assert_eq!(plugin.close(id), 0);
}

#[test]
fn two_instances_run_side_by_side_and_a_duplicate_open_harms_neither() {
    let plugin = Plugin::load();
    let (a, b, dlq) = (
        unique_table("abi_a"),
        unique_table("abi_b"),
        unique_table("abi_dlq"),
    );
    let (id_a, id_b) = (next_id(), next_id());
    plugin.open_ok(id_a, &log_config(&a, &dlq));
    plugin.open_ok(id_b, &log_config(&b, &dlq));
    assert_eq!(
        plugin.open(id_a, &log_config(&b, &dlq).to_string()),
        -1,
        "duplicate id"
    );
    assert!(!logged(&format!("instance {id_a} is already open")).is_empty());
    assert_eq!(plugin.consume(id_a, "app", "a", JSON, &json_messages(0, 10)), 0);
    assert_eq!(plugin.consume(id_b, "app", "b", JSON, &json_messages(100, 5)), 0);
    // Read past the counts: each table's own rows, once each.
    let rows_a = block(read_log(&a, 10, Duration::from_secs(30)));
    let rows_b = block(read_log(&b, 5, Duration::from_secs(30)));
    assert_eq!(
        rows_a.iter().map(|r| r[0].clone()).collect::<Vec<_>>(),
        (0..10).map(|i| i.to_string()).collect::<Vec<_>>(),
        "the duplicate open did not redirect instance {id_a}"
    );
    assert_eq!(
        rows_b.iter().map(|r| r[0].as_str()).collect::<Vec<_>>(),
        ["100", "101", "102", "103", "104"]
    );
    assert_eq!(plugin.close(id_a), 0);
    assert_eq!(
        plugin.consume(id_b, "app", "b", JSON, &json_messages(105, 1)),
        0,
        "b outlives a"
    );
    assert_eq!(plugin.close(id_b), 0);
}

#[test]
fn concurrent_consumes_on_one_instance_all_land() {
    let plugin = Plugin::load();
    let (path, dlq) = (unique_table("abi_conc"), unique_table("abi_dlq"));
    let id = next_id();
    plugin.open_ok(id, &log_config(&path, &dlq));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            std::thread::spawn(move || {
                (0..5u64)
                    .map(|b| plugin.consume(id, "app", "t", JSON, &json_messages(t * 1000 + b * 20, 20)))
                    .collect::<Vec<i32>>()
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), vec![0; 5]);
    }
    let mut ids: Vec<u64> = block(read_log(&path, 400, Duration::from_secs(60)))
        .iter()
        .map(|r| r[0].parse().unwrap())
        .collect();
    ids.sort_unstable();
    let mut expected: Vec<u64> = (0..4).flat_map(|t| t * 1000..t * 1000 + 100).collect();
    expected.sort_unstable();
    assert_eq!(ids, expected, "every message exactly once");
    assert_eq!(plugin.close(id), 0);
}

/// What the runtime really does (`docs/runtime-contract.md`):
/// its Avro, Proto and FlatBuffer decoders hand over JSON bytes in batches
/// still tagged with the original schema; polls whose messages were all
/// dropped arrive empty; `close` comes twice for one id.
#[test]
fn json_tagged_avro_proto_or_flatbuffer_maps_as_json_and_empty_polls_and_double_closes_are_fine() {
    const PROTO: u32 = 3;
    const FLAT_BUFFER: u32 = 4;
    const AVRO: u32 = 5;
    let plugin = Plugin::load();
    let (path, dlq) = (unique_table("abi_tagged"), unique_table("abi_tagged_dlq"));
    let id = next_id();
    plugin.open_ok(id, &log_config(&path, &dlq));
    assert_eq!(plugin.consume(id, "app", "orders", JSON, &[]), 0, "an empty poll");
    for (i, schema) in [AVRO, PROTO, FLAT_BUFFER].into_iter().enumerate() {
        let from = i as u64 * 10;
        assert_eq!(
            plugin.consume(id, "app", "orders", schema, &json_messages(from, 10)),
            0
        );
    }
    assert_eq!(
        plugin.consume(
            id,
            "app",
            "orders",
            AVRO,
            &[TestMessage::text(30, "\u{1}\u{2}binary-avro")]
        ),
        0
    );
    let rows = block(read_log(&path, 30, Duration::from_secs(30)));
    let ids: Vec<String> = rows.iter().map(|r| r[0].clone()).collect();
    assert_eq!(ids, (0..30).map(|i| i.to_string()).collect::<Vec<_>>());
    let letters = block(read_log(&dlq, 1, Duration::from_secs(30)));
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0][3], "30");
    assert!(letters[0][8].contains("not valid JSON"), "{}", letters[0][8]);
    assert!(letters[0][8].contains("tagged Avro"), "{}", letters[0][8]);
    assert_eq!(plugin.close(id), 0);
    plugin.close_unopened(id);
    assert_eq!(
        plugin.consume(id, "app", "orders", JSON, &json_messages(40, 1)),
        -1,
        "closed for good"
    );
}
