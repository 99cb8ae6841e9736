//! `evolve_schema`: the sink adds columns to its table itself, against a
//! real Fluss cluster (`scripts/fluss-local.sh start`) with the plugin
//! loaded through dlopen. A JSON field the table lacks adds a nullable
//! column, typed from its value, before its row is written, in message
//! order, on a log table (chunk by chunk) and a primary-key table; the
//! `columns` an existing table lacks are added at `open`, and one of
//! another type fails it; `max_table_columns` caps the table, and what
//! passes the cap is dead-lettered, each message once; two instances
//! adding the same column at once both go on. The tests fail, never skip,
//! when no cluster is reachable.

use std::collections::BTreeMap;
use std::time::Duration;

use fluss::metadata::DataTypes;
use fluss::row::{DataGetters, GenericRow, InternalRow};
use iggy_connector_fluss_sink::TablePath;
use integration_tests::fluss_cluster::{
    self, add_string_column, block, bootstrap, count_ids, create_bucketed_log_table, lookup, lookup_string,
    read_log, unique_table,
};
use integration_tests::plugin::{Plugin, TestMessage, logged};
use serde_json::json;

/// Tables made from the first batch's fields.
#[path = "schema_evolve/create.rs"]
mod create;

/// Routed tables (dynamic routing) given the columns new fields add.
#[path = "schema_evolve/routed.rs"]
mod routed;

/// The dead-letter table's `offset`, `error_kind` and `error` columns.
const OFFSET: usize = 3;
const KIND: usize = 7;
const ERROR: usize = 8;

/// A config for log table `path` (`id`, `name`, one bucket) that adds
/// columns for new fields, its dead letters in `dlq`, chunks of 10.
fn config(path: &TablePath, dlq: &TablePath) -> serde_json::Value {
    json!({
        "bootstrap_servers": bootstrap(),
        "database": path.database,
        "table": path.table,
        "columns": [
            {"name": "id", "type": "BIGINT", "nullable": false},
            {"name": "name", "type": "STRING"}
        ],
        "bucket_count": 1,
        "batch_size": 10,
        "evolve_schema": true,
        "dead_letter_table": dlq.to_string(),
        "delivery_timeout": "30s"
    })
}

/// Messages at offsets `ids`, with the payload `payload(id)` gives.
fn messages(ids: std::ops::Range<u64>, payload: impl Fn(u64) -> String) -> Vec<TestMessage> {
    ids.map(|id| TestMessage::text(id, &payload(id))).collect()
}

/// The table's columns in Fluss now: name and type.
fn columns_of(path: &TablePath) -> Vec<(String, String)> {
    block(fluss_cluster::columns_of(path))
}

fn names(columns: &[(String, String)]) -> Vec<&str> {
    columns.iter().map(|(n, _)| n.as_str()).collect()
}

#[test]
fn new_fields_add_columns_typed_from_their_values_and_rows_keep_their_order() {
    let (path, dlq) = (unique_table("evolve_log"), unique_table("evolve_log_dlq"));
    let plugin = Plugin::load();
    let id = plugin.open_new(&config(&path, &dlq));
    // Ids 0..25 have only the declared fields; from 25 on (inside the third
    // chunk of ten) six more, one of them null; in a later batch, from 40,
    // the null one has a value.
    let payload = |id: u64| match id {
        0..25 => format!(r#"{{"id":{id},"name":"n{id}"}}"#),
        25..40 => format!(
            r#"{{"id":{id},"name":"n{id}","score":{id}.5,"count":{id},"ok":true,"tags":["a",{id}],"meta":{{"k":{{"v":null}}}},"later":null}}"#
        ),
        _ => format!(r#"{{"id":{id},"name":"n{id}","later":"l{id}"}}"#),
    };
    plugin.consume_json_ok(id, "t", &messages(0..40, payload));
    assert!(
        !names(&columns_of(&path)).contains(&"later"),
        "a field that is only ever null adds nothing"
    );
    plugin.consume_json_ok(id, "t", &messages(40..50, payload));
    assert_eq!(plugin.close(id), 0);

    let columns = columns_of(&path);
    assert_eq!(
        columns,
        [
            ("id", "BIGINT NOT NULL"),
            ("name", "STRING"),
            ("score", "DOUBLE"),
            ("count", "BIGINT"),
            ("ok", "BOOLEAN"),
            ("tags", "STRING"),
            ("meta", "STRING"),
            ("later", "STRING"),
        ]
        .map(|(n, t)| (n.to_string(), t.to_string())),
        "the columns added, in the order their fields came, typed from their values"
    );
    let rows = block(read_log(&path, 50, Duration::from_secs(30)));
    let ids: Vec<i64> = rows.iter().map(|r| r[0].parse().expect("an id")).collect();
    assert_eq!(
        ids,
        (0..50).collect::<Vec<i64>>(),
        "every message once, in order (one bucket)"
    );
    for row in &rows {
        let id: i64 = row[0].parse().unwrap();
        let cell = |i: usize| row.get(i).cloned().unwrap_or_default();
        match id {
            0..25 => assert!((2..8).all(|i| cell(i).is_empty()), "id {id}: {row:?}"),
            25..40 => {
                assert_eq!(cell(2), format!("{id}.5"), "score of {id}");
                assert_eq!(cell(3), id.to_string(), "count of {id}");
                assert_eq!(cell(4), "true", "ok of {id}");
                assert_eq!(cell(5), format!(r#"["a",{id}]"#), "tags of {id}");
                assert_eq!(cell(6), r#"{"k":{"v":null}}"#, "meta of {id}");
                assert_eq!(cell(7), "", "later of {id}, null");
            }
            _ => assert_eq!(cell(7), format!("l{id}"), "later of {id}"),
        }
    }
    let added = logged(&format!(
        "table {path} changed: added column(s) score, count, ok, tags, meta"
    ));
    assert!(!added.is_empty(), "the change is logged");
    assert!(
        !logged(&format!("table {path} changed: added column(s) later")).is_empty(),
        "a field added later is logged"
    );
}

#[test]
fn a_later_value_its_column_does_not_take_is_dead_lettered_as_schema() {
    // On each of the JSON mapping's paths (Arrow columns, rows routed by a
    // field, a bucketed log table's rows one by one, a primary-key table's
    // rows): `n` becomes BIGINT from its first value; a later string is
    // the same dead letter, naming the column, its type and the value.
    for path_name in ["columns", "routed", "bucketed", "primary_key"] {
        let (path, dlq) = (
            unique_table("evolve_conflict"),
            unique_table("evolve_conflict_dlq"),
        );
        let mut config = config(&path, &dlq);
        match path_name {
            "routed" => {
                config["dynamic_routing"] = json!(true);
                config["allowed_tables"] = json!(["sink_it.evolve_conflict_*"]);
            }
            "bucketed" => block(create_bucketed_log_table(
                &path,
                &[("id", DataTypes::bigint()), ("name", DataTypes::string())],
                "id",
            )),
            "primary_key" => {
                config["table_type"] = json!("primary_key");
                config["primary_key_columns"] = json!(["id"]);
            }
            _ => {}
        }
        let plugin = Plugin::load();
        let id = plugin.open_new(&config);
        let first = TestMessage::text(0, r#"{"id":0,"name":"a","n":5}"#);
        plugin.consume_json_ok(id, "t", &[first]);
        let later = [
            TestMessage::text(1, r#"{"id":1,"name":"b","n":"many"}"#),
            TestMessage::text(2, r#"{"id":2,"name":"c","n":7}"#),
        ];
        plugin.consume_json_ok(id, "t", &later);
        assert_eq!(plugin.close(id), 0);
        assert_eq!(
            columns_of(&path)[2],
            ("n".to_string(), "BIGINT".to_string()),
            "{path_name}"
        );
        if path_name == "primary_key" {
            let names: Vec<Option<String>> = (0..3).map(|k| block(lookup_string(&path, k, 1))).collect();
            assert_eq!(names, [Some("a".into()), None, Some("c".into())], "{path_name}");
        } else {
            let ids = count_ids(&block(read_log(&path, 2, Duration::from_secs(30))));
            assert_eq!(ids, BTreeMap::from([(0, 1), (2, 1)]), "{path_name}");
        }
        let letters = block(read_log(&dlq, 1, Duration::from_secs(30)));
        let letters: Vec<(&str, &str, &str)> = letters
            .iter()
            .map(|l| (l[OFFSET].as_str(), l[KIND].as_str(), l[ERROR].as_str()))
            .collect();
        assert_eq!(
            letters,
            [("1", "schema", r#"column `n` (BIGINT): "many" is not a BIGINT"#)],
            "{path_name}"
        );
    }
}

/// `(name, extra)` of the primary-key row keyed `id`, `None` for NULL.
fn keyed_row(path: &TablePath, id: i64) -> Option<(Option<String>, Option<String>)> {
    let mut key = GenericRow::new(1);
    key.set_field(0, id);
    block(lookup(path, &key, |row| {
        let text = |i: usize| {
            (row.get_field_count() > i && !row.is_null_at(i).unwrap())
                .then(|| row.get_string(i).unwrap().to_string())
        };
        (text(1), text(2))
    }))
}

#[test]
fn on_a_primary_key_table_a_new_field_keeps_the_upserts_in_order() {
    let (path, dlq) = (unique_table("evolve_pk"), unique_table("evolve_pk_dlq"));
    let mut config = config(&path, &dlq);
    config["table_type"] = json!("primary_key");
    config["write_mode"] = json!("upsert");
    config["primary_key_columns"] = json!(["id"]);
    let plugin = Plugin::load();
    let id = plugin.open_new(&config);
    // Key 1 is written three times in one batch: without `extra`, with it
    // (the first new field), and without it again: the last one wins.
    let payloads = [
        r#"{"id":1,"name":"first"}"#,
        r#"{"id":2,"name":"two","extra":"x2"}"#,
        r#"{"id":1,"name":"second","extra":"x1"}"#,
        r#"{"id":1,"name":"third"}"#,
        r#"{"id":3,"name":"three","extra":"x3"}"#,
    ];
    let batch: Vec<TestMessage> = (payloads.iter().enumerate())
        .map(|(i, p)| TestMessage::text(i as u64, p))
        .collect();
    plugin.consume_json_ok(id, "t", &batch);
    assert_eq!(plugin.close(id), 0);
    assert_eq!(names(&columns_of(&path)), ["id", "name", "extra"]);
    assert_eq!(
        keyed_row(&path, 1),
        Some((Some("third".into()), None)),
        "the last upsert of key 1"
    );
    assert_eq!(keyed_row(&path, 2), Some((Some("two".into()), Some("x2".into()))));
    assert_eq!(
        keyed_row(&path, 3),
        Some((Some("three".into()), Some("x3".into())))
    );
}

#[test]
fn max_table_columns_dead_letters_each_field_past_it_once_and_writes_the_rest() {
    let (path, dlq) = (unique_table("evolve_cap"), unique_table("evolve_cap_dlq"));
    let mut config = config(&path, &dlq);
    config["max_table_columns"] = json!(4);
    let plugin = Plugin::load();
    let id = plugin.open_new(&config);
    // Every third message has a field of its own: f0, f3, ... f57; the
    // first two fit (4 columns), the others cannot.
    let payload = |id: u64| match id % 3 {
        0 => format!(r#"{{"id":{id},"name":"n{id}","f{id}":"v{id}"}}"#),
        _ => format!(r#"{{"id":{id},"name":"n{id}"}}"#),
    };
    const TOTAL: u64 = 60;
    for from in (0..TOTAL).step_by(20) {
        plugin.consume_json_ok(id, "t", &messages(from..from + 20, payload));
    }
    assert_eq!(plugin.close(id), 0);

    assert_eq!(names(&columns_of(&path)), ["id", "name", "f0", "f3"]);
    let written = count_ids(&block(read_log(&path, 42, Duration::from_secs(30))));
    let letters = block(read_log(&dlq, 18, Duration::from_secs(30)));
    let mut lettered: BTreeMap<i64, usize> = BTreeMap::new();
    for letter in &letters {
        let offset: i64 = letter[OFFSET].parse().expect("an offset");
        *lettered.entry(offset).or_default() += 1;
        assert_eq!(letter[KIND], "schema", "{letter:?}");
        assert_eq!(
            letter[ERROR],
            format!(
                "field `f{offset}` needs a new column, but table {path} may not have more than \
                 max_table_columns = 4 columns"
            )
        );
    }
    for id in 0..TOTAL as i64 {
        let (w, l) = (
            written.get(&id).copied().unwrap_or(0),
            lettered.get(&id).copied().unwrap_or(0),
        );
        let past_cap = id % 3 == 0 && id > 3;
        assert_eq!(
            (w, l),
            if past_cap { (0, 1) } else { (1, 0) },
            "id {id}: written {w} times, dead-lettered {l} times"
        );
    }
    assert_eq!(
        written.len() + lettered.len(),
        TOTAL as usize,
        "no id outside 0..{TOTAL}"
    );
}

#[test]
fn two_instances_adding_the_same_column_both_go_on() {
    let (path, dlq) = (unique_table("evolve_race"), unique_table("evolve_race_dlq"));
    let plugin = Plugin::load();
    // Two runtimes: each its own spool; neither looks at the table's
    // schema by itself during the test.
    let instance = |name: &str| {
        let mut config = config(&path, &dlq);
        let dir = std::env::temp_dir().join(format!("{}-{name}-{}", path.table, std::process::id()));
        config["spool"] = json!({"path": dir});
        config["schema_refresh_interval"] = json!("1h");
        plugin.open_new(&config)
    };
    let (a, b) = (instance("a"), instance("b"));
    let payload = |id: u64| match id {
        0..200 => format!(r#"{{"id":{id},"name":"n{id}","extra":"e{id}"}}"#),
        _ => format!(r#"{{"id":{id},"name":"n{id}","extra":"e{id}","more":"m{id}"}}"#),
    };
    // Both add `extra` at once.
    let start = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        for (instance, ids) in [(a, 0..100), (b, 100..200)] {
            let start = &start;
            s.spawn(move || {
                start.wait();
                plugin.consume_json_ok(instance, "t", &messages(ids, payload));
            });
        }
    });
    // `a` adds `more`; then `b`, which has not seen it, asks for it too:
    // Fluss refuses (the column exists), and `b` takes the one `a` added.
    plugin.consume_json_ok(a, "t", &messages(200..250, payload));
    plugin.consume_json_ok(b, "t", &messages(250..300, payload));
    assert_eq!((plugin.close(a), plugin.close(b)), (0, 0));
    assert_eq!(names(&columns_of(&path)), ["id", "name", "extra", "more"]);
    assert!(
        !logged(&format!(
            "table {path} already has column(s) more for new JSON fields"
        ))
        .is_empty(),
        "the instance that asked second took the column the first added"
    );
    let rows = block(read_log(&path, 300, Duration::from_secs(30)));
    let counts = count_ids(&rows);
    assert!(
        counts.len() == 300 && counts.values().all(|n| *n == 1),
        "every id once: {} ids, repeated {:?}",
        counts.len(),
        counts.iter().filter(|(_, n)| **n > 1).collect::<Vec<_>>()
    );
    for row in &rows {
        let id: u64 = row[0].parse().unwrap();
        assert_eq!(row[2], format!("e{id}"), "{row:?}");
        if id >= 200 {
            assert_eq!(row[3], format!("m{id}"), "{row:?}");
        }
    }
}

#[test]
fn declared_columns_an_existing_table_lacks_are_added_at_open_and_another_type_fails_it() {
    let (path, dlq) = (unique_table("evolve_open"), unique_table("evolve_open_dlq"));
    let plugin = Plugin::load();
    // The table made as (id, name), then `extra` added by another client.
    let id = plugin.open_new(&config(&path, &dlq));
    assert_eq!(plugin.close(id), 0);
    block(add_string_column(&path, "extra"));

    let mut declared = config(&path, &dlq);
    declared["columns"] = json!([
        {"name": "id", "type": "BIGINT", "nullable": false},
        {"name": "name", "type": "STRING"},
        {"name": "extra", "type": "STRING"},
        {"name": "amount", "type": "DECIMAL(10, 2)"},
        {"name": "at", "type": "TIMESTAMP_LTZ(3)"}
    ]);
    let id = plugin.open_new(&declared);
    plugin.consume_json_ok(
        id,
        "t",
        &[TestMessage::text(
            0,
            r#"{"id":1,"name":"a","amount":"2.50","at":"2026-01-02T03:04:05Z"}"#,
        )],
    );
    assert_eq!(plugin.close(id), 0);
    assert_eq!(
        columns_of(&path)[3..],
        [
            ("amount".to_string(), "DECIMAL(10, 2)".to_string()),
            ("at".to_string(), "TIMESTAMP_LTZ(3)".to_string())
        ]
    );
    let rows = block(read_log(&path, 1, Duration::from_secs(30)));
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0][3], "2.50");

    let mut clash = declared.clone();
    clash["columns"][2] = json!({"name": "extra", "type": "BIGINT"});
    let id = integration_tests::plugin::next_id();
    assert_ne!(
        plugin.open(id, &clash.to_string()),
        0,
        "a column of another type fails open"
    );
    plugin.close_unopened(id);
    let said = logged("column `extra` is declared BIGINT but the table has it as STRING");
    assert!(!said.is_empty(), "open says which column and both types");
}

#[test]
fn a_field_whose_name_fluss_refuses_dead_letters_its_message_naming_it() {
    let (path, dlq) = (
        unique_table("evolve_bad_name"),
        unique_table("evolve_bad_name_dlq"),
    );
    let plugin = Plugin::load();
    let id = plugin.open_new(&config(&path, &dlq));
    let payloads = [
        r#"{"id":0,"name":"a"}"#.to_string(),
        format!(r#"{{"id":1,"name":"b","{}":"x"}}"#, BAD_NAME),
        r#"{"id":2,"name":"c","fine":"y"}"#.to_string(),
    ];
    let batch: Vec<TestMessage> = (payloads.iter().enumerate())
        .map(|(i, p)| TestMessage::text(i as u64, p))
        .collect();
    plugin.consume_json_ok(id, "t", &batch);
    assert_eq!(plugin.close(id), 0);
    assert_eq!(names(&columns_of(&path)), ["id", "name", "fine"]);
    let rows = block(read_log(&path, 2, Duration::from_secs(30)));
    let ids: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(ids, ["0", "2"]);
    let letters = block(read_log(&dlq, 1, Duration::from_secs(30)));
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(
        (letters[0][OFFSET].as_str(), letters[0][KIND].as_str()),
        ("1", "schema")
    );
    let error = &letters[0][ERROR];
    assert!(
        error.starts_with(&format!(
            "Fluss refused to add column `{BAD_NAME}` to table {path}: "
        )),
        "{error}"
    );
}

/// A field name Fluss refuses as a column's.
const BAD_NAME: &str = "";
