//! A table that does not exist, without `columns`, is created from the
//! fields of the first batch that can make it.

use std::time::Duration;

use integration_tests::fluss_cluster::{block, read_log, unique_table};
use integration_tests::plugin::{Plugin, TestMessage, logged};
use serde_json::json;

use super::{ERROR, KIND, OFFSET, columns_of, config, keyed_row};

#[test]
fn an_absent_table_is_created_from_the_first_batchs_fields() {
    let (path, dlq) = (unique_table("evolve_create"), unique_table("evolve_create_dlq"));
    let mut config = config(&path, &dlq);
    config.as_object_mut().unwrap().remove("columns");
    config["include_metadata"] = json!(true);
    let plugin = Plugin::load();
    let id = plugin.open_new(&config);
    // The first batch: one message without a field of value, then fields
    // coming one message after another.
    let payloads = [
        r#"{"nothing":null}"#,
        r#"{"id":1,"name":"a"}"#,
        r#"{"id":2,"name":"b","score":2.5,"tags":["x"]}"#,
    ];
    let batch: Vec<TestMessage> = (payloads.iter().enumerate())
        .map(|(i, p)| TestMessage::text(i as u64, p))
        .collect();
    plugin.consume_json_ok(id, "t", &batch);
    plugin.consume_json_ok(id, "t", &[TestMessage::text(3, r#"{"id":3,"late":true}"#)]);
    assert_eq!(plugin.close(id), 0);
    let columns = columns_of(&path);
    assert_eq!(
        columns,
        [
            ("id", "BIGINT"),
            ("name", "STRING"),
            ("score", "DOUBLE"),
            ("tags", "STRING"),
            ("iggy_stream", "STRING"),
            ("iggy_topic", "STRING"),
            ("iggy_partition", "INT"),
            ("iggy_offset", "BIGINT"),
            ("iggy_timestamp", "TIMESTAMP_LTZ(6)"),
            ("iggy_message_id", "STRING"),
            ("late", "BOOLEAN"),
        ]
        .map(|(n, t)| (n.to_string(), t.to_string())),
        "the first batch's fields, then the metadata columns, then a later field"
    );
    let rows = block(read_log(&path, 4, Duration::from_secs(30)));
    let summary: Vec<(String, String, String, String)> = rows
        .iter()
        .map(|r| {
            (
                r[0].clone(),
                r[1].clone(),
                r[7].clone(),
                r.get(10).cloned().unwrap_or_default(),
            )
        })
        .collect();
    let row = |id: &str, name: &str, offset: &str, late: &str| {
        (
            id.to_string(),
            name.to_string(),
            offset.to_string(),
            late.to_string(),
        )
    };
    assert_eq!(
        summary,
        [
            row("", "", "0", ""),
            row("1", "a", "1", ""),
            row("2", "b", "2", ""),
            row("3", "", "3", "true")
        ],
        "every message once, in order, with its metadata"
    );
    assert!(
        !logged(&format!(
            "table {path} created from the fields of the first batch"
        ))
        .is_empty()
    );
}

#[test]
fn a_primary_key_table_is_created_once_a_batch_has_its_key() {
    let (path, dlq) = (
        unique_table("evolve_create_pk"),
        unique_table("evolve_create_pk_dlq"),
    );
    let mut config = config(&path, &dlq);
    config.as_object_mut().unwrap().remove("columns");
    config["table_type"] = json!("primary_key");
    config["write_mode"] = json!("upsert");
    config["primary_key_columns"] = json!(["id"]);
    let plugin = Plugin::load();
    let id = plugin.open_new(&config);
    // A batch without the key cannot make the table: dead-lettered, named.
    plugin.consume_json_ok(id, "t", &[TestMessage::text(0, r#"{"name":"keyless"}"#)]);
    plugin.consume_json_ok(
        id,
        "t",
        &[
            TestMessage::text(1, r#"{"id":7,"name":"a","extra":"x"}"#),
            TestMessage::text(2, r#"{"id":7,"name":"b"}"#),
        ],
    );
    assert_eq!(plugin.close(id), 0);
    assert_eq!(
        columns_of(&path),
        [("id", "BIGINT NOT NULL"), ("name", "STRING"), ("extra", "STRING")]
            .map(|(n, t)| (n.to_string(), t.to_string()))
    );
    assert_eq!(
        keyed_row(&path, 7),
        Some((Some("b".into()), None)),
        "the last upsert of key 7"
    );
    let letters = block(read_log(&dlq, 1, Duration::from_secs(30)));
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(
        (letters[0][OFFSET].as_str(), letters[0][KIND].as_str()),
        ("0", "schema")
    );
    assert_eq!(
        letters[0][ERROR],
        format!(
            "table {path} does not exist yet and cannot be created from this batch (evolve_schema): \
             no message of the batch has a value for its key column `id`"
        )
    );
}
