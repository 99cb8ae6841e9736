//! One case of each `error_kind`, on every path its refusal can arise on:
//! a message that cannot be written is dead-lettered with the same kind
//! and the same words whichever producer made its rows (the JSON mapping,
//! a transform, Arrow IPC) and whichever send takes them. `mapping` and
//! `schema` are held by the tests beside this module; `write` (Fluss
//! refusing a batch for good) needs the fault proxy and is held by
//! `faults`.

use std::time::Duration;

use fluss::metadata::DataTypes;
use iggy_connector_fluss_sink::TablePath;
use integration_tests::fluss_cluster::{
    block, bootstrap, create_bucketed_log_table, read_log, read_partition, unique_table,
};
use integration_tests::{component, test_cache_dir};
use serde_json::{Value, json};

use super::{consume, consume_and_read, only_letter};

/// The table no config below may write: rows routed to it are refused.
const ELSEWHERE: &str = "kinds_elsewhere";

/// A config for `path` with `columns`, its dead letters in `dlq`.
fn config(path: &TablePath, dlq: &TablePath, columns: Value) -> Value {
    json!({
        "bootstrap_servers": bootstrap(),
        "database": path.database,
        "table": path.table,
        "columns": columns,
        "dead_letter_table": dlq.to_string(),
        "delivery_timeout": "60s"
    })
}

/// A path's table and its dead-letter table, named for `prefix`.
fn fresh_tables(prefix: &str) -> (TablePath, TablePath) {
    (unique_table(prefix), unique_table(&format!("{prefix}_dlq")))
}

/// Notes `path_name`'s `letter` (offset, kind, text) in `seen`, the name
/// of its table `path` masked as `TABLE`, once it is message `offset`'s.
fn note(
    seen: &mut Vec<(&'static str, String, String)>,
    path_name: &'static str,
    path: &TablePath,
    letter: (String, String, String),
    offset: &str,
) {
    assert_eq!(letter.0, offset, "{path_name}: the letter is message {offset}'s");
    seen.push((path_name, letter.1, letter.2.replace(&path.to_string(), "TABLE")));
}

/// Asserts every path's letter (path name, kind, text) is `kind` with the
/// first path's text, which `text_holds` accepts.
fn same_letter_everywhere(seen: &[(&str, String, String)], kind: &str, text_holds: impl Fn(&str) -> bool) {
    let (_, first_kind, first_text) = &seen[0];
    assert_eq!(first_kind, kind, "{seen:?}");
    assert!(text_holds(first_text), "{seen:?}");
    for (path_name, other_kind, other_text) in &seen[1..] {
        assert_eq!(
            (other_kind, other_text),
            (first_kind, first_text),
            "{path_name} against {}: {seen:?}",
            seen[0].0
        );
    }
}

/// A row routed to a table outside `allowed_tables` is dead-lettered as
/// `table`, in the same words, whether the JSON mapping routed it (onto a
/// log table or a primary-key table) or a transform did.
#[test]
fn a_row_routed_to_a_table_not_allowed_is_the_same_dead_letter_on_every_path() {
    let mut seen = Vec::new();
    for path_name in ["json_log", "json_primary_key", "transform"] {
        let (path, dlq) = fresh_tables("kinds_route");
        let elsewhere = format!("{}.{ELSEWHERE}", path.database);
        let mut config = config(
            &path,
            &dlq,
            json!([
                {"name": "id", "type": "BIGINT", "nullable": false},
                {"name": "tenant", "type": "STRING"}
            ]),
        );
        config["allowed_tables"] = json!([path.to_string()]);
        let route = |id: u64, to: &str| match path_name {
            // The tenant router writes `<database>.<prefix><tenant>`, the
            // prefix empty here: a tenant names its table.
            "transform" => format!(r#"{{"id":{id},"tenant":"{}"}}"#, to.split_once('.').unwrap().1),
            _ => format!(r#"{{"id":{id},"tenant":"t","fluss_table":"{to}"}}"#),
        };
        match path_name {
            "transform" => {
                config["transform"] = json!({
                    "path": component("tenant-router"),
                    "cache_dir": test_cache_dir(),
                    "config": {"prefix": ""}
                });
            }
            "json_primary_key" => {
                config["dynamic_routing"] = json!(true);
                config["table_type"] = json!("primary_key");
                config["primary_key_columns"] = json!(["id"]);
            }
            _ => config["dynamic_routing"] = json!(true),
        }
        let own = path.to_string();
        let payloads = [route(0, &own), route(1, &elsewhere), route(2, &own)];
        let payloads: Vec<&str> = payloads.iter().map(String::as_str).collect();
        let letter = if path_name == "json_primary_key" {
            consume(&config, &payloads);
            only_letter(&dlq)
        } else {
            let (ids, letter) = consume_and_read(&config, &payloads, &path, &dlq);
            assert_eq!(ids, ["0", "2"], "{path_name}: every row allowed, once");
            letter
        };
        note(&mut seen, path_name, &path, letter, "1");
    }
    same_letter_everywhere(&seen, "table", |text| text.contains(ELSEWHERE));
}

/// A NULL in a nullable partition-key column names no partition: its
/// message is dead-lettered as `partition`, in the same words, whether the
/// JSON mapping made the row (Arrow columns cut by partition, or a routed
/// row) or a transform did.
#[test]
fn a_null_partition_key_is_the_same_dead_letter_on_every_path() {
    let mut seen = Vec::new();
    for path_name in ["json_columns", "json_routed", "transform"] {
        let (path, dlq) = fresh_tables("kinds_part");
        let mut config = config(
            &path,
            &dlq,
            json!([
                {"name": "id", "type": "BIGINT", "nullable": false},
                {"name": "region", "type": "STRING"}
            ]),
        );
        config["partition_keys"] = json!(["region"]);
        config["auto_create_table"] = json!(true);
        match path_name {
            "json_routed" => {
                config["dynamic_routing"] = json!(true);
                config["allowed_tables"] = json!([path.to_string()]);
            }
            "transform" => {
                config["transform"] = json!({
                    "path": component("json-to-row"),
                    "cache_dir": test_cache_dir()
                });
            }
            _ => {}
        }
        let payloads = [
            r#"{"id":0,"region":"eu"}"#,
            r#"{"id":1,"region":null}"#,
            r#"{"id":2,"region":"eu"}"#,
        ];
        consume(&config, &payloads);
        let rows = block(read_partition(&path, "eu", 2, Duration::from_secs(30)));
        let ids: Vec<&str> = rows.iter().map(|row| row[0].as_str()).collect();
        assert_eq!(ids, ["0", "2"], "{path_name}: every row with a partition, once");
        note(&mut seen, path_name, &path, only_letter(&dlq), "1");
    }
    same_letter_everywhere(&seen, "partition", |text| text.contains("NULL"));
}

/// A transform that fails on one message (the evil guest's `panic`) has
/// that message dead-lettered as `transform`, in the same words, whether
/// its chunk is made into Arrow columns beside the transform or its rows
/// are sent one by one (a bucketed log table).
#[test]
fn a_transform_failing_on_a_message_is_the_same_dead_letter_on_every_path() {
    let mut seen = Vec::new();
    for path_name in ["columns", "bucketed"] {
        let (path, dlq) = fresh_tables("kinds_panic");
        if path_name == "bucketed" {
            block(create_bucketed_log_table(
                &path,
                &[("offset", DataTypes::bigint())],
                "offset",
            ));
        }
        let mut config = config(
            &path,
            &dlq,
            json!([{"name": "offset", "type": "BIGINT", "nullable": false}]),
        );
        config["transform"] = json!({
            "path": component("evil"),
            "cache_dir": test_cache_dir(),
            "config": {"mode": "panic"}
        });
        let (offsets, letter) = consume_and_read(&config, &["a", "poison", "c"], &path, &dlq);
        assert_eq!(
            offsets,
            ["0", "2"],
            "{path_name}: every other message's row, once"
        );
        note(&mut seen, path_name, &path, letter, "1");
    }
    same_letter_everywhere(&seen, "transform", |text| text.contains("evil panic on offset 1"));
}

/// An Arrow IPC payload that is not Arrow IPC is dead-lettered as
/// `arrow_ipc`, in the same words, whether its table is appended whole or
/// cut by partition.
#[test]
fn a_payload_that_is_not_arrow_ipc_is_the_same_dead_letter_on_every_path() {
    let mut seen = Vec::new();
    for path_name in ["log", "partitioned"] {
        let (path, dlq) = fresh_tables("kinds_ipc");
        let mut config = config(
            &path,
            &dlq,
            json!([
                {"name": "id", "type": "BIGINT", "nullable": false},
                {"name": "region", "type": "STRING"}
            ]),
        );
        config["payload_format"] = json!("arrow_ipc");
        if path_name == "partitioned" {
            config["partition_keys"] = json!(["region"]);
        }
        consume(&config, &["not arrow ipc"]);
        note(&mut seen, path_name, &path, only_letter(&dlq), "0");
    }
    same_letter_everywhere(&seen, "arrow_ipc", |text| !text.is_empty());
}

/// Nothing is written for a message whose letter is read: the dead-letter
/// read-backs above go past their one letter, and the tables are read past
/// the rows that fit, so a message both written and dead-lettered fails
/// its test. This guards the helper the tests share.
#[test]
fn the_letter_reader_sees_a_second_letter() {
    let (path, dlq) = fresh_tables("kinds_two");
    let config = config(
        &path,
        &dlq,
        json!([{"name": "id", "type": "BIGINT", "nullable": false}]),
    );
    consume(&config, &[r#"{"id":"x"}"#, r#"{"id":"y"}"#]);
    let letters = block(read_log(&dlq, 1, Duration::from_secs(30)));
    assert_eq!(
        letters.len(),
        2,
        "both letters are read, not the first only: {letters:?}"
    );
}
