//! `evolve_schema` with dynamic routing: rows are mapped onto the sink
//! table's columns, so a new field adds its column there, and each routed
//! table a batch writes to is given the sink table's columns it lacks;
//! one `auto_create_table` makes is created with them. The routing field
//! itself never becomes a column.

use std::time::Duration;

use fluss::metadata::DataTypes;
use iggy_connector_fluss_sink::TablePath;
use integration_tests::fluss_cluster::{block, create_bucketed_log_table, read_log, unique_table};
use integration_tests::plugin::{Plugin, TestMessage, logged};
use serde_json::json;

use super::{ERROR, KIND, OFFSET, columns_of, config, names};

/// Each row's id and `extra` (empty for NULL or no such column), by id.
fn ids_and_extras(path: &TablePath, expected: usize) -> Vec<(i64, String)> {
    let mut rows: Vec<(i64, String)> = block(read_log(path, expected, Duration::from_secs(30)))
        .iter()
        .map(|r| {
            (
                r[0].parse().expect("an id"),
                r.get(2).cloned().unwrap_or_default(),
            )
        })
        .collect();
    rows.sort();
    rows
}

#[test]
fn routed_tables_take_the_columns_new_fields_add_and_one_created_has_them() {
    let (path, dlq) = (unique_table("evolve_route"), unique_table("evolve_route_dlq"));
    let [a, b, c] = ["a", "b", "c"].map(|t| unique_table(&format!("evolve_route_{t}")));
    // Table c exists with other columns than the sink's: it cannot follow.
    block(create_bucketed_log_table(
        &c,
        &[("id", DataTypes::bigint()), ("other", DataTypes::string())],
        "id",
    ));
    let mut config = config(&path, &dlq);
    config["dynamic_routing"] = json!(true);
    config["auto_create_table"] = json!(true);
    config["allowed_tables"] = json!(["sink_it.evolve_route_*"]);
    let plugin = Plugin::load();
    let id = plugin.open_new(&config);
    let to = |table: Option<&TablePath>| {
        table
            .map(|t| format!(r#","fluss_table":"{t}""#))
            .unwrap_or_default()
    };
    // The first batch has no new field: even ids go to a (created like the
    // sink's table), odd ones to the sink's table.
    let first: Vec<TestMessage> = (0..10u64)
        .map(|i| {
            let table = (i % 2 == 0).then_some(&a);
            TestMessage::text(i, &format!(r#"{{"id":{i},"name":"n{i}"{}}}"#, to(table)))
        })
        .collect();
    plugin.consume_json_ok(id, "t", &first);
    assert_eq!(names(&columns_of(&a)), ["id", "name"]);
    // The second: every message has `extra`; by id % 4: a, the sink's
    // table, b (absent until now), c.
    let route = |i: u64| match i % 4 {
        0 => Some(&a),
        1 => None,
        2 => Some(&b),
        _ => Some(&c),
    };
    let second: Vec<TestMessage> = (10..30u64)
        .map(|i| {
            let payload = format!(r#"{{"id":{i},"name":"n{i}","extra":"e{i}"{}}}"#, to(route(i)));
            TestMessage::text(i, &payload)
        })
        .collect();
    plugin.consume_json_ok(id, "t", &second);
    assert_eq!(plugin.close(id), 0);

    for table in [&path, &a, &b] {
        assert_eq!(
            names(&columns_of(table)),
            ["id", "name", "extra"],
            "{table}: the new field's column, and no column for the routing field"
        );
    }
    assert_eq!(names(&columns_of(&c)), ["id", "other"], "c is left as it was");
    let expect = |ids: Vec<u64>| -> Vec<(i64, String)> {
        ids.into_iter()
            .map(|i| (i as i64, if i < 10 { String::new() } else { format!("e{i}") }))
            .collect()
    };
    let of_a: Vec<u64> = (0..10).step_by(2).chain((12..30).step_by(4)).collect();
    let of_sink: Vec<u64> = (1..10).step_by(2).chain((13..30).step_by(4)).collect();
    let of_b: Vec<u64> = (10..30).step_by(4).collect();
    assert_eq!(
        ids_and_extras(&a, of_a.len()),
        expect(of_a),
        "a: each of its rows once"
    );
    assert_eq!(
        ids_and_extras(&path, of_sink.len()),
        expect(of_sink),
        "the sink's table: each of its rows once"
    );
    assert_eq!(
        ids_and_extras(&b, of_b.len()),
        expect(of_b),
        "b: each of its rows once"
    );

    let of_c: Vec<i64> = (11..30).step_by(4).collect();
    let letters = block(read_log(&dlq, of_c.len(), Duration::from_secs(30)));
    let mut lettered: Vec<i64> = letters.iter().map(|l| l[OFFSET].parse().unwrap()).collect();
    lettered.sort();
    assert_eq!(lettered, of_c, "c's messages dead-lettered, each once");
    for letter in &letters {
        assert_eq!(letter[KIND], "table", "{letter:?}");
        assert!(
            letter[ERROR].starts_with(&format!("table {c}: evolve_schema cannot give it the columns"))
                && letter[ERROR].contains("must be the first of the sink table's"),
            "{letter:?}"
        );
    }
    assert!(
        !logged(&format!("table {a} changed: added column(s) extra of {path}")).is_empty(),
        "the change to a routed table is logged"
    );
}
