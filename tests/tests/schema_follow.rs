//! Tables that change under a running sink, against a real Fluss cluster
//! (`scripts/fluss-local.sh start`) and the plugin loaded through dlopen: a
//! column another client adds with `ALTER TABLE … ADD COLUMN` is written
//! within `schema_refresh_interval`, without a restart, with nothing lost
//! or repeated, by the JSON mapping (into a plain and a partitioned log
//! table), by a transform (initialised again with the new schema), and on a
//! primary-key table with partial updates.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fluss::row::{DataGetters, GenericRow, InternalRow};
use fluss_row_codec::RowKind;
use iggy_connector_fluss_sink::{DeadLetterKind, Deadline, JsonMapping, TablePath};
use integration_tests::fluss_cluster::{
    add_string_column, block, bootstrap, lookup, read_log, settings, unique_table, writer,
};
use integration_tests::plugin::{Plugin, TestMessage, logged};
use integration_tests::{component, table, test_cache_dir, text_batch};
use serde_json::json;

/// How often the sink looks at its tables' schemas in these tests.
const REFRESH: Duration = Duration::from_secs(1);

/// A sink config for `path` with `columns`, looking at its schema every
/// [`REFRESH`].
fn config(path: &TablePath, columns: serde_json::Value) -> serde_json::Value {
    json!({
        "bootstrap_servers": bootstrap(),
        "database": path.database,
        "table": path.table,
        "columns": columns,
        "schema_refresh_interval": format!("{}ms", REFRESH.as_millis()),
        "delivery_timeout": "30s"
    })
}

fn log_columns() -> serde_json::Value {
    json!([
        {"name": "id", "type": "BIGINT", "nullable": false},
        {"name": "name", "type": "STRING"}
    ])
}

/// Messages `ids`, each `{"id", "name", "region", "extra"}` (three
/// regions, for the partitioned table); offsets are the ids.
fn messages(ids: std::ops::Range<i64>) -> Vec<TestMessage> {
    ids.map(|id| {
        let region = id % 3;
        let payload = format!(r#"{{"id":{id},"name":"n{id}","region":"r{region}","extra":"e{id}"}}"#);
        TestMessage::text(id as u64, &payload)
    })
    .collect()
}

/// Writes a batch before the change, adds `extra`, then a batch every
/// 100 ms for `REFRESH` + 3 s; reads everything back and checks that every
/// id landed once, that no row before the change carries `extra`, and that
/// every batch sent `REFRESH` + 2 s after the change carries it. Returns
/// how long after the change the first batch with `extra` was sent.
fn follows_an_added_column(case: &str, config: serde_json::Value, path: &TablePath) -> Duration {
    // `extra` is added after the columns the config declares.
    let extra_at = config["columns"].as_array().expect("declared columns").len();
    const BATCH: i64 = 50;
    let plugin = Plugin::load();
    let id = plugin.open_new(&config);
    plugin.consume_json_ok(id, "t", &messages(0..BATCH));
    block(add_string_column(path, "extra"));
    let altered = Instant::now();
    // (first id, when the batch was sent after the change)
    let mut sent = Vec::new();
    let mut next = BATCH;
    while altered.elapsed() < REFRESH + Duration::from_secs(3) {
        sent.push((next, altered.elapsed()));
        plugin.consume_json_ok(id, "t", &messages(next..next + BATCH));
        next += BATCH;
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(plugin.close(id), 0, "{case}: close");

    let rows = block(read_log(path, next as usize, Duration::from_secs(30)));
    let mut extra_of: BTreeMap<i64, Vec<Option<String>>> = BTreeMap::new();
    for row in &rows {
        let id: i64 = row[0].parse().unwrap_or_else(|_| panic!("{case}: id of {row:?}"));
        // Rows written before the change may be read with the old width.
        let extra = row.get(extra_at).filter(|cell| !cell.is_empty()).cloned();
        extra_of.entry(id).or_default().push(extra);
    }
    let missing: Vec<i64> = (0..next).filter(|id| !extra_of.contains_key(id)).collect();
    let repeated: Vec<i64> = extra_of
        .iter()
        .filter(|(_, v)| v.len() > 1)
        .map(|(id, _)| *id)
        .collect();
    assert!(
        missing.is_empty() && repeated.is_empty() && extra_of.len() == next as usize,
        "{case}: every id once; missing {missing:?}, repeated {repeated:?}"
    );
    for id in 0..BATCH {
        assert_eq!(
            extra_of[&id],
            [None],
            "{case}: id {id}, written before the change"
        );
    }
    let mut first_with_extra = None;
    for &(first, after) in &sent {
        let carried: Vec<bool> = (first..first + BATCH)
            .map(|id| match &extra_of[&id][0] {
                Some(extra) => {
                    assert_eq!(*extra, format!("e{id}"), "{case}: id {id}'s extra");
                    true
                }
                None => false,
            })
            .collect();
        let all = carried.iter().all(|c| *c);
        assert!(
            all || !carried.iter().any(|c| *c),
            "{case}: the batch from id {first} carries extra in some rows only: {carried:?}"
        );
        if all {
            first_with_extra.get_or_insert(after);
        }
        if after >= REFRESH + Duration::from_secs(2) {
            assert!(
                all,
                "{case}: the batch from id {first}, sent {after:?} after the change, does not carry \
                 extra (schema_refresh_interval is {REFRESH:?}); log: {:?}",
                logged(&format!("instance={id}"))
            );
        }
    }
    let lag = first_with_extra.unwrap_or_else(|| panic!("{case}: no row carries extra"));
    let followed = logged(&format!("table {path} changed in Fluss: added column(s) extra"));
    assert!(!followed.is_empty(), "{case}: the change is logged");
    eprintln!("{case}: first batch with the new column sent {lag:?} after the change");
    lag
}

#[test]
fn the_json_mapping_writes_a_column_added_to_its_log_table_without_a_restart() {
    let path = unique_table("follow_json");
    follows_an_added_column("json", config(&path, log_columns()), &path);
}

#[test]
fn a_partitioned_log_table_takes_a_column_added_to_it() {
    let path = unique_table("follow_parts");
    let mut config = config(
        &path,
        json!([
            {"name": "id", "type": "BIGINT", "nullable": false},
            {"name": "name", "type": "STRING"},
            {"name": "region", "type": "STRING", "nullable": false}
        ]),
    );
    config["partition_keys"] = json!(["region"]);
    follows_an_added_column("partitioned", config, &path);
}

#[test]
fn a_transform_is_initialised_again_with_a_column_added_to_its_table() {
    let path = unique_table("follow_wasm");
    let mut config = config(&path, log_columns());
    config["transform"] = json!({
        "path": component("json-to-row"),
        "cache_dir": test_cache_dir(),
    });
    follows_an_added_column("transform", config, &path);
}

/// STRING columns `1..=count` of the row keyed `id`, `None` for NULL.
async fn cells(path: &TablePath, id: i64, count: usize) -> Option<Vec<Option<String>>> {
    let mut key = GenericRow::new(1);
    key.set_field(0, id);
    lookup(path, &key, |row| {
        (1..=count)
            .map(|i| (!row.is_null_at(i).unwrap()).then(|| row.get_string(i).unwrap().to_string()))
            .collect()
    })
    .await
}

/// `(name, extra)` of the row keyed `id`, `None` for NULL.
async fn keyed(path: &TablePath, id: i64) -> Option<(Option<String>, Option<String>)> {
    let mut key = GenericRow::new(1);
    key.set_field(0, id);
    lookup(path, &key, |row| {
        let text = |i: usize| {
            (row.get_field_count() > i && !row.is_null_at(i).unwrap())
                .then(|| row.get_string(i).unwrap().to_string())
        };
        (text(1), text(2))
    })
    .await
}

#[test]
fn partial_updates_of_a_primary_key_table_write_a_column_added_to_it() {
    let path = unique_table("follow_keyed");
    let mut config = config(
        &path,
        json!([
            {"name": "id", "type": "BIGINT", "nullable": false},
            {"name": "name", "type": "STRING"}
        ]),
    );
    config["table_type"] = json!("primary_key");
    config["primary_key_columns"] = json!(["id"]);
    config["partial_update"] = json!(true);
    let plugin = Plugin::load();
    let id = plugin.open_new(&config);
    plugin.consume_json_ok(id, "t", &[TestMessage::text(0, r#"{"id":1,"name":"ann"}"#)]);
    block(add_string_column(&path, "extra"));
    let altered = Instant::now();
    // A partial update of the new column alone, until it is written (the
    // name stays as it was).
    let mut offset = 1;
    let lag = loop {
        let sent = altered.elapsed();
        plugin.consume_json_ok(id, "t", &[TestMessage::text(offset, r#"{"id":1,"extra":"x"}"#)]);
        offset += 1;
        if block(keyed(&path, 1)) == Some((Some("ann".into()), Some("x".into()))) {
            break sent;
        }
        assert!(
            sent < REFRESH + Duration::from_secs(2),
            "the new column is still not written {sent:?} after the change: {:?}; log: {:?}",
            block(keyed(&path, 1)),
            logged(&format!("instance={id}"))
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // A whole row after the change carries both.
    plugin.consume_json_ok(
        id,
        "t",
        &[TestMessage::text(offset, r#"{"id":2,"name":"bo","extra":"y"}"#)],
    );
    assert_eq!(
        block(keyed(&path, 2)),
        Some((Some("bo".into()), Some("y".into())))
    );
    assert_eq!(plugin.close(id), 0);
    eprintln!("primary key, partial update: the new column written {lag:?} after the change");
}

/// Rows made against a table's columns before one was added (a
/// transform's made before it was initialised again, a spooled batch's)
/// are written once the writer has looked again, with NULL in the new
/// column; rows made against the new columns carry it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_made_before_a_column_was_added_are_written_with_null_in_it() {
    let path = unique_table("follow_writer");
    let w = writer(settings()).await;
    let columns = [("id", "BIGINT", false), ("name", "STRING", true)];
    let before = w
        .ensure_table(&table(&path.to_string(), &columns, &[]))
        .await
        .unwrap();
    let look = || Deadline::after(Duration::from_secs(10));
    assert!(w.follow_tables(look()).await.is_empty(), "nothing changed yet");
    add_string_column(&path, "extra").await;

    let changes = w.follow_tables(look()).await;
    assert_eq!(changes.len(), 1, "{changes:?}");
    let change = &changes[0];
    assert_eq!(
        (&change.table, change.added.as_slice(), change.remade),
        (&path, &["extra".to_string()][..], false)
    );
    assert_eq!(change.schema.added_columns, 1);
    assert!(
        w.follow_tables(look()).await.is_empty(),
        "the change is taken once"
    );

    let old = text_batch(&[r#"{"id":1,"name":"a","extra":"lost"}"#, r#"{"id":2,"name":"b"}"#]);
    let rows = JsonMapping::new(&before, RowKind::Append).map_batch(&old);
    let report = w.write(&old, rows, &path, DeadLetterKind::Mapping).await.unwrap();
    assert_eq!((report.written, report.dead_lettered), (2, 0));
    let new = text_batch(&[r#"{"id":3,"name":"c","extra":"x"}"#]);
    let rows = JsonMapping::new(&change.schema, RowKind::Append).map_batch(&new);
    let report = w.write(&new, rows, &path, DeadLetterKind::Mapping).await.unwrap();
    assert_eq!((report.written, report.dead_lettered), (1, 0));

    let mut rows = read_log(&path, 3, Duration::from_secs(30)).await;
    rows.sort();
    assert_eq!(
        rows,
        [["1", "a", ""], ["2", "b", ""], ["3", "c", "x"]].map(|r| r.map(String::from).to_vec())
    );
}

/// Upserts sent back to back into a primary-key table while columns are
/// added, one after the other: fluss-rs refuses the rows of a writer made
/// before a change once its metadata has the new schema (`schema id 1 of
/// the write record …`), so a write caught by a change is written again for
/// the new columns at once, not retried through the old writer until its
/// deadline. Three changes: a write is caught by one in most runs (one
/// change alone was, here, in three runs of four). Every key ends with its
/// last write, in every column.
#[test]
fn a_primary_key_write_caught_by_a_change_is_written_again_at_once() {
    const KEYS: i64 = 50;
    const ADDED: [&str; 3] = ["extra", "more", "last"];
    let deadline = Duration::from_secs(10);
    let path = unique_table("follow_race");
    let mut config = config(&path, log_columns());
    config["table_type"] = json!("primary_key");
    config["primary_key_columns"] = json!(["id"]);
    config["delivery_timeout"] = json!(format!("{}s", deadline.as_secs()));
    config["spool"] = json!({"mode": "off"});
    let plugin = Plugin::load();
    let id = plugin.open_new(&config);
    let upserts = |round: u64| -> Vec<TestMessage> {
        (0..KEYS)
            .map(|key| {
                let payload = format!(
                    r#"{{"id":{key},"name":"r{round}","extra":"x{round}","more":"m{round}","last":"l{round}"}}"#
                );
                TestMessage::text(round * KEYS as u64 + key as u64, &payload)
            })
            .collect()
    };
    plugin.consume_json_ok(id, "t", &upserts(0));
    let (mut round, mut slowest) = (1, Duration::ZERO);
    for column in ADDED {
        block(add_string_column(&path, column));
        let altered = Instant::now();
        while altered.elapsed() < REFRESH * 2 {
            let (code, took) = plugin.timed_consume(id, "t", &upserts(round));
            assert_eq!(code, 0, "round {round}: {:?}", logged(&format!("instance={id}")));
            slowest = slowest.max(took);
            round += 1;
        }
    }
    assert_eq!(plugin.close(id), 0);
    let last = round - 1;
    let wanted: Vec<Option<String>> = ["r", "x", "m", "l"]
        .iter()
        .map(|prefix| Some(format!("{prefix}{last}")))
        .collect();
    for key in 0..KEYS {
        assert_eq!(
            block(cells(&path, key, 4)),
            Some(wanted.clone()),
            "key {key} ends with its last write, round {last}"
        );
    }
    let again = logged(&format!("table {path} changed while a batch was written")).len();
    eprintln!("{round} rounds, the slowest {slowest:?}; writes caught by a change: {again}");
    assert!(
        slowest < deadline / 2,
        "a write took {slowest:?}: one caught by a change waited for its deadline"
    );
}
