//! The spool across a change of its table's columns.

use std::time::{Duration, Instant};

use integration_tests::fluss_cluster::{add_string_column_at, block, read_log_at, unique_table};
use integration_tests::plugin::{logged, messages_with_extra};
use integration_tests::{component, test_cache_dir};
use serde_json::json;

use super::{Suite, assert_exactly_once, records_in};

/// The `json-to-row` transform for `config`, with a check every second for
/// a change of its table's columns.
fn with_transform(mut config: serde_json::Value) -> serde_json::Value {
    config["schema_refresh_interval"] = json!("1s");
    config["transform"] = json!({
        "path": component("json-to-row").display().to_string(),
        "cache_dir": test_cache_dir().display().to_string()
    });
    config
}

/// Each row's id (counted) and its `extra` as `wanted` gives it for the id.
fn assert_rows_with_extra(
    rows: &[Vec<String>],
    ids: std::ops::Range<i64>,
    wanted: impl Fn(i64) -> Option<String>,
) {
    let mut found = std::collections::BTreeMap::new();
    for row in rows {
        let id: i64 = row[0].parse().unwrap();
        *found.entry(id).or_insert(0) += 1;
        let extra = row.get(2).filter(|cell| !cell.is_empty());
        assert_eq!(extra, wanted(id).as_ref(), "id {id}'s extra: {row:?}");
    }
    assert_exactly_once("across a change", &found, ids);
}

/// A column added while the only tablet server is away and a batch is
/// spooled: once the server is back, the batch spooled before the change
/// (its rows made by the transform for the two columns it had) lands with
/// NULL in the new column. Once the change is followed, a batch spooled in
/// a second outage (made by the transform initialised again) lands with
/// it. Every row lands once. (fluss-rs 1.0 reads table metadata from the
/// tablet servers, so with the only one away the change cannot be followed
/// until it is back.)
pub(super) fn a_column_added_while_a_batch_is_spooled(suite: &mut Suite) {
    let (path, dlq) = (unique_table("spool_change"), unique_table("spool_change_dlq"));
    let dir = suite.spool_dir("change");
    let config = with_transform(suite.config(&path, &dlq, &dir));
    let id = suite.plugin.open_new(&config);
    suite.consume_ok("warm-up", id, &messages_with_extra(0, 50));
    suite.kill_tablet();
    suite.consume_ok("spooled before the change", id, &messages_with_extra(50, 50));
    assert_eq!(records_in(&dir), 1, "the batch before the change is spooled");
    let bootstrap = suite.cluster.bootstrap();
    block(add_string_column_at(&bootstrap, &path, "extra"));
    suite.start_tablet();
    suite.wait_drained("drained after a change of columns", &path, 0);

    let needle = format!("rows for {path} are made with its columns id, name, extra");
    let back = Instant::now();
    while logged(&needle).is_empty() {
        assert!(
            back.elapsed() < Duration::from_secs(20),
            "the change is not followed once the tablet server is back: {:?}",
            logged(&format!("instance={id}"))
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    suite.kill_tablet();
    suite.consume_ok("spooled after the change", id, &messages_with_extra(100, 50));
    assert_eq!(records_in(&dir), 1, "the batch after the change is spooled");
    suite.start_tablet();
    suite.wait_drained("drained with the new column", &path, 1);

    let rows = block(read_log_at(&bootstrap, &path, 150, Duration::from_secs(60)));
    assert_rows_with_extra(&rows, 0..150, |id| (id >= 100).then(|| format!("e{id}")));
    assert_eq!(suite.plugin.close(id), 0);
}

/// A batch spooled (its rows made by the transform for the table's two
/// columns) by an instance closed before the tablet server came back, and
/// a column added meanwhile: the next open finds three columns, and the
/// spooled rows land with NULL in the new one instead of being refused as
/// short. Nothing is dead-lettered; every row lands once.
pub(super) fn a_column_added_while_a_closed_instance_left_a_batch_spooled(suite: &mut Suite) {
    let (path, dlq) = (unique_table("spool_reopen"), unique_table("spool_reopen_dlq"));
    let dir = suite.spool_dir("reopen");
    let config = with_transform(suite.config(&path, &dlq, &dir));
    let first = suite.plugin.open_new(&config);
    suite.consume_ok("warm-up", first, &messages_with_extra(0, 50));
    suite.kill_tablet();
    suite.consume_ok("spooled before the change", first, &messages_with_extra(50, 50));
    assert_eq!(suite.plugin.close(first), 0);
    assert_eq!(records_in(&dir), 1, "the spooled batch stays on disk");
    let bootstrap = suite.cluster.bootstrap();
    block(add_string_column_at(&bootstrap, &path, "extra"));
    suite.start_tablet();

    let second = suite.plugin.open_new(&config);
    suite.wait_drained("replayed by the next open after a change", &path, 0);
    suite.consume_ok("after the replay", second, &messages_with_extra(100, 50));
    let rows = block(read_log_at(&bootstrap, &path, 150, Duration::from_secs(60)));
    assert_rows_with_extra(&rows, 0..150, |id| (id >= 100).then(|| format!("e{id}")));
    let letters = block(read_log_at(&bootstrap, &dlq, 0, Duration::from_secs(5)));
    assert!(letters.is_empty(), "nothing dead-lettered: {letters:?}");
    assert_eq!(suite.plugin.close(second), 0);
}
