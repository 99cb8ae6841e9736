//! One bad value, one dead letter: the same `error_kind` and the same text
//! whatever path the sink writes it by, through the dlopen'd plugin into
//! the real local Fluss. The JSON mapping's paths (Arrow columns of a log
//! table, routed rows, a bucketed log table's rows one by one, a
//! primary-key table's rows) refuse what does not fit as `mapping`; a
//! transform's rows that do not fit their table are `schema` on the path
//! that makes Arrow columns beside the transform and on the one that sends
//! rows one by one. `each_kind` holds the other kinds (`table`,
//! `partition`, `transform`, `arrow_ipc`) to the same. The tests fail,
//! never skip, when no cluster is reachable.

use std::time::Duration;

use fluss::metadata::DataTypes;
use iggy_connector_fluss_sink::TablePath;
use integration_tests::fluss_cluster::{
    block, bootstrap, create_bucketed_log_table, lookup_string, read_log, unique_table,
};
use integration_tests::plugin::{Plugin, TestMessage, log_config};
use integration_tests::{component, test_cache_dir};
use serde_json::json;

/// One case of each other kind, on every path it can arise on.
#[path = "error_kinds/each_kind.rs"]
mod each_kind;

/// The dead-letter table's `error_kind` and `error` columns.
const KIND: usize = 7;
const ERROR: usize = 8;

/// Opens an instance of `config`, consumes `payloads` (offsets 0..) and
/// closes it.
fn consume(config: &serde_json::Value, payloads: &[&str]) {
    let plugin = Plugin::load();
    let id = plugin.open_new(config);
    let messages: Vec<TestMessage> = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| TestMessage::text(i as u64, p))
        .collect();
    plugin.consume_json_ok(id, "events", &messages);
    assert_eq!(plugin.close(id), 0);
}

/// The one letter of the dead-letter table `dlq`, read past it: its
/// offset, kind and text.
fn only_letter(dlq: &TablePath) -> (String, String, String) {
    let letters = block(read_log(dlq, 1, Duration::from_secs(30)));
    assert_eq!(letters.len(), 1, "one dead letter, once: {letters:?}");
    let letter = &letters[0];
    (letter[3].clone(), letter[KIND].clone(), letter[ERROR].clone())
}

/// [`consume`], then the log table `path`'s first cells (sorted: a
/// bucketed table's rows come back bucket by bucket), read past the rows
/// expected, and [`only_letter`].
fn consume_and_read(
    config: &serde_json::Value,
    payloads: &[&str],
    path: &TablePath,
    dlq: &TablePath,
) -> (Vec<String>, (String, String, String)) {
    consume(config, payloads);
    let rows = block(read_log(path, payloads.len() - 1, Duration::from_secs(30)));
    let mut ids: Vec<String> = rows.into_iter().map(|row| row[0].clone()).collect();
    ids.sort();
    (ids, only_letter(dlq))
}

/// The id/name/amount columns of the JSON mapping's tests, the amount a
/// DECIMAL(4, 2).
fn id_name_amount() -> serde_json::Value {
    json!([
        {"name": "id", "type": "BIGINT", "nullable": false},
        {"name": "name", "type": "STRING"},
        {"name": "amount", "type": "DECIMAL(4, 2)"}
    ])
}

/// Consumes `payloads` (three messages, the second bad; `TABLE` stands
/// for the table written) on each of the JSON mapping's paths onto
/// [`id_name_amount`] columns: Arrow columns, routed rows, a bucketed
/// table's rows one by one, primary-key rows. Asserts the first and third
/// are written once each and the second is the one letter; returns each
/// path's letter (kind, text).
fn letters_on_every_json_path(payloads: &[&str]) -> Vec<(&'static str, String, String)> {
    let mut seen = Vec::new();
    for path_name in ["columns", "routed", "bucketed", "primary_key"] {
        let (path, dlq) = (unique_table("kinds_json"), unique_table("kinds_json_dlq"));
        let mut config = log_config(&path, &dlq);
        config["columns"] = id_name_amount();
        match path_name {
            "routed" => {
                config["dynamic_routing"] = json!(true);
                config["allowed_tables"] = json!([path.to_string()]);
            }
            "bucketed" => {
                block(create_bucketed_log_table(
                    &path,
                    &[
                        ("id", DataTypes::bigint()),
                        ("name", DataTypes::string()),
                        ("amount", DataTypes::decimal(4, 2)),
                    ],
                    "name",
                ));
            }
            "primary_key" => {
                config["table_type"] = json!("primary_key");
                config["primary_key_columns"] = json!(["id"]);
            }
            _ => {}
        }
        let payloads: Vec<String> = payloads
            .iter()
            .map(|p| p.replace("TABLE", &path.to_string()))
            .collect();
        let payloads: Vec<&str> = payloads.iter().map(String::as_str).collect();
        let (ids, letter) = if path_name == "primary_key" {
            // A primary-key table is read by key, not as a log.
            consume(&config, &payloads);
            let names: Vec<String> = (0..3)
                .filter_map(|key| block(lookup_string(&path, key, 1)))
                .collect();
            assert_eq!(
                names,
                ["a", "c"],
                "{path_name}: the rows that fit, and not the one that does not"
            );
            (vec!["0".into(), "2".into()], only_letter(&dlq))
        } else {
            consume_and_read(&config, &payloads, &path, &dlq)
        };
        assert_eq!(ids, ["0", "2"], "{path_name}: every row that fits, once");
        assert_eq!(letter.0, "1", "{path_name}: the letter is the bad message's");
        seen.push((path_name, letter.1, letter.2));
    }
    seen
}

/// Asserts every path's letter is `mapping`, in the words of the first,
/// which end with `ending`.
fn same_mapping_letter(seen: &[(&str, String, String)], ending: &str) {
    let (_, kind, text) = &seen[0];
    assert_eq!(kind, "mapping", "{seen:?}");
    assert!(text.ends_with(ending), "{seen:?}");
    for (path_name, other_kind, other_text) in &seen[1..] {
        assert_eq!(
            (other_kind, other_text),
            (kind, text),
            "{path_name} against columns: {seen:?}"
        );
    }
}

/// A decimal that rounds past its column's precision (`99.996` in
/// DECIMAL(4, 2)) is dead-lettered as `mapping`, in the same words, on
/// each of the JSON mapping's paths; the other messages are written once.
#[test]
fn a_decimal_past_its_precision_is_the_same_dead_letter_on_every_json_path() {
    let seen = letters_on_every_json_path(&[
        r#"{"id":0,"name":"a","amount":"1.50","fluss_table":"TABLE"}"#,
        r#"{"id":1,"name":"b","amount":"99.996","fluss_table":"TABLE"}"#,
        r#"{"id":2,"name":"c","amount":"99.99","fluss_table":"TABLE"}"#,
    ]);
    same_mapping_letter(&seen, "99.996 does not fit DECIMAL(4, 2)");
}

/// A value of the wrong JSON type for its column (a string where a
/// DECIMAL goes) is dead-lettered as `mapping`, in the same words, on
/// each of the JSON mapping's paths.
#[test]
fn a_value_not_of_its_columns_type_is_the_same_dead_letter_on_every_json_path() {
    let seen = letters_on_every_json_path(&[
        r#"{"id":0,"name":"a","amount":1.5,"fluss_table":"TABLE"}"#,
        r#"{"id":1,"name":"b","amount":true,"fluss_table":"TABLE"}"#,
        r#"{"id":2,"name":"c","amount":2,"fluss_table":"TABLE"}"#,
    ]);
    same_mapping_letter(&seen, "");
    assert!(
        seen[0].2.contains("amount"),
        "the text names the column: {seen:?}"
    );
}

/// A transform's row whose cell is not of its column's type (the evil
/// guest's `type-mismatch`: a string for a BIGINT) is dead-lettered as
/// `schema`, in the same words, whether its chunk is made into Arrow
/// columns beside the transform (a log table whose batches land whole) or
/// its rows are sent one by one (a bucketed log table).
#[test]
fn a_transforms_row_that_does_not_fit_is_the_same_dead_letter_on_every_path() {
    let mut seen = Vec::new();
    for path_name in ["columns", "bucketed"] {
        let (path, dlq) = (unique_table("kinds_guest"), unique_table("kinds_guest_dlq"));
        if path_name == "bucketed" {
            block(create_bucketed_log_table(
                &path,
                &[("offset", DataTypes::bigint())],
                "offset",
            ));
        }
        let config = json!({
            "bootstrap_servers": bootstrap(),
            "database": path.database,
            "table": path.table,
            "columns": [{"name": "offset", "type": "BIGINT", "nullable": false}],
            "dead_letter_table": dlq.to_string(),
            "delivery_timeout": "60s",
            "transform": {
                "path": component("evil"),
                "cache_dir": test_cache_dir(),
                "config": {"mode": "type-mismatch"}
            }
        });
        let payloads = ["a", "poison", "c"];
        let (offsets, letter) = consume_and_read(&config, &payloads, &path, &dlq);
        assert_eq!(offsets, ["0", "2"], "{path_name}: every row that fits, once");
        assert_eq!(letter.0, "1", "{path_name}: the letter is the poisoned message's");
        // Each path writes a table of its own: the text names it.
        seen.push((path_name, letter.1, letter.2.replace(&path.to_string(), "TABLE")));
    }
    let (_, kind, text) = &seen[0];
    assert_eq!(kind, "schema", "{seen:?}");
    assert_eq!(
        text, "table TABLE: column `offset` is BIGINT but the row has a STRING value",
        "{seen:?}"
    );
    assert_eq!((&seen[1].1, &seen[1].2), (kind, text), "{seen:?}");
}
