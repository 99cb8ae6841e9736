//! Helpers for tests against a real Fluss cluster (`scripts/fluss-local.sh start`).
use std::time::{Duration, Instant};

use arrow::util::display::array_value_to_string;
use fluss::client::{EARLIEST_OFFSET, FlussConnection};
use fluss::metadata::TablePath as FlussPath;
use iggy_connector_fluss_sink::TablePath;
use iggy_connector_fluss_sink::{FlussWriter, MadeRows, WriterSettings};

/// `path` as fluss-rs names a table.
pub fn fluss_path(path: &TablePath) -> FlussPath {
    FlussPath::new(path.database.clone(), path.table.clone())
}

/// Runs `future` to completion on a fresh current-thread runtime (for
/// reading back from plain, blocking tests).
pub fn block<T>(future: impl Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(future)
}

/// The cluster's bootstrap address: `FLUSS_BOOTSTRAP` or the local script's default.
pub fn bootstrap() -> String {
    std::env::var("FLUSS_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:9123".into())
}

/// A fresh table name in database `sink_it`, unique to this run.
pub fn unique_table(prefix: &str) -> TablePath {
    TablePath::new("sink_it", format!("{prefix}_{:08x}", fastrand::u32(..)))
}

/// Writer settings for the local cluster with a fresh dead-letter table.
pub fn settings() -> WriterSettings {
    WriterSettings {
        bootstrap_servers: bootstrap(),
        dead_letter_table: Some(unique_table("dlq")),
        delivery_timeout: Duration::from_secs(60),
        ..WriterSettings::default()
    }
}

/// Connects, or fails the test: these tests never skip.
pub async fn writer(settings: WriterSettings) -> FlussWriter {
    match FlussWriter::connect(settings).await {
        Ok(w) => w,
        Err(e) => {
            panic!("this test needs a Fluss cluster: {e}. Start one with `scripts/fluss-local.sh start`.")
        }
    }
}

/// A plain client connection to the local cluster, for reading back.
pub async fn connection() -> FlussConnection {
    connection_to(&bootstrap()).await
}

/// A plain client connection to the cluster at `bootstrap_servers`.
pub async fn connection_to(bootstrap_servers: &str) -> FlussConnection {
    let config = fluss::config::Config {
        bootstrap_servers: bootstrap_servers.to_string(),
        ..Default::default()
    };
    FlussConnection::new(config).await.expect("Fluss is reachable")
}

/// The text of string column `column` of the row with BIGINT key `id`
/// in primary-key table `path`, or `None` when there is no such row.
pub async fn lookup_string(path: &TablePath, id: i64, column: usize) -> Option<String> {
    lookup_string_at(&bootstrap(), path, id, column).await
}

/// [`lookup_string`] in the cluster at `bootstrap_servers`.
pub async fn lookup_string_at(
    bootstrap_servers: &str,
    path: &TablePath,
    id: i64,
    column: usize,
) -> Option<String> {
    use fluss::row::{DataGetters, GenericRow};
    let mut key = GenericRow::new(1);
    key.set_field(0, id);
    lookup_at(bootstrap_servers, path, &key, |row| {
        row.get_string(column).unwrap().to_string()
    })
    .await
}

/// What `read` takes from the row of primary-key table `path` with `key`
/// (a row of the table's width with the key columns set), `None` when
/// there is no such row.
pub async fn lookup<T>(
    path: &TablePath,
    key: &fluss::row::GenericRow<'_>,
    read: impl FnOnce(&fluss::row::LookupRow<'_>) -> T,
) -> Option<T> {
    lookup_at(&bootstrap(), path, key, read).await
}

async fn lookup_at<T>(
    bootstrap_servers: &str,
    path: &TablePath,
    key: &fluss::row::GenericRow<'_>,
    read: impl FnOnce(&fluss::row::LookupRow<'_>) -> T,
) -> Option<T> {
    let conn = connection_to(bootstrap_servers).await;
    let table = conn.get_table(&fluss_path(path)).await.unwrap();
    let mut lookuper = table.new_lookup().unwrap().create_lookuper().unwrap();
    let found = lookuper.lookup(key).await.unwrap();
    found.get_single_row().unwrap().map(|row| read(&row))
}

/// Adds nullable STRING column `name` at the end of table `path`, as
/// another client would (`ALTER TABLE … ADD COLUMN`).
pub async fn add_string_column(path: &TablePath, name: &str) {
    add_string_column_at(&bootstrap(), path, name).await;
}

/// [`add_string_column`] in the cluster at `bootstrap_servers`.
pub async fn add_string_column_at(bootstrap_servers: &str, path: &TablePath, name: &str) {
    use fluss::metadata::{AddColumn, AlterTableChanges, ColumnPositionType, DataTypes, JsonSerde};
    let admin = (connection_to(bootstrap_servers).await)
        .get_admin()
        .expect("an admin client");
    let data_type = DataTypes::string().serialize_json().expect("a type's JSON");
    let changes = AlterTableChanges {
        add_columns: vec![AddColumn {
            column_name: name.to_string(),
            data_type_json: serde_json::to_vec(&data_type).expect("JSON bytes"),
            comment: None,
            position: ColumnPositionType::Last,
        }],
        ..AlterTableChanges::default()
    };
    let fluss = fluss_path(path);
    admin
        .alter_table(&fluss, false, changes)
        .await
        .expect("Fluss adds a nullable column at the end");
}

/// Maps JSON `payloads` to rows of `kind` for `schema`'s table and writes
/// them with `w` (messages at offsets 0, 1, ...), failing the test when
/// the write fails as a whole.
pub async fn write_json(
    w: &FlussWriter,
    schema: &iggy_connector_fluss_sink::TableSchema,
    kind: fluss_row_codec::RowKind,
    payloads: &[&str],
) -> iggy_connector_fluss_sink::WriteReport {
    use iggy_connector_fluss_sink::DeadLetterKind;
    use iggy_connector_fluss_sink::JsonMapping;
    let batch = crate::text_batch(payloads);
    let output = JsonMapping::new(schema, kind).map_batch(&batch);
    w.write(
        &batch,
        MadeRows::new(output, DeadLetterKind::Mapping),
        &schema.path,
    )
    .await
    .expect("the write completes")
}

/// Every row of a log table (all its buckets), each as its cells' text,
/// once at least `expected` rows have arrived and the table then stayed
/// quiet for two polls (a late duplicate is seen), or `timeout` passed.
pub async fn read_log(path: &TablePath, expected: usize, timeout: Duration) -> Vec<Vec<String>> {
    read_log_at(&bootstrap(), path, expected, timeout).await
}

/// [`read_log`] from the cluster at `bootstrap_servers`; every partition
/// of a partitioned table. A read that ends short of `expected` rows says
/// how many rows Fluss's offsets count in the table (unpartitioned), and
/// when those are more than it read, reads once more on a new connection:
/// a row acknowledged to the sink but not yet seen by this client's
/// scanner is then told from a row that is not in Fluss.
pub async fn read_log_at(
    bootstrap_servers: &str,
    path: &TablePath,
    expected: usize,
    timeout: Duration,
) -> Vec<Vec<String>> {
    let read = read_log_once(bootstrap_servers, path, expected, timeout).await;
    if read.len() >= expected {
        return read;
    }
    let held = rows_held(bootstrap_servers, path).await;
    eprintln!(
        "read-back of {path}: {} of {expected} row(s) in {timeout:?}; Fluss's offsets count {held:?}",
        read.len()
    );
    match held {
        Some(held) if held > read.len() => {
            let again = read_log_once(bootstrap_servers, path, expected, timeout).await;
            eprintln!(
                "read-back of {path} again, on a new connection: {} row(s)",
                again.len()
            );
            again
        }
        _ => read,
    }
}

/// How many rows the offsets of unpartitioned log table `path` count (the
/// latest offset less the earliest, over its buckets); `None` for a
/// partitioned table or when Fluss does not say.
async fn rows_held(bootstrap_servers: &str, path: &TablePath) -> Option<usize> {
    use fluss::rpc::message::OffsetSpec;
    let conn = connection_to(bootstrap_servers).await;
    let fluss = fluss_path(path);
    let info = conn.get_table(&fluss).await.ok()?.get_table_info().clone();
    if !info.get_partition_keys().is_empty() {
        return None;
    }
    let buckets: Vec<i32> = (0..info.get_num_buckets()).collect();
    let admin = conn.get_admin().ok()?;
    let earliest = admin
        .list_offsets(&fluss, &buckets, OffsetSpec::Earliest)
        .await
        .ok()?;
    let latest = admin
        .list_offsets(&fluss, &buckets, OffsetSpec::Latest)
        .await
        .ok()?;
    buckets
        .iter()
        .map(|b| Some((latest.get(b)? - earliest.get(b)?).max(0) as usize))
        .sum()
}

async fn read_log_once(
    bootstrap_servers: &str,
    path: &TablePath,
    expected: usize,
    timeout: Duration,
) -> Vec<Vec<String>> {
    let conn = connection_to(bootstrap_servers).await;
    let fluss = fluss_path(path);
    let table = conn.get_table(&fluss).await.unwrap();
    let info = table.get_table_info();
    let buckets = info.get_num_buckets();
    let scanner = table.new_scan().create_record_batch_log_scanner().unwrap();
    if info.get_partition_keys().is_empty() {
        for bucket in 0..buckets {
            scanner.subscribe(bucket, EARLIEST_OFFSET).await.unwrap();
        }
    } else {
        let partitions = conn
            .get_admin()
            .unwrap()
            .list_partition_infos(&fluss)
            .await
            .unwrap();
        for partition in &partitions {
            for bucket in 0..buckets {
                scanner
                    .subscribe_partition(partition.get_partition_id(), bucket, EARLIEST_OFFSET)
                    .await
                    .unwrap();
            }
        }
    }
    poll_rows(&scanner, expected, timeout).await
}

/// The row count of each record batch of unpartitioned log table `path`,
/// in log order (a bucket at a time), read as [`read_log`] reads.
pub async fn read_log_batch_sizes(path: &TablePath, expected: usize, timeout: Duration) -> Vec<usize> {
    let conn = connection().await;
    let fluss = fluss_path(path);
    let table = conn.get_table(&fluss).await.unwrap();
    let scanner = table.new_scan().create_record_batch_log_scanner().unwrap();
    for bucket in 0..table.get_table_info().get_num_buckets() {
        scanner.subscribe(bucket, EARLIEST_OFFSET).await.unwrap();
    }
    let batches = poll_batches(&scanner, expected, timeout).await;
    batches.iter().map(|b| b.num_rows()).collect()
}

/// Creates log table `path` (and its database) with `columns` (name, type)
/// over 3 buckets keyed by column `bucket_key`: fluss-rs splits an Arrow
/// batch across such a table's buckets, so the sink appends there row by
/// row, never on the lean path.
pub async fn create_bucketed_log_table(
    path: &TablePath,
    columns: &[(&str, fluss::metadata::DataType)],
    bucket_key: &str,
) {
    use fluss::metadata::{Schema, TableDescriptor};
    let mut schema = Schema::builder();
    for (name, data_type) in columns {
        schema = schema.column(*name, data_type.clone());
    }
    let descriptor = TableDescriptor::builder()
        .schema(schema.build().unwrap())
        .distributed_by(Some(3), vec![bucket_key.to_string()])
        .build()
        .unwrap();
    create_table_up(&bootstrap(), path, &descriptor).await;
}

/// Creates table `path` (and its database) at `bootstrap_servers` as
/// `descriptor` says, and returns once each of its buckets has a leader.
/// Fluss 0.9.1's coordinator can miss a new table's creation and never
/// bring it up (apache/fluss#1018): such a table, still without a leader
/// 15 s later, is dropped and created again (at most twice), as the sink
/// does with its own (`host/src/writer/tables/birth.rs`).
pub async fn create_table_up(
    bootstrap_servers: &str,
    path: &TablePath,
    descriptor: &fluss::metadata::TableDescriptor,
) {
    use fluss::metadata::TableBucket;
    let conn = connection_to(bootstrap_servers).await;
    let admin = conn.get_admin().unwrap();
    let fluss = fluss_path(path);
    admin.create_database(&path.database, None, true).await.unwrap();
    for attempt in 0..3 {
        admin.create_table(&fluss, descriptor, false).await.unwrap();
        let created = Instant::now();
        while created.elapsed() < Duration::from_secs(15) {
            // A table just made may not open at once: look again.
            if let Ok(table) = conn.get_table(&fluss).await {
                let info = table.get_table_info();
                let cluster = conn.get_metadata().get_cluster();
                if (0..info.get_num_buckets()).all(|b| {
                    cluster
                        .leader_for(&TableBucket::new(info.get_table_id(), b))
                        .is_some()
                }) {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        eprintln!(
            "table {path}: a bucket has no leader 15 s after it was created (try {} of 3): dropped",
            attempt + 1
        );
        admin.drop_table(&fluss, false).await.unwrap();
    }
    panic!("table {path}: Fluss never brought its buckets up, though it was created three times");
}

/// How often each value of the first (BIGINT) column appears in log
/// table `path` at `bootstrap_servers`, read as [`read_log_at`] reads.
pub fn id_counts(
    bootstrap_servers: &str,
    path: &TablePath,
    expected: usize,
    timeout: Duration,
) -> std::collections::BTreeMap<i64, usize> {
    count_ids(&block(read_log_at(bootstrap_servers, path, expected, timeout)))
}

/// The ids of `0..total` missing from `counts`, and those written more than once.
pub fn missing_and_repeated(
    total: u64,
    counts: &std::collections::BTreeMap<i64, usize>,
) -> (Vec<i64>, Vec<i64>) {
    let missing = (0..total as i64).filter(|id| !counts.contains_key(id)).collect();
    let repeated = counts
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, _)| *id)
        .collect();
    (missing, repeated)
}

/// How often the ids of a range may appear in a read-back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Times {
    /// Acknowledged: exactly once.
    Once,
    /// Reported as failed: at most once.
    AtMostOnce,
}

/// Fails the test unless each range's ids appear as often as its
/// [`Times`] says, and no id outside them appears at all.
pub fn assert_accounting(
    case: &str,
    counts: &std::collections::BTreeMap<i64, usize>,
    expected: &[(std::ops::Range<i64>, Times)],
) {
    for (range, times) in expected {
        for id in range.clone() {
            let n = counts.get(&id).copied().unwrap_or(0);
            match times {
                Times::Once => assert_eq!(n, 1, "{case}: id {id} of an acknowledged batch, exactly once"),
                Times::AtMostOnce => {
                    assert!(n <= 1, "{case}: id {id} of a failed batch appears {n} times")
                }
            }
        }
    }
    for id in counts.keys() {
        assert!(
            expected.iter().any(|(range, _)| range.contains(id)),
            "{case}: id {id} was never sent; expected only {expected:?}"
        );
    }
}

/// The newest partition Fluss's DAY auto-partitioning made of `path`,
/// once it has made `precreated` (its `num-precreate`): the name comes
/// from Fluss, not from this machine's clock, so a test that writes
/// into it survives midnight UTC (the partition stays until its
/// retention, days later). Fails the test after 10 s.
pub async fn newest_auto_partition(path: &TablePath, precreated: usize) -> String {
    let started = Instant::now();
    loop {
        let names = partition_names(path).await;
        if names.len() >= precreated {
            return names.last().expect("at least one partition").clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "Fluss made {} of the {precreated} partitions of {path} in 10 s: {names:?}",
            names.len()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Today's (UTC) and yesterday's DAY partition names (`yyyyMMdd`): one
/// of them is the oldest partition of a table auto-partitioned by day
/// made in the last 24 hours.
pub fn recent_days() -> [String; 2] {
    let today = chrono::Utc::now().date_naive();
    let yesterday = today.pred_opt().expect("a yesterday");
    [today, yesterday].map(|d| d.format("%Y%m%d").to_string())
}

/// The names of a partitioned table's partitions, sorted.
pub async fn partition_names(path: &TablePath) -> Vec<String> {
    let conn = connection().await;
    let admin = conn.get_admin().unwrap();
    let fluss = fluss_path(path);
    let mut names: Vec<String> = admin
        .list_partition_infos(&fluss)
        .await
        .unwrap()
        .iter()
        .map(|p| p.get_partition_name())
        .collect();
    names.sort();
    names
}

/// Every row of one partition of a partitioned log table (all its
/// buckets), as [`read_log`] gives them; the partition must exist.
pub async fn read_partition(
    path: &TablePath,
    partition: &str,
    expected: usize,
    timeout: Duration,
) -> Vec<Vec<String>> {
    read_partition_at(&bootstrap(), path, partition, expected, timeout).await
}

/// [`read_partition`] on the cluster at `bootstrap_servers`.
pub async fn read_partition_at(
    bootstrap_servers: &str,
    path: &TablePath,
    partition: &str,
    expected: usize,
    timeout: Duration,
) -> Vec<Vec<String>> {
    let conn = connection_to(bootstrap_servers).await;
    let fluss = fluss_path(path);
    let admin = conn.get_admin().unwrap();
    let id = admin
        .list_partition_infos(&fluss)
        .await
        .unwrap()
        .iter()
        .find(|p| p.get_partition_name() == partition)
        .unwrap_or_else(|| panic!("{path} has no partition `{partition}`"))
        .get_partition_id();
    let table = conn.get_table(&fluss).await.unwrap();
    let buckets = table.get_table_info().get_num_buckets();
    let scanner = table.new_scan().create_record_batch_log_scanner().unwrap();
    for bucket in 0..buckets {
        scanner
            .subscribe_partition(id, bucket, EARLIEST_OFFSET)
            .await
            .unwrap();
    }
    poll_rows(&scanner, expected, timeout).await
}

/// How often each value of the first (BIGINT) column appears in `rows`.
pub fn count_ids(rows: &[Vec<String>]) -> std::collections::BTreeMap<i64, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for row in rows {
        *counts.entry(row[0].parse::<i64>().unwrap()).or_insert(0) += 1;
    }
    counts
}

async fn poll_rows(
    scanner: &fluss::client::RecordBatchLogScanner,
    expected: usize,
    timeout: Duration,
) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for batch in poll_batches(scanner, expected, timeout).await {
        for r in 0..batch.num_rows() {
            rows.push(
                batch
                    .columns()
                    .iter()
                    .map(|c| array_value_to_string(c, r).unwrap())
                    .collect::<Vec<_>>(),
            );
        }
    }
    rows
}

/// The record batches of the log as the scanner gives them (one per batch
/// the writer appended), read until `expected` rows are in and then until
/// two polls are quiet.
async fn poll_batches(
    scanner: &fluss::client::RecordBatchLogScanner,
    expected: usize,
    timeout: Duration,
) -> Vec<arrow::record_batch::RecordBatch> {
    // Past the expected count the table is read until it has been
    // quiet for two polls, so that a duplicate arriving late is seen.
    let mut batches = Vec::new();
    let mut rows = 0;
    let started = Instant::now();
    let mut quiet_polls = 0;
    while started.elapsed() < timeout {
        let before = rows;
        for batch in scanner.poll(Duration::from_millis(500)).await.unwrap() {
            rows += batch.batch().num_rows();
            batches.push(batch.batch().clone());
        }
        quiet_polls = if rows == before { quiet_polls + 1 } else { 0 };
        if rows >= expected && quiet_polls >= 2 {
            break;
        }
    }
    batches
}

/// The columns of table `path` in Fluss now: each name and type (as Fluss
/// writes it, e.g. `BIGINT NOT NULL`).
pub async fn columns_of(path: &TablePath) -> Vec<(String, String)> {
    let conn = connection().await;
    let table = conn.get_table(&fluss_path(path)).await.expect("the table exists");
    let info = table.get_table_info();
    info.row_type()
        .fields()
        .iter()
        .map(|f| (f.name().to_string(), f.data_type().to_string()))
        .collect()
}
