//! The cluster frozen in the middle of a transform's batch of many chunks,
//! whose chunks are sent as each is made: a slow chunk (every message of it
//! loops in the `evil` guest until `call_timeout`) holds the writer while
//! the chunks before it are already in Fluss. With the spool off the call
//! fails within its deadline and repeats nothing; with it, a deadline that
//! passes while that chunk is still being made spools the batch with all
//! its rows, and every row lands once after the thaw.

use super::*;

/// `call_timeout` of the evil guest, and the failed calls its slow chunk
/// may take while isolating: that chunk takes about (2 + 6) × 500 ms, well
/// past the ~1.5 s it takes to read the first chunks back.
const CALL_TIMEOUT: Duration = Duration::from_millis(500);
const FAULTS_PER_BATCH: u32 = 6;

/// The evil guest's rows are `[offset]`: the table has that one column.
fn evil_config(suite: &Suite, path: &TablePath, dlq: &TablePath, deadline: Duration) -> Value {
    let mut config = suite.config(path, dlq, deadline);
    config["columns"] = json!([{"name": "id", "type": "BIGINT", "nullable": false}]);
    config["batch_size"] = json!(10);
    config["transform"] = json!({
        "path": component("evil").display().to_string(),
        "cache_dir": test_cache_dir().display().to_string(),
        "call_timeout": format!("{}ms", CALL_TIMEOUT.as_millis()),
        "max_faults_per_batch": FAULTS_PER_BATCH,
        "config": {"mode": "loop"}
    });
    config
}

/// Messages `from..from + count`, the ten from `poisoned` on poisoned
/// (their payload is the evil guest's trigger).
fn with_a_slow_chunk(from: u64, count: u64, poisoned: u64) -> Vec<TestMessage> {
    (from..from + count)
        .map(|i| {
            let payload = if (poisoned..poisoned + 10).contains(&i) {
                "poison".to_string()
            } else {
                format!(r#"{{"id":{i}}}"#)
            };
            TestMessage::text(i, &payload)
        })
        .collect()
}

/// Consumes `messages` on another thread; once the rows of `sent_first`
/// (the chunks before the slow one) can be read back, freezes the cluster.
/// The return code, how long the call took, and whether those rows were
/// read back, once each, before the call returned.
fn freeze_once_the_first_chunks_land(
    suite: &Suite,
    id: u32,
    path: &TablePath,
    messages: &[TestMessage],
    sent_first: std::ops::Range<i64>,
) -> (i32, Duration, bool) {
    std::thread::scope(|scope| {
        let consume = scope.spawn(|| {
            let (code, took) = suite.consume(id, messages);
            (code, took, Instant::now())
        });
        let before = suite.ids_in(path, sent_first.end as usize);
        let (landed, seen) = (
            sent_first.clone().all(|i| before.get(&i) == Some(&1)),
            Instant::now(),
        );
        suite.freeze();
        let (code, took, ended) = consume.join().unwrap();
        (code, took, landed && seen < ended)
    })
}

/// Spool off, delivery_timeout 7 s: chunks 1 and 2 of the batch land while
/// chunk 3 is being made, then the cluster freezes. The call fails within
/// its deadline naming the batch; after the thaw nothing of it is repeated,
/// the first chunks are there once, and the instance writes again.
pub(super) fn hung_while_a_transform_batch_streams(suite: &mut Suite) {
    let (path, dlq) = (unique_table("hung_stream"), unique_table("hung_stream_dlq"));
    let deadline = Duration::from_secs(7);
    let id = suite.plugin.open_new(&evil_config(suite, &path, &dlq, deadline));
    assert_eq!(
        suite.consume(id, &messages_of_ids(0, 20)).0,
        0,
        "the warm-up batch"
    );

    let batch = with_a_slow_chunk(20, 100, 40);
    let (code, took, streamed) = freeze_once_the_first_chunks_land(suite, id, &path, &batch, 0..40);
    suite.thaw();
    suite.record("cluster hung mid-stream of a transform batch (10 chunks)", took);
    assert!(
        streamed,
        "the chunks before the slow one were in Fluss before it was made ({took:?})"
    );
    assert_eq!(code, 1, "a consume that could not be acknowledged fails");
    assert_prompt("hung mid-stream", took, deadline);
    assert!(
        logged("offsets 20..=119 of app/faults partition 1 may not be in Fluss")
            .iter()
            .any(|(_, line)| line.contains(&format!("instance={id}"))),
        "the offsets that may be missing are logged: {:?}",
        logged(&format!("instance={id}"))
    );
    suite.wait_until_answering();
    let (code, _) = suite.consume(id, &messages_of_ids(120, 20));
    assert_eq!(code, 0, "after the thaw: {:?}", logged(&format!("instance={id}")));
    let ids = suite.ids_in(&path, 60);
    assert_accounting(
        "hung mid-stream",
        &ids,
        &[(0..40, Once), (50..120, AtMostOnce), (120..140, Once)],
    );
    assert_eq!(suite.plugin.close(id), 0);
}

/// Spool on, delivery_timeout 1 s: the deadline passes while chunk 3 is
/// still being made and the cluster is frozen. The call returns 0 once that
/// chunk is made and the batch is in the spool (well before the transform's
/// own bound); after the thaw every row lands once and the slow chunk's ten
/// messages are dead-lettered with the guest's fault.
pub(super) fn deadline_while_a_spooled_transform_batch_is_made(suite: &mut Suite) {
    let (path, dlq) = (unique_table("spool_stream"), unique_table("spool_stream_dlq"));
    let deadline = Duration::from_secs(1);
    let spool = tempfile::tempdir().unwrap();
    let mut config = evil_config(suite, &path, &dlq, deadline);
    config["spool"] = json!({"mode": "on_failure", "path": spool.path().display().to_string()});
    let id = suite.plugin.open_new(&config);
    assert_eq!(
        suite.consume(id, &messages_of_ids(0, 20)).0,
        0,
        "the warm-up batch"
    );

    let batch = with_a_slow_chunk(20, 100, 40);
    let (code, took, streamed) = freeze_once_the_first_chunks_land(suite, id, &path, &batch, 0..40);
    suite.record("deadline while a spooled transform batch's chunk is made", took);
    assert!(
        streamed,
        "the chunks before the slow one were in Fluss before it was made ({took:?})"
    );
    assert_eq!(code, 0, "{:?}", logged(&format!("instance={id}")));
    let making = CALL_TIMEOUT * (2 + FAULTS_PER_BATCH);
    assert!(
        took >= deadline && took <= making + Duration::from_secs(2),
        "returned once the slow chunk was made and spooled: {took:?}"
    );
    let spooled = std::fs::read_dir(spool.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".rec"))
        .count();
    assert_eq!(spooled, 1, "the batch is in the spool while Fluss is frozen");
    let (code, _) = suite.consume(id, &messages_of_ids(120, 20));
    assert_eq!(code, 0, "queued behind the spooled batch");
    suite.thaw();
    suite.wait_until_answering();

    let ids = suite.ids_in(&path, 130);
    assert_accounting("spooled mid-making", &ids, &[(0..40, Once), (50..140, Once)]);
    let letters = block(read_log_at(
        &suite.cluster.bootstrap(),
        &dlq,
        10,
        Duration::from_secs(30),
    ));
    let mut dead: Vec<i64> = letters.iter().map(|l| l[3].parse().unwrap()).collect();
    dead.sort();
    assert_eq!(
        dead,
        (40..50).collect::<Vec<_>>(),
        "the slow chunk, dead-lettered once: {letters:?}"
    );
    assert!(
        letters.iter().all(|l| l[7] == "transform"),
        "dead-lettered as the transform's fault: {letters:?}"
    );
    assert_eq!(suite.plugin.close(id), 0);
}

/// Messages `from..from + count` whose payload is `{"id":i}`.
fn messages_of_ids(from: u64, count: u64) -> Vec<TestMessage> {
    with_a_slow_chunk(from, count, u64::MAX - 10)
}
