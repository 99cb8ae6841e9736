//! Partitioned log and primary-key tables against a real Fluss cluster
//! (`scripts/fluss-local.sh start`): rows of several partitions mixed in
//! every batch land each in its own partition; missing partitions are
//! created or dead-lettered; bad partition values dead-letter.

use std::collections::BTreeSet;
use std::time::Duration;

use fluss::row::{DataGetters, GenericRow};
use fluss_row_codec::RowKind;
use iggy_connector_fluss_sink::{ArrowIpcPayloads, WriterSettings};
use iggy_connector_fluss_sink::{TablePath, TableSchema};
use integration_tests::fluss_cluster::{
    connection, fluss_path, lookup, newest_auto_partition, partition_names, read_log, read_partition,
    recent_days, settings, unique_table, write_json, writer,
};
use integration_tests::{partitioned, table};

const REGIONS: [&str; 3] = ["eu", "us", "ap"];

fn by_region(path: &TablePath, primary_key: &[&str]) -> TableSchema {
    let mut schema = table(
        &path.to_string(),
        &[
            ("id", "BIGINT", false),
            ("region", "STRING", false),
            ("name", "STRING", true),
        ],
        primary_key,
    );
    schema.partition_keys = vec!["region".into()];
    schema
}

/// `count` messages, their regions cycling through [`REGIONS`].
fn mixed_messages(first_id: usize, count: usize) -> Vec<String> {
    (first_id..first_id + count)
        .map(|id| format!(r#"{{"id":{id},"region":"{}","name":"n{id}"}}"#, REGIONS[id % 3]))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_log_table_gets_every_row_in_its_own_partition() {
    let path = unique_table("plog");
    let w = writer(settings()).await;
    let schema = w.ensure_table(&by_region(&path, &[])).await.unwrap();
    assert_eq!(
        schema.partition_keys,
        vec!["region".to_string()],
        "read back from Fluss"
    );

    for first in [0, 300, 600] {
        let messages = mixed_messages(first, 300);
        let report = write_json(
            &w,
            &schema,
            RowKind::Append,
            &messages.iter().map(String::as_str).collect::<Vec<_>>(),
        )
        .await;
        assert_eq!((report.written, report.dead_lettered), (300, 0));
    }

    assert_eq!(
        partition_names(&path).await,
        vec!["ap", "eu", "us"],
        "the sink created them"
    );
    for (r, region) in REGIONS.iter().enumerate() {
        let rows = read_partition(&path, region, 300, Duration::from_secs(30)).await;
        let ids: BTreeSet<usize> = rows.iter().map(|row| row[0].parse().unwrap()).collect();
        let wanted: BTreeSet<usize> = (0..900).filter(|id| id % 3 == r).collect();
        assert_eq!(rows.len(), 300, "partition {region}");
        assert_eq!(
            ids, wanted,
            "partition {region} holds exactly its rows, once each"
        );
        assert!(rows.iter().all(|row| row[1] == *region));
    }
}

/// Column `column` (as text) of the row keyed (`id`, `region`), if any.
async fn lookup_in(path: &TablePath, id: i64, region: &str, column: usize) -> Option<String> {
    let mut key = GenericRow::new(3);
    key.set_field(0, id);
    key.set_field(1, region);
    lookup(path, &key, |row| row.get_string(column).unwrap().to_string()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_primary_key_table_upserts_and_deletes_in_every_partition() {
    let path = unique_table("ppk");
    let w = writer(settings()).await;
    let schema = w
        .ensure_table(&by_region(&path, &["id", "region"]))
        .await
        .unwrap();

    let messages = mixed_messages(0, 90);
    let report = write_json(
        &w,
        &schema,
        RowKind::Upsert,
        &messages.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .await;
    assert_eq!((report.written, report.dead_lettered), (90, 0));

    // Rename every even id, delete every fifth, in one mixed batch.
    let changes: Vec<String> = (0..90)
        .filter(|id| id % 2 == 0)
        .map(|id| {
            format!(
                r#"{{"id":{id},"region":"{}","name":"renamed{id}"}}"#,
                REGIONS[id % 3]
            )
        })
        .collect();
    write_json(
        &w,
        &schema,
        RowKind::Upsert,
        &changes.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .await;
    let deletes: Vec<String> = (0..90)
        .filter(|id| id % 5 == 0)
        .map(|id| format!(r#"{{"id":{id},"region":"{}"}}"#, REGIONS[id % 3]))
        .collect();
    write_json(
        &w,
        &schema,
        RowKind::Delete,
        &deletes.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .await;

    assert_eq!(partition_names(&path).await, vec!["ap", "eu", "us"]);
    for id in 0..90usize {
        let found = lookup_in(&path, id as i64, REGIONS[id % 3], 2).await;
        let wanted = match id {
            _ if id % 5 == 0 => None,
            _ if id % 2 == 0 => Some(format!("renamed{id}")),
            _ => Some(format!("n{id}")),
        };
        assert_eq!(found, wanted, "id {id} in partition {}", REGIONS[id % 3]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_for_missing_partitions_dead_letter_when_the_sink_may_not_create_them() {
    let path = unique_table("pmiss");
    let settings = WriterSettings {
        auto_create_partitions: Some(false),
        ..settings()
    };
    let dlq = settings.dead_letter_table.clone().unwrap();
    let w = writer(settings).await;
    let schema = w.ensure_table(&by_region(&path, &[])).await.unwrap();
    let admin = connection().await.get_admin().unwrap();
    let fluss = fluss_path(&path);
    let spec = fluss::metadata::PartitionSpec::new([("region", "eu")].into_iter().collect());
    admin.create_partition(&fluss, &spec, false).await.unwrap();

    let started = std::time::Instant::now();
    let payloads = [
        r#"{"id":1,"region":"eu"}"#,
        r#"{"id":2,"region":"xx"}"#,
        r#"{"id":3,"region":null}"#,
        r#"{"id":4,"region":"us east"}"#,
        r#"{"id":5,"region":"eu"}"#,
    ];
    let report = write_json(&w, &schema, RowKind::Append, &payloads).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!((report.written, report.dead_lettered), (2, 3));

    let letters = read_log(&dlq, 3, Duration::from_secs(20)).await;
    let by_offset: Vec<(&str, &str, &str)> = letters
        .iter()
        .map(|l| (l[3].as_str(), l[7].as_str(), l[8].as_str()))
        .collect();
    assert_eq!(by_offset.len(), 3, "{by_offset:?}");
    assert_eq!((by_offset[0].0, by_offset[0].1), ("1", "partition"));
    assert!(
        by_offset[0].2.contains("partition `xx`") && by_offset[0].2.contains("auto_create_partitions is off"),
        "{}",
        by_offset[0].2
    );
    // A NULL key is the mapping's to refuse (the column is NOT NULL).
    assert_eq!(by_offset[1].0, "2");
    assert!(by_offset[1].2.contains("region"), "{}", by_offset[1].2);
    assert_eq!((by_offset[2].0, by_offset[2].1), ("3", "partition"));
    assert!(
        by_offset[2].2.contains("cannot name a Fluss partition"),
        "{}",
        by_offset[2].2
    );

    assert_eq!(partition_names(&path).await, vec!["eu"], "nothing was created");
    let rows = read_partition(&path, "eu", 2, Duration::from_secs(20)).await;
    assert_eq!(rows.iter().map(|r| r[0].as_str()).collect::<Vec<_>>(), ["1", "5"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_null_partition_value_in_a_nullable_key_dead_letters_its_message() {
    let path = unique_table("pnull");
    let settings = settings();
    let dlq = settings.dead_letter_table.clone().unwrap();
    let w = writer(settings).await;
    let declared = partitioned(
        table(
            &path.to_string(),
            &[("id", "BIGINT", false), ("region", "STRING", true)],
            &[],
        ),
        &["region"],
    );
    let schema = w.ensure_table(&declared).await.unwrap();
    let report = write_json(
        &w,
        &schema,
        RowKind::Append,
        &[r#"{"id":1,"region":"eu"}"#, r#"{"id":2}"#],
    )
    .await;
    assert_eq!((report.written, report.dead_lettered), (1, 1));
    let letters = read_log(&dlq, 1, Duration::from_secs(20)).await;
    assert_eq!(
        (letters[0][3].as_str(), letters[0][7].as_str()),
        ("1", "partition")
    );
    assert!(letters[0][8].contains("NULL"), "{}", letters[0][8]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auto_partitioned_table_takes_fluss_partitions_and_refuses_the_rest() {
    let path = unique_table("pauto");
    let settings = WriterSettings {
        table_properties: [
            ("table.auto-partition.enabled", "true"),
            ("table.auto-partition.time-unit", "DAY"),
            ("table.auto-partition.time-zone", "UTC"),
            ("table.auto-partition.num-precreate", "2"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
        ..settings()
    };
    let dlq = settings.dead_letter_table.clone().unwrap();
    let w = writer(settings).await;
    let declared = partitioned(
        table(
            &path.to_string(),
            &[("id", "BIGINT", false), ("day", "STRING", false)],
            &[],
        ),
        &["day"],
    );
    let schema = w.ensure_table(&declared).await.unwrap();
    // Fluss made today's partition and the next one (num-precreate 2); the
    // rows go to the newer, whose name Fluss gave (midnight-proof).
    let day = newest_auto_partition(&path, 2).await;
    let existing = partition_names(&path).await;
    assert!(
        recent_days().iter().any(|d| existing.contains(d)),
        "Fluss made today's partition: {existing:?}"
    );

    let report = write_json(
        &w,
        &schema,
        RowKind::Append,
        &[
            &format!(r#"{{"id":1,"day":"{day}"}}"#),
            r#"{"id":2,"day":"20000101"}"#,
            &format!(r#"{{"id":3,"day":"{day}"}}"#),
        ],
    )
    .await;
    assert_eq!((report.written, report.dead_lettered), (2, 1));
    let letters = read_log(&dlq, 1, Duration::from_secs(20)).await;
    assert_eq!(letters[0][3], "1");
    assert!(letters[0][8].contains("auto-partitioning"), "{}", letters[0][8]);
    // Read past the count: ids 1 and 3, once each.
    let rows = read_partition(&path, &day, 2, Duration::from_secs(20)).await;
    let ids: Vec<&str> = rows.iter().map(|row| row[0].as_str()).collect();
    assert_eq!(ids, ["1", "3"]);
    assert!(!partition_names(&path).await.contains(&"20000101".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auto_create_partitions_on_an_auto_partitioned_table_gets_the_partitions_rows_need() {
    let path = unique_table("pauto2");
    let settings = WriterSettings {
        table_properties: [
            ("table.auto-partition.enabled", "true"),
            ("table.auto-partition.time-unit", "DAY"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
        auto_create_partitions: Some(true),
        ..settings()
    };
    let w = writer(settings).await;
    let declared = partitioned(
        table(
            &path.to_string(),
            &[("id", "BIGINT", false), ("day", "STRING", false)],
            &[],
        ),
        &["day"],
    );
    let schema = w.ensure_table(&declared).await.unwrap();
    let report = write_json(
        &w,
        &schema,
        RowKind::Append,
        &[r#"{"id":1,"day":"20000101"}"#, r#"{"id":2,"day":"20000101"}"#],
    )
    .await;
    assert_eq!((report.written, report.dead_lettered), (2, 0));
    assert!(partition_names(&path).await.contains(&"20000101".to_string()));
    // Read past the count: ids 1 and 2, once each.
    let rows = read_partition(&path, "20000101", 2, Duration::from_secs(20)).await;
    let ids: Vec<&str> = rows.iter().map(|row| row[0].as_str()).collect();
    assert_eq!(ids, ["1", "2"]);
}

/// One Arrow IPC stream of (`id`, `region`) rows.
fn ipc_payload(rows: &[(i64, Option<&str>)]) -> Vec<u8> {
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType as ArrowType, Field, Schema};
    use arrow::ipc::writer::StreamWriter;
    use arrow::record_batch::RecordBatch;
    use std::sync::Arc;

    let schema = Arc::new(Schema::new(vec![
        Field::new("id", ArrowType::Int64, false),
        Field::new("region", ArrowType::Utf8, true),
    ]));
    let record = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from(rows.iter().map(|r| r.0).collect::<Vec<_>>())),
            Arc::new(StringArray::from(rows.iter().map(|r| r.1).collect::<Vec<_>>())),
        ],
    )
    .unwrap();
    let mut ipc = Vec::new();
    let mut writer = StreamWriter::try_new(&mut ipc, &schema).unwrap();
    writer.write(&record).unwrap();
    writer.finish().unwrap();
    drop(writer);
    ipc
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arrow_ipc_payloads_are_split_by_partition() {
    let path = unique_table("pipc");
    let settings = settings();
    let dlq = settings.dead_letter_table.clone().unwrap();
    let w = writer(settings).await;
    let declared = partitioned(
        table(
            &path.to_string(),
            &[("id", "BIGINT", false), ("region", "STRING", true)],
            &[],
        ),
        &["region"],
    );
    w.ensure_table(&declared).await.unwrap();

    let mixed = ipc_payload(&[(1, Some("eu")), (2, Some("us")), (3, Some("eu")), (4, Some("ap"))]);
    let one = ipc_payload(&[(5, Some("us"))]);
    let null_key = ipc_payload(&[(6, Some("eu")), (7, None)]);
    let batch = integration_tests::batch_of(&[&mixed, &one, &null_key], &[]);
    let report = w.write(&batch, ArrowIpcPayloads, &path).await.unwrap();
    assert_eq!((report.written, report.dead_lettered), (2, 1));

    for (region, ids) in [("eu", vec!["1", "3"]), ("us", vec!["2", "5"]), ("ap", vec!["4"])] {
        let rows = read_partition(&path, region, ids.len(), Duration::from_secs(20)).await;
        assert_eq!(
            rows.iter().map(|r| r[0].as_str()).collect::<Vec<_>>(),
            ids,
            "partition {region}"
        );
    }
    let letters = read_log(&dlq, 1, Duration::from_secs(20)).await;
    assert_eq!(
        (letters[0][3].as_str(), letters[0][7].as_str()),
        ("2", "partition")
    );
    assert!(
        letters[0][8].contains("row 1") && letters[0][8].contains("NULL"),
        "{}",
        letters[0][8]
    );
}
