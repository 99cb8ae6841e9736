//! Partial updates on primary-key tables against a real Fluss cluster
//! (`scripts/fluss-local.sh start`): rows that leave columns out (absent
//! cells) update only the columns they give.

use std::time::Duration;

use fluss::row::{DataGetters, GenericRow};
use fluss_row_codec::RowKind;
use iggy_connector_fluss_sink::JsonMapping;
use iggy_connector_fluss_sink::{DeadLetterKind, FlussWriter, MadeRows};
use iggy_connector_fluss_sink::{TablePath, TableSchema};
use integration_tests::fluss_cluster::{lookup, read_log, settings, unique_table, writer};
use integration_tests::{table, text_batch};

fn people(path: &TablePath) -> TableSchema {
    table(
        &path.to_string(),
        &[
            ("id", "BIGINT", false),
            ("name", "STRING", true),
            ("score", "INT", true),
            ("city", "STRING", true),
        ],
        &["id"],
    )
}

/// The row keyed `id` as (name, score, city), `None` cells for NULL.
type Person = (Option<String>, Option<i32>, Option<String>);

async fn person(path: &TablePath, id: i64) -> Option<Person> {
    let mut key = GenericRow::new(1);
    key.set_field(0, id);
    lookup(path, &key, |row| {
        let text = |i| (!row.is_null_at(i).unwrap()).then(|| row.get_string(i).unwrap().to_string());
        let score = (!row.is_null_at(2).unwrap()).then(|| row.get_int(2).unwrap());
        (text(1), score, text(3))
    })
    .await
}

async fn upsert(w: &FlussWriter, schema: &TableSchema, payloads: &[&str]) -> (usize, usize) {
    let batch = text_batch(payloads);
    let output = JsonMapping::new(schema, RowKind::Upsert)
        .with_partial_update(true)
        .map_batch(&batch);
    let report = w
        .write(
            &batch,
            MadeRows::new(output, DeadLetterKind::Mapping),
            &schema.path,
        )
        .await
        .unwrap();
    (report.written, report.dead_lettered)
}

fn some(s: &str) -> Option<String> {
    Some(s.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_partial_upserts_of_different_columns_merge_into_one_row() {
    let path = unique_table("partial");
    let w = writer(settings()).await;
    let schema = w.ensure_table(&people(&path)).await.unwrap();

    assert_eq!(
        upsert(&w, &schema, &[r#"{"id":1,"name":"ann","city":"oslo"}"#]).await,
        (1, 0)
    );
    assert_eq!(upsert(&w, &schema, &[r#"{"id":1,"score":7}"#]).await, (1, 0));
    assert_eq!(person(&path, 1).await, Some((some("ann"), Some(7), some("oslo"))));

    // An explicit null is a value: it clears the column; a missing field keeps it.
    assert_eq!(upsert(&w, &schema, &[r#"{"id":1,"city":null}"#]).await, (1, 0));
    assert_eq!(person(&path, 1).await, Some((some("ann"), Some(7), None)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_batch_mixing_column_sets_full_rows_and_deletes_ends_in_the_right_state() {
    let path = unique_table("partialmix");
    let w = writer(settings()).await;
    let schema = w.ensure_table(&people(&path)).await.unwrap();

    let payloads = [
        r#"{"id":1,"name":"ann","score":1,"city":"oslo"}"#,
        r#"{"id":2,"name":"bob"}"#,
        r#"{"id":1,"score":2}"#,
        r#"{"id":2,"score":5}"#,
        r#"{"id":3,"city":"rome"}"#,
        r#"{"id":1,"name":"anna"}"#,
        r#"{"id":3,"name":"cy","score":9,"city":"rome"}"#,
        r#"{"id":3,"score":10}"#,
        r#"{"id":2,"city":"kyiv"}"#,
    ];
    assert_eq!(upsert(&w, &schema, &payloads).await, (9, 0));
    assert_eq!(
        person(&path, 1).await,
        Some((some("anna"), Some(2), some("oslo")))
    );
    assert_eq!(person(&path, 2).await, Some((some("bob"), Some(5), some("kyiv"))));
    assert_eq!(person(&path, 3).await, Some((some("cy"), Some(10), some("rome"))));

    let deletes = text_batch(&[r#"{"id":2}"#]);
    let output = JsonMapping::new(&schema, RowKind::Delete)
        .with_partial_update(true)
        .map_batch(&deletes);
    w.write(&deletes, MadeRows::new(output, DeadLetterKind::Mapping), &path)
        .await
        .unwrap();
    assert_eq!(upsert(&w, &schema, &[r#"{"id":3,"city":"pisa"}"#]).await, (1, 0));
    assert_eq!(person(&path, 2).await, None);
    assert_eq!(person(&path, 3).await, Some((some("cy"), Some(10), some("pisa"))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_update_may_not_leave_out_a_not_null_column() {
    let path = unique_table("partialnn");
    let settings = settings();
    let dlq = settings.dead_letter_table.clone().unwrap();
    let w = writer(settings).await;
    let mut declared = people(&path);
    declared.columns[2].nullable = false;
    let schema = w.ensure_table(&declared).await.unwrap();
    // The mapping requires NOT NULL columns (message 1); leaving out a
    // nullable one is refused because Fluss's partial updates need every
    // non-key column nullable (message 0). Full rows still go in.
    let (written, dead) = upsert(
        &w,
        &schema,
        &[
            r#"{"id":1,"score":3}"#,
            r#"{"id":2,"name":"x"}"#,
            r#"{"id":3,"name":"y","score":4,"city":"z"}"#,
        ],
    )
    .await;
    let letters = read_log(&dlq, dead, Duration::from_secs(20)).await;
    assert_eq!((written, dead), (1, 2), "{letters:?}");
    assert_eq!((letters[0][3].as_str(), letters[0][7].as_str()), ("0", "schema"));
    assert!(
        letters[0][8].contains("cannot take partial updates: column `score`"),
        "{}",
        letters[0][8]
    );
    assert_eq!((letters[1][3].as_str(), letters[1][7].as_str()), ("1", "mapping"));
    assert_eq!(person(&path, 3).await, Some((some("y"), Some(4), some("z"))));
}
