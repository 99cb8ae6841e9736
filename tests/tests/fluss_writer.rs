//! The writer against a real Fluss cluster (`scripts/fluss-local.sh start`).
//! These tests fail, never skip, when no cluster is reachable.

#[path = "fluss_writer/lost_table.rs"]
mod lost_table;

use std::time::Duration;

use fluss::metadata::TablePath as FlussPath;
use fluss::row::{DataGetters, GenericRow};
use fluss_row_codec::RowKind;
use iggy_connector_fluss_sink::JsonMapping;
use iggy_connector_fluss_sink::test_support::AllMade;
use iggy_connector_fluss_sink::{ArrowIpcPayloads, ColumnChunks, DeadLetterKind, MadeRows, TableKind};
use integration_tests::fluss_cluster::{connection, fluss_path, read_log, settings, unique_table, writer};
use integration_tests::{table, text_batch};

fn events(path: &str) -> iggy_connector_fluss_sink::TableSchema {
    table(
        path,
        &[
            ("id", "BIGINT", false),
            ("name", "STRING", true),
            ("amount", "DECIMAL(10, 2)", true),
            ("at", "TIMESTAMP(6)", true),
            ("ok", "BOOLEAN", true),
        ],
        &[],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_append_reads_back_row_for_row() {
    let path = unique_table("log");
    let w = writer(settings()).await;
    let schema = w.ensure_table(&events(&path.to_string())).await.unwrap();
    assert_eq!(schema.columns.len(), 5, "the schema is read back from Fluss");
    assert_eq!(schema.columns[2].data_type.to_string(), "DECIMAL(10, 2)");
    assert!(!schema.columns[0].nullable);

    let batch = text_batch(&[
        r#"{"id":1,"name":"ann","amount":"12.345","at":"2026-11-30T12:00:00.5","ok":true}"#,
        r#"{"id":2}"#,
        r#"{"id":3,"name":"cy","amount":7}"#,
    ]);
    let output = JsonMapping::new(&schema, RowKind::Append).map_batch(&batch);
    let report = w
        .write(&batch, MadeRows::new(output, DeadLetterKind::Mapping), &path)
        .await
        .unwrap();
    assert_eq!((report.written, report.filtered, report.dead_lettered), (3, 0, 0));

    let rows = read_log(&path, 3, Duration::from_secs(20)).await;
    assert_eq!(
        rows,
        vec![
            vec!["1", "ann", "12.35", "2026-11-30T12:00:00.500", "true"],
            vec!["2", "", "", "", ""],
            vec!["3", "cy", "7.00", "", ""],
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upserts_then_deletes_on_a_primary_key_table() {
    let path = unique_table("pk");
    let w = writer(settings()).await;
    let schema = w
        .ensure_table(&table(
            &path.to_string(),
            &[("id", "BIGINT", false), ("name", "STRING", true)],
            &["id"],
        ))
        .await
        .unwrap();
    let upserts = text_batch(&[
        r#"{"id":1,"name":"a"}"#,
        r#"{"id":2,"name":"b"}"#,
        r#"{"id":1,"name":"a2"}"#,
    ]);
    let out = JsonMapping::new(&schema, RowKind::Upsert).map_batch(&upserts);
    assert_eq!(
        w.write(&upserts, MadeRows::new(out, DeadLetterKind::Mapping), &path)
            .await
            .unwrap()
            .written,
        3
    );
    let deletes = text_batch(&[r#"{"id":2}"#]);
    let out = JsonMapping::new(&schema, RowKind::Delete).map_batch(&deletes);
    assert_eq!(
        w.write(&deletes, MadeRows::new(out, DeadLetterKind::Mapping), &path)
            .await
            .unwrap()
            .written,
        1
    );

    let conn = connection().await;
    let t = conn.get_table(&fluss_path(&path)).await.unwrap();
    let mut lookuper = t.new_lookup().unwrap().create_lookuper().unwrap();
    let mut key = GenericRow::new(1);
    key.set_field(0, 1i64);
    let found = lookuper.lookup(&key).await.unwrap();
    let row = found.get_single_row().unwrap().expect("id 1 is there");
    assert_eq!(row.get_string(1).unwrap(), "a2", "the second upsert won");
    let mut key = GenericRow::new(1);
    key.set_field(0, 2i64);
    let found = lookuper.lookup(&key).await.unwrap();
    assert!(found.get_single_row().unwrap().is_none(), "id 2 was deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_type_mismatch_lands_in_the_dead_letter_table() {
    let path = unique_table("mismatch");
    let settings = settings();
    let dlq = settings.dead_letter_table.clone().unwrap();
    let w = writer(settings).await;
    let schema = w.ensure_table(&events(&path.to_string())).await.unwrap();
    let batch = text_batch(&[
        r#"{"id":1}"#,
        r#"{"id":"two"}"#,
        r#"{"id":3,"amount":"123456789.1"}"#,
    ]);
    let output = JsonMapping::new(&schema, RowKind::Append).map_batch(&batch);
    let report = w
        .write(&batch, MadeRows::new(output, DeadLetterKind::Mapping), &path)
        .await
        .unwrap();
    assert_eq!((report.written, report.dead_lettered), (1, 2));

    let letters = read_log(&dlq, 2, Duration::from_secs(20)).await;
    assert_eq!(letters.len(), 2);
    // stream, topic, partition, offset, message_id, timestamp, payload, error_kind, error, failed_at
    assert_eq!(&letters[0][..4], &["app", "events", "1", "1"]);
    assert_eq!(letters[0][7], "mapping");
    assert_eq!(letters[0][8], "column `id` (BIGINT): \"two\" is not a BIGINT");
    assert_eq!(letters[1][3], "2");
    assert!(
        letters[1][8].ends_with("123456789.1 does not fit DECIMAL(10, 2)"),
        "{}",
        letters[1][8]
    );
    assert_eq!(read_log(&path, 1, Duration::from_secs(10)).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routed_tables_are_created_when_allowed_and_dead_lettered_when_not() {
    let base = unique_table("routed");
    let mut s = settings();
    s.auto_create_table = true;
    s.allowed_tables = vec![format!("{}.{}*", base.database, base.table).parse().unwrap()];
    let w = writer(s).await;
    let schema = w
        .ensure_table(&table(&base.to_string(), &[("v", "INT", true)], &[]))
        .await
        .unwrap();
    let transform_out = {
        // Two rows for a table that does not exist yet, built as a transform would.
        let mut rows = fluss_row_codec::RowsBuilder::new();
        for v in [1, 2] {
            rows.begin_row(RowKind::Append, 1);
            rows.int(v);
            rows.end_row();
        }
        let target = format!("{}_acme", base);
        iggy_connector_fluss_sink::TransformOutput {
            outcomes: vec![iggy_connector_fluss_sink::MessageOutcome::Rows(1); 2],
            rows: iggy_connector_fluss_sink::RowBatch::from_encoded(rows.into_bytes(), vec![target], &[1, 1])
                .unwrap(),
        }
    };
    let batch = text_batch(&["a", "b"]);
    let report = w
        .write(
            &batch,
            MadeRows::new(transform_out.clone(), DeadLetterKind::Transform),
            &base,
        )
        .await
        .unwrap();
    assert_eq!(report.written, 2);
    let created: iggy_connector_fluss_sink::TablePath = format!("{}_acme", base).parse().unwrap();
    assert_eq!(w.table_schema(&created).await.unwrap().columns, schema.columns);
    assert_eq!(
        read_log(&created, 2, Duration::from_secs(20)).await,
        vec![vec!["1"], vec!["2"]]
    );

    let mut s2 = settings();
    s2.allowed_tables = vec![format!("{}.{}*", base.database, base.table).parse().unwrap()];
    let w2 = writer(s2).await;
    let mut out = transform_out;
    out.rows = iggy_connector_fluss_sink::RowBatch::from_encoded(
        {
            let mut rows = fluss_row_codec::RowsBuilder::new();
            rows.begin_row(RowKind::Append, 1);
            rows.int(9);
            rows.end_row();
            rows.begin_row(RowKind::Append, 1);
            rows.int(9);
            rows.end_row();
            rows.into_bytes()
        },
        vec![format!("{}_nobody", base)],
        &[1, 1],
    )
    .unwrap();
    let report = w2
        .write(&batch, MadeRows::new(out, DeadLetterKind::Transform), &base)
        .await
        .unwrap();
    assert_eq!(report.dead_lettered, 2, "auto_create_table is off");
}

/// Rows routed outside `allowed_tables`, or to the dead-letter table, are
/// dead-lettered with the reason; nothing is created or written there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routed_names_outside_the_allow_list_are_dead_lettered() {
    let base = unique_table("allow");
    let mut s = settings();
    s.auto_create_table = true;
    s.allowed_tables = vec![format!("{}.{}_ok_*", base.database, base.table).parse().unwrap()];
    let dlq = s.dead_letter_table.clone().unwrap();
    let w = writer(s).await;
    w.ensure_table(&table(&base.to_string(), &[("v", "INT", true)], &[]))
        .await
        .unwrap();
    let targets = [
        format!("{base}_ok_eu"),
        format!("{base}_elsewhere"),
        dlq.to_string(),
    ];
    let mut rows = fluss_row_codec::RowsBuilder::new();
    for table in 1..=3u16 {
        rows.begin_row(RowKind::Append, table);
        rows.int(table as i32);
        rows.end_row();
    }
    let out = iggy_connector_fluss_sink::TransformOutput {
        outcomes: vec![iggy_connector_fluss_sink::MessageOutcome::Rows(1); 3],
        rows: iggy_connector_fluss_sink::RowBatch::from_encoded(
            rows.into_bytes(),
            targets.to_vec(),
            &[1, 1, 1],
        )
        .unwrap(),
    };
    let report = w
        .write(
            &text_batch(&["a", "b", "c"]),
            MadeRows::new(out, DeadLetterKind::Transform),
            &base,
        )
        .await
        .unwrap();
    assert_eq!((report.written, report.dead_lettered), (1, 2));
    let letters = read_log(&dlq, 2, Duration::from_secs(20)).await;
    assert_eq!(letters.len(), 2, "{letters:?}");
    assert_eq!(letters[0][7], "table");
    assert!(
        letters[0][8].contains("matches none of the config's `allowed_tables`"),
        "{}",
        letters[0][8]
    );
    assert!(
        letters[1][8].contains("it is the dead-letter table"),
        "{}",
        letters[1][8]
    );
    let conn = connection().await;
    let admin = conn.get_admin().unwrap();
    let elsewhere = FlussPath::new(base.database.clone(), format!("{}_elsewhere", base.table));
    assert!(
        !admin.table_exists(&elsewhere).await.unwrap(),
        "no table is created outside the allow-list"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arrow_ipc_payloads_are_appended_as_they_are() {
    use arrow::array::{Int32Array, StringArray};
    use arrow::datatypes::{DataType as ArrowType, Field, Schema};
    use arrow::ipc::writer::StreamWriter;
    use arrow::record_batch::RecordBatch;
    use std::sync::Arc;

    let path = unique_table("ipc");
    let settings = settings();
    let dlq = settings.dead_letter_table.clone().unwrap();
    let w = writer(settings).await;
    w.ensure_table(&table(
        &path.to_string(),
        &[("id", "BIGINT", false), ("name", "STRING", true)],
        &[],
    ))
    .await
    .unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("name", ArrowType::Utf8, true),
        Field::new("id", ArrowType::Int32, false),
    ]));
    let record = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(vec!["a", "b"])),
            Arc::new(Int32Array::from(vec![1, 2])),
        ],
    )
    .unwrap();
    let mut ipc = Vec::new();
    {
        let mut sw = StreamWriter::try_new(&mut ipc, &schema).unwrap();
        sw.write(&record).unwrap();
        sw.finish().unwrap();
    }
    let batch = integration_tests::batch_of(&[&ipc, b"not arrow"], &[]);
    let report = w.write(&batch, ArrowIpcPayloads, &path).await.unwrap();
    assert_eq!((report.written, report.dead_lettered), (1, 1));
    assert_eq!(
        read_log(&path, 2, Duration::from_secs(20)).await,
        vec![vec!["1", "a"], vec!["2", "b"]]
    );
    let letters = read_log(&dlq, 1, Duration::from_secs(20)).await;
    assert_eq!(letters[0][7], "arrow_ipc");
    assert!(
        letters[0][8].starts_with("payload is not an Arrow IPC stream"),
        "{}",
        letters[0][8]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_columns_and_dynamic_routes_land_as_configured() {
    let base = unique_table("meta");
    let mut s = settings();
    s.include_metadata = true;
    s.auto_create_table = true;
    s.allowed_tables = vec!["sink_it.*".parse().unwrap()];
    let w = writer(s).await;
    let schema = w
        .ensure_table(&table(
            &base.to_string(),
            &[
                ("v", "INT", true),
                ("iggy_offset", "BIGINT", false),
                ("iggy_stream", "STRING", true),
            ],
            &[],
        ))
        .await
        .unwrap();
    let other = format!("{base}_other");
    let batch = text_batch(&[r#"{"v":1}"#, &format!(r#"{{"v":2,"to":"{other}"}}"#)]);
    let out = JsonMapping::new(&schema, RowKind::Append)
        .with_metadata(true)
        .with_route_field(Some("to".into()))
        .map_batch(&batch);
    let report = w
        .write(&batch, MadeRows::new(out, DeadLetterKind::Mapping), &base)
        .await
        .unwrap();
    assert_eq!(report.written, 2);
    assert_eq!(
        read_log(&base, 1, Duration::from_secs(20)).await,
        vec![vec!["1", "0", "app"]]
    );
    let other: iggy_connector_fluss_sink::TablePath = other.parse().unwrap();
    assert_eq!(
        read_log(&other, 1, Duration::from_secs(20)).await,
        vec![vec!["2", "1", "app"]]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_table_with_a_bucket_key_takes_rows_one_by_one_into_every_bucket() {
    use fluss::metadata::DataTypes;
    // fluss-rs splits an Arrow batch across such a table's buckets, so the
    // writer appends row by row there; every row must land once.
    let path = unique_table("bucketed");
    let w = writer(settings()).await;
    integration_tests::fluss_cluster::create_bucketed_log_table(
        &path,
        &[
            ("id", DataTypes::bigint().as_non_nullable()),
            ("name", DataTypes::string()),
        ],
        "id",
    )
    .await;

    let sink_schema = w.table_schema(&path).await.unwrap();
    let payloads: Vec<String> = (0..30)
        .map(|i| format!(r#"{{"id":{i},"name":"n{i}"}}"#))
        .collect();
    let refs: Vec<&str> = payloads.iter().map(String::as_str).collect();
    let batch = text_batch(&refs);
    let output = JsonMapping::new(&sink_schema, RowKind::Append).map_batch(&batch);
    let report = w
        .write(&batch, MadeRows::new(output, DeadLetterKind::Mapping), &path)
        .await
        .unwrap();
    assert_eq!((report.written, report.dead_lettered), (30, 0));

    let rows = read_log(&path, 31, Duration::from_secs(5)).await;
    let mut ids: Vec<i64> = rows.iter().map(|r| r[0].parse().unwrap()).collect();
    ids.sort();
    assert_eq!(
        ids,
        (0..30).collect::<Vec<i64>>(),
        "every row once, from all buckets"
    );
}

/// The lean row path (JSON straight to Arrow columns): a batch made in many
/// chunks, each sent while the next is made, lands whole and in order, and
/// a message that does not map is dead-lettered without holding the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lean_path_sends_chunk_after_chunk_and_keeps_their_order() {
    use iggy_connector_fluss_sink::Deadline;
    use iggy_connector_fluss_sink::test_support::ColumnMapping;

    let path = unique_table("lean");
    let w = writer(settings()).await;
    let schema = w
        .ensure_table(&table(
            &path.to_string(),
            &[("id", "BIGINT", false), ("name", "STRING", true)],
            &[],
        ))
        .await
        .unwrap();
    let payloads: Vec<String> = (0..250)
        .map(|i| match i {
            77 => r#"{"name":"no id"}"#.to_string(),
            _ => format!(r#"{{"id":{i},"name":"n{i}"}}"#),
        })
        .collect();
    let payloads: Vec<&str> = payloads.iter().map(String::as_str).collect();
    let batch = text_batch(&payloads);
    let deadline = Deadline::after(Duration::from_secs(60));
    let TableKind::Columns(arrow_schema) = w.table_kind(&path, deadline).await.unwrap() else {
        panic!("an unpartitioned log table of one bucket takes Arrow columns")
    };
    let lean = ColumnMapping::new(
        JsonMapping::new(&schema, RowKind::Append),
        schema.clone(),
        arrow_schema,
        false,
    );
    let report = w
        .write_within(
            &batch,
            ColumnChunks(AllMade(lean.map_chunks(&batch, 30))),
            &path,
            deadline,
        )
        .await
        .unwrap();
    assert_eq!(
        (report.written, report.filtered, report.dead_lettered),
        (249, 0, 1)
    );
    let ids: Vec<String> = read_log(&path, 249, Duration::from_secs(20))
        .await
        .into_iter()
        .map(|row| row[0].clone())
        .collect();
    let expected: Vec<String> = (0..250).filter(|&i| i != 77).map(|i| i.to_string()).collect();
    assert_eq!(ids, expected, "every row once, in message order across 9 chunks");
}

/// Chunks that say whether the next one is made yet, as the pipeline's do.
struct Paced<I> {
    chunks: I,
    next_is_made: bool,
}

impl<I> iggy_connector_fluss_sink::test_support::MadeChunks for Paced<I>
where
    I: Iterator + Send,
    I::Item: Send,
{
    type Chunk = I::Item;

    async fn next_chunk(&mut self) -> Option<I::Item> {
        self.chunks.next()
    }

    fn next_is_made(&self) -> bool {
        self.next_is_made
    }
}

/// fluss-rs compresses each appended batch on its own, at a cost per batch,
/// so the lean path holds small made rows back for the next chunk, but only
/// while that chunk is made already: a quarter MB of rows is sent at once,
/// the rest at the end, and rows are sent as they come when the writer
/// would otherwise wait for the next chunk (a slow chunk never keeps the
/// rows before it from Fluss). Read back batch by batch, every row once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn made_rows_are_sent_together_but_never_held_while_the_next_chunk_is_made() {
    use iggy_connector_fluss_sink::Deadline;
    use iggy_connector_fluss_sink::test_support::ColumnMapping;
    use integration_tests::fluss_cluster::read_log_batch_sizes;

    let w = writer(settings()).await;
    for (name_len, next_is_made, what) in [
        (8, true, "small rows, each next chunk made"),
        (8, false, "small rows, each next chunk in the making"),
        (2000, true, "2 KB rows, each next chunk made"),
    ] {
        let path = unique_table("sends");
        let schema = w
            .ensure_table(&table(
                &path.to_string(),
                &[("id", "BIGINT", false), ("name", "STRING", true)],
                &[],
            ))
            .await
            .unwrap();
        let payloads: Vec<String> = (0..1000)
            .map(|i| format!(r#"{{"id":{i},"name":"{i:0name_len$}"}}"#))
            .collect();
        let payloads: Vec<&str> = payloads.iter().map(String::as_str).collect();
        let batch = text_batch(&payloads);
        let deadline = Deadline::after(Duration::from_secs(60));
        let TableKind::Columns(arrow_schema) = w.table_kind(&path, deadline).await.unwrap() else {
            panic!("{what}: a log table of one bucket takes Arrow columns")
        };
        let lean = ColumnMapping::new(
            JsonMapping::new(&schema, RowKind::Append),
            schema.clone(),
            arrow_schema,
            false,
        );
        let chunks = Paced {
            chunks: lean.map_chunks(&batch, 50).collect::<Vec<_>>().into_iter(),
            next_is_made,
        };
        let report = w
            .write_within(&batch, ColumnChunks(chunks), &path, deadline)
            .await
            .unwrap();
        assert_eq!(report.written, 1000, "{what}");
        let sizes = read_log_batch_sizes(&path, 1000, Duration::from_secs(20)).await;
        let case = format!("{what}: {sizes:?}");
        assert_eq!(sizes.iter().sum::<usize>(), 1000, "every row once, {case}");
        // Read past the count: a row repeated, or one lost and another
        // repeated, shows here.
        let ids: Vec<String> = read_log(&path, 1000, Duration::from_secs(20))
            .await
            .into_iter()
            .map(|row| row[0].clone())
            .collect();
        let expected: Vec<String> = (0..1000).map(|i| i.to_string()).collect();
        assert_eq!(ids, expected, "every row once, in message order: {what}");
        match (name_len, next_is_made) {
            (8, true) => assert_eq!(sizes, [1000], "{case}"),
            (8, false) => assert_eq!(sizes, [50; 20], "{case}"),
            _ => {
                assert!(sizes.len() > 1, "sent while the rest were made: {case}");
                let but_last = &sizes[..sizes.len() - 1];
                assert!(but_last.iter().all(|&n| n > 50), "chunks sent together: {case}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_names_the_servers_and_keeps_the_clients_error() {
    use std::error::Error as _;
    // A port nothing listens on: the client's connection is refused at once.
    let port = integration_tests::free_port();
    let err =
        match iggy_connector_fluss_sink::FlussWriter::connect(iggy_connector_fluss_sink::WriterSettings {
            bootstrap_servers: format!("127.0.0.1:{port}"),
            delivery_timeout: Duration::from_secs(5),
            ..settings()
        })
        .await
        {
            Ok(_) => panic!("nothing listens on {port}"),
            Err(e) => e,
        };
    let text = err.to_string();
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    let source = err.source().expect("the client's error is kept as the source");
    assert!(
        source.downcast_ref::<fluss::error::Error>().is_some(),
        "{source:?}"
    );
}
