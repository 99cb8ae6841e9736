//! A transform's chunks finished beside the transform (`ChunkFinisher`, on
//! the thread of the call, as the pipeline does) against the real local
//! Fluss: their columns are sent as they are when they were made for the
//! very tables the writer resolves now, and made by the writer otherwise;
//! read back, every row lands once, in message order, in its table.
//! The tests fail, never skip, when no cluster is reachable.

use std::sync::Arc;
use std::time::Duration;

use fluss_row_codec::RowKind;
use iggy_connector_fluss_sink::test_support::{AllMade, TransformedChunk};
use iggy_connector_fluss_sink::{
    DeadLetterKind, Deadline, FlussWriter, MessageBatch, MessageOutcome, RowBatch, TablePath,
    TransformOutput, TransformedChunks, WriteReport,
};
use integration_tests::fluss_cluster::{read_log, settings, unique_table, writer};
use integration_tests::{table, text_batch};

/// One row a message: (table index, `v`: a string for a misfit), the
/// offset left to the sink; `names` are the tables of indexes 1...
fn rows(values: &[(u16, Result<i32, &str>)], names: &[&TablePath]) -> Arc<TransformOutput> {
    let mut rows = fluss_row_codec::RowsBuilder::new();
    for (table, v) in values {
        rows.begin_row(RowKind::Append, *table);
        match v {
            Ok(v) => rows.int(*v),
            Err(text) => rows.string(text),
        }
        rows.null();
        rows.end_row();
    }
    let names = names.iter().map(|t| t.to_string()).collect();
    Arc::new(TransformOutput {
        outcomes: vec![MessageOutcome::Rows(1); values.len()],
        rows: RowBatch::from_encoded(rows.into_bytes(), names, &vec![1; values.len()]).unwrap(),
    })
}

/// Messages at offsets `from`.., as a finisher is told they are (the
/// writer's batch has them at 0..: the metadata column tells who made the
/// columns).
fn made_of(from: u64, count: u64) -> MessageBatch {
    let mut batch = MessageBatch::new(Default::default());
    for offset in from..from + count {
        batch.push(offset, offset.into(), 0, b"{}", []).unwrap();
    }
    batch
}

/// Writes `chunks` (one message for each outcome) to `path`, the sink's
/// table, as a transform's rows.
async fn write(w: &FlussWriter, path: &TablePath, chunks: Vec<TransformedChunk>) -> WriteReport {
    let messages = chunks.iter().map(|c| c.rows.outcomes.len()).sum();
    let batch = text_batch(&vec!["{}"; messages]);
    let chunks = AllMade(chunks.into_iter().map(Arc::new));
    let deadline = Deadline::after(Duration::from_secs(60));
    let chunks = TransformedChunks {
        chunks,
        stage: DeadLetterKind::Transform,
    };
    w.write_within(&batch, chunks, path, deadline).await.unwrap()
}

/// Rows `[v, offset]` as read back.
fn expected(rows: &[[i64; 2]]) -> Vec<Vec<String>> {
    rows.iter()
        .map(|row| row.iter().map(|n| n.to_string()).collect())
        .collect()
}

const COLUMNS: [(&str, &str, bool); 2] = [("v", "INT", true), ("iggy_offset", "BIGINT", false)];

/// A transform's chunk finished beside the transform comes with its
/// table's Arrow columns, and the writer sends those as they are. Here they
/// are told apart from columns the writer would make by the metadata of the
/// messages each was made of: the finisher is given offsets 100.., the
/// writer 0... Rows alone, and a chunk finished for another writer's table,
/// are made by the writer; a row for a table that is not open (or may not
/// be routed to), a primary-key table or a table not open yet get no
/// columns. A misfit in a finished chunk is dead-lettered as the writer
/// would. Read back: every row once, in message order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_finished_beside_the_transform_are_sent_as_made() {
    let path = unique_table("finished");
    let mut s = settings();
    s.include_metadata = true;
    let (w, other) = (writer(s.clone()).await, writer(s).await);
    let schema = table(&path.to_string(), &COLUMNS, &[]);
    w.ensure_table(&schema).await.unwrap();
    other.ensure_table(&schema).await.unwrap();
    let own = |values: &[Result<i32, &str>]| {
        let values: Vec<_> = values.iter().map(|&v| (0, v)).collect();
        rows(&values, &[])
    };
    let finisher = w.chunk_finisher(&path).await.expect("an open log table");
    let elsewhere = other.chunk_finisher(&path).await.unwrap();
    let chunks = vec![
        finisher.finish(own(&[Ok(0), Ok(1)]), &made_of(100, 2)),
        elsewhere.finish(own(&[Ok(2), Ok(3)]), &made_of(102, 2)),
        own(&[Ok(4)]).into(),
        finisher.finish(own(&[Ok(5), Err("six"), Ok(7)]), &made_of(105, 3)),
    ];
    assert_eq!(
        chunks.iter().map(|c| c.has_columns()).collect::<Vec<_>>(),
        [true, true, false, true]
    );
    let not_allowed = TablePath::new(&path.database, "elsewhere");
    let routed = finisher.finish(rows(&[(1, Ok(8))], &[&not_allowed]), &made_of(0, 1));
    assert!(
        !routed.has_columns(),
        "a row for a table rows may not go to is the writer's to dead-letter"
    );
    let unknown = unique_table("not_open");
    assert!(
        w.chunk_finisher(&unknown).await.is_none(),
        "never waits to open a table"
    );
    let keyed = unique_table("finished_pk");
    w.ensure_table(&table(&keyed.to_string(), &[("k", "INT", false)], &["k"]))
        .await
        .unwrap();
    assert!(
        w.chunk_finisher(&keyed).await.is_none(),
        "a primary-key table takes no columns"
    );

    let report = write(&w, &path, chunks).await;
    assert_eq!((report.written, report.dead_lettered), (7, 1));
    let read = read_log(&path, 7, Duration::from_secs(20)).await;
    let want = [[0, 100], [1, 101], [2, 2], [3, 3], [4, 4], [5, 105], [7, 107]];
    assert_eq!(read, expected(&want));
}

/// Rows routed to tables the writer has open (and may route to) are put in
/// their tables' columns beside the transform too, whatever order a chunk
/// names its tables in; the writer sends them as they are. Rows for a
/// table opened by another writer, rows alone and rows for a table not
/// open yet are made by the writer (offsets 0..); a misfit in a routed
/// table dead-letters its message. Read back from every table: each row
/// once, in message order, where it was routed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routed_chunks_finished_beside_the_transform_are_sent_as_made() {
    let path = unique_table("routes");
    let routed = |n: u32| TablePath::new(&path.database, format!("{}_to{n}", path.table));
    let (r1, r2, r3) = (routed(1), routed(2), routed(3));
    let mut s = settings();
    s.include_metadata = true;
    s.allowed_tables = vec![format!("{}.{}_to*", path.database, path.table).parse().unwrap()];
    let (w, other) = (writer(s.clone()).await, writer(s).await);
    for table_path in [&path, &r1, &r2] {
        let schema = table(&table_path.to_string(), &COLUMNS, &[]);
        w.ensure_table(&schema).await.unwrap();
        other.ensure_table(&schema).await.unwrap();
    }
    // In Fluss, not open in `w`.
    other
        .ensure_table(&table(&r3.to_string(), &COLUMNS, &[]))
        .await
        .unwrap();
    let finisher = w.chunk_finisher(&path).await.expect("an open log table");
    let elsewhere = other.chunk_finisher(&path).await.unwrap();
    let chunks = vec![
        finisher.finish(rows(&[(1, Ok(0)), (2, Ok(1))], &[&r1, &r2]), &made_of(100, 2)),
        // The same tables named the other way round, and the sink's own.
        finisher.finish(
            rows(&[(1, Ok(2)), (2, Ok(3)), (0, Ok(4))], &[&r2, &r1]),
            &made_of(102, 3),
        ),
        rows(&[(1, Ok(5))], &[&r1]).into(),
        elsewhere.finish(rows(&[(1, Ok(6))], &[&r1]), &made_of(106, 1)),
        finisher.finish(rows(&[(1, Ok(7))], &[&r3]), &made_of(107, 1)),
        finisher.finish(
            rows(&[(1, Err("eight")), (2, Ok(9))], &[&r1, &r2]),
            &made_of(108, 2),
        ),
    ];
    assert_eq!(
        chunks.iter().map(|c| c.has_columns()).collect::<Vec<_>>(),
        [true, true, false, true, false, true]
    );

    let report = write(&w, &path, chunks).await;
    assert_eq!((report.written, report.dead_lettered), (9, 1));
    let timeout = Duration::from_secs(20);
    assert_eq!(read_log(&path, 1, timeout).await, expected(&[[4, 104]]));
    assert_eq!(
        read_log(&r1, 4, timeout).await,
        expected(&[[0, 100], [3, 103], [5, 5], [6, 6]])
    );
    assert_eq!(
        read_log(&r2, 3, timeout).await,
        expected(&[[1, 101], [2, 102], [9, 109]])
    );
    assert_eq!(read_log(&r3, 1, timeout).await, expected(&[[7, 7]]));

    // A batch that names as many tables as one may before a finished chunk
    // does: the chunk's table, open and allowed, is one too many, and its
    // message is dead-lettered as the writer would, not sent.
    let cap = 64;
    let missing: Vec<TablePath> = (0..cap).map(|i| routed(100 + i)).collect();
    let names: Vec<&TablePath> = missing.iter().collect();
    let values: Vec<(u16, Result<i32, &str>)> = (1..=cap as u16).map(|t| (t, Ok(0))).collect();
    let many = rows(&values, &names);
    let finisher = w.chunk_finisher(&path).await.unwrap();
    let past_the_cap = finisher.finish(rows(&[(1, Ok(70))], &[&r1]), &made_of(300, 1));
    assert!(past_the_cap.has_columns(), "made for an open table");
    let report = write(&w, &path, vec![many.into(), past_the_cap]).await;
    assert_eq!((report.written, report.dead_lettered), (0, cap as usize + 1));
    assert_eq!(
        read_log(&r1, 4, timeout).await,
        expected(&[[0, 100], [3, 103], [5, 5], [6, 6]]),
        "nothing more in the table"
    );
}
