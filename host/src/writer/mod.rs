//! Writes rows to Apache Fluss through `fluss-rs`: Arrow record batches
//! appended to log tables, upserts and deletes on primary-key tables, every
//! write's acknowledgement awaited, transient failures retried with backoff
//! within a delivery timeout, permanent ones sent to the dead-letter table.

mod arrow_ipc;
mod arrow_rows;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arrow::datatypes::SchemaRef;
use fluss::client::{AppendWriter, FlussAdmin, FlussConnection, UpsertWriter, WriteResultFuture};
use fluss::metadata::{DataTypes, Schema as FlussSchema, TableDescriptor, TablePath as FlussPath};
use fluss::row::GenericRow;
use fluss_row_codec::{RowKind, RowView};
use tokio::sync::Mutex;

use crate::batch::MessageBatch;
use crate::rows::{MessageOutcome, TransformOutput, check_row};
use crate::schema::{Column, DataType, TablePath, TableSchema};

pub use arrow_rows::decimal_unscaled;

/// The Arrow record batch the writer appends for `output`'s rows of the
/// sink's own table (rows must fit `schema`; `arrow_schema` is Fluss's Arrow
/// form of it). Public so that benchmarks can hand fluss-rs the same batch.
pub fn to_record_batch(
    output: &TransformOutput,
    schema: &TableSchema,
    arrow_schema: &SchemaRef,
) -> Result<arrow::record_batch::RecordBatch, String> {
    let rows: Vec<RowView<'_>> = output
        .rows
        .iter()
        .filter(|(e, _)| e.table == 0)
        .map(|(_, row)| row)
        .collect();
    arrow_rows::record_batch(&rows, schema, arrow_schema)
}

/// How the writer connects and how hard it tries.
#[derive(Debug, Clone)]
pub struct WriterSettings {
    /// `host:port` of the Fluss coordinator(s), comma-separated.
    pub bootstrap_servers: String,
    /// SASL/PLAIN credentials, if the cluster needs them.
    pub sasl: Option<(String, String)>,
    /// The longest a batch may take to be acknowledged, retries included.
    pub delivery_timeout: Duration,
    /// How many times a write that failed transiently is sent again.
    pub max_retries: u32,
    /// First backoff between retries; doubles each time, with jitter, up to 5 s.
    pub retry_backoff: Duration,
    /// The longest a write may wait for room in the client's buffer.
    pub buffer_wait_timeout: Duration,
    /// The longest rows wait in the client's buffer for more rows before
    /// being sent; the writer flushes at the end of each batch regardless.
    pub batch_timeout: Duration,
    /// Where dead letters go; `None` logs them at error level only.
    pub dead_letter_table: Option<TablePath>,
    /// Create a routed table that does not exist, with the sink table's schema.
    pub auto_create_table: bool,
    /// Buckets of tables the sink creates.
    pub bucket_count: Option<i32>,
    /// Fill metadata columns from the messages (see [`crate::metadata`]).
    pub include_metadata: bool,
}

impl Default for WriterSettings {
    fn default() -> Self {
        Self {
            bootstrap_servers: "127.0.0.1:9123".into(),
            sasl: None,
            delivery_timeout: Duration::from_secs(120),
            max_retries: 10,
            retry_backoff: Duration::from_millis(100),
            buffer_wait_timeout: Duration::from_secs(30),
            batch_timeout: Duration::from_millis(100),
            dead_letter_table: None,
            auto_create_table: false,
            bucket_count: None,
            include_metadata: false,
        }
    }
}

/// Why a write failed as a whole.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// No connection to the cluster.
    #[error("cannot connect to Fluss at {servers}: {reason}")]
    Connect {
        /// The bootstrap servers.
        servers: String,
        /// The client's message.
        reason: String,
    },
    /// A table could not be found, created or read.
    #[error("table {table}: {reason}")]
    Table {
        /// Which table.
        table: String,
        /// What went wrong.
        reason: String,
    },
    /// Fluss did not acknowledge a write within the delivery timeout or retries.
    #[error("Fluss did not acknowledge {what} within {timeout:?} and {retries} retries: {reason}")]
    Undelivered {
        /// What was being written.
        what: String,
        /// The delivery timeout.
        timeout: Duration,
        /// Retries made.
        retries: u32,
        /// The last error.
        reason: String,
    },
}

/// What became of a batch's messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteReport {
    /// Messages whose rows were all acknowledged.
    pub written: usize,
    /// Messages that became no rows.
    pub filtered: usize,
    /// Messages sent to the dead-letter table (or logged, without one).
    pub dead_lettered: usize,
}

/// A row waiting to be written: its message, its kind, its cells.
type PendingRow<'a> = (u32, RowKind, RowView<'a>);

enum Sink {
    Log(AppendWriter),
    Keyed(UpsertWriter),
}

struct Table {
    schema: TableSchema,
    arrow_schema: SchemaRef,
    sink: Sink,
    /// An appended Arrow batch lands in one bucket whole (no bucket key, or
    /// one bucket); otherwise fluss-rs splits it across buckets.
    whole_batches: bool,
}

/// The Fluss side of the sink: one connection, a writer per table.
pub struct FlussWriter {
    connection: FlussConnection,
    admin: Arc<FlussAdmin>,
    settings: WriterSettings,
    tables: Mutex<HashMap<TablePath, Arc<Table>>>,
}

fn fluss_path(path: &TablePath) -> FlussPath {
    FlussPath::new(path.database.clone(), path.table.clone())
}

fn fluss_type(column: &Column) -> fluss::metadata::DataType {
    let t = match column.data_type {
        DataType::Boolean => DataTypes::boolean(),
        DataType::TinyInt => DataTypes::tinyint(),
        DataType::SmallInt => DataTypes::smallint(),
        DataType::Int => DataTypes::int(),
        DataType::BigInt => DataTypes::bigint(),
        DataType::Float => DataTypes::float(),
        DataType::Double => DataTypes::double(),
        DataType::String => DataTypes::string(),
        DataType::Char(n) => DataTypes::char(n),
        DataType::Bytes => DataTypes::bytes(),
        DataType::Binary(n) => DataTypes::binary(n as usize),
        DataType::Decimal(p, s) => DataTypes::decimal(p as u32, s as u32),
        DataType::Date => DataTypes::date(),
        DataType::Time(p) => DataTypes::time_with_precision(p as u32),
        DataType::Timestamp(p) => DataTypes::timestamp_with_precision(p as u32),
        DataType::TimestampLtz(p) => DataTypes::timestamp_ltz_with_precision(p as u32),
    };
    if column.nullable { t } else { t.as_non_nullable() }
}

/// The dead-letter table's schema.
pub fn dead_letter_schema(path: TablePath) -> TableSchema {
    let col = |name: &str, t: DataType, nullable| Column::new(name, t, nullable);
    TableSchema {
        path,
        columns: vec![
            col("stream", DataType::String, true),
            col("topic", DataType::String, true),
            col("partition", DataType::Int, true),
            col("offset", DataType::BigInt, true),
            col("message_id", DataType::String, true),
            col("timestamp", DataType::TimestampLtz(6), true),
            col("payload", DataType::Bytes, true),
            col("error_kind", DataType::String, false),
            col("error", DataType::String, false),
            col("failed_at", DataType::TimestampLtz(6), false),
        ],
        primary_key: vec![],
    }
}

/// How long an acknowledgement may take before the writer refreshes the
/// table's metadata in the client (see `FlussWriter::refresh_table_metadata`).
const METADATA_NUDGE: Duration = Duration::from_secs(2);

fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// What to do about a failed write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// Send it again (after a backoff).
    Transient,
    /// Sending it again cannot succeed: dead-letter it.
    Permanent,
    /// The server does not know the table: permanent if the table is truly
    /// gone, transient if it exists (a restarted tablet server answers this
    /// until it has loaded its replicas).
    TableUnknown,
}

/// Sorts a write error. Only errors that no retry can fix are permanent;
/// anything else is retried within the delivery timeout, so that nothing is
/// dead-lettered (or lost) because a server restarted.
fn classify(error: &fluss::error::Error) -> Failure {
    use fluss::error::Error as E;
    use fluss::rpc::FlussError as F;
    if error.is_retriable() {
        return Failure::Transient;
    }
    match error.api_error() {
        Some(F::TableNotExist | F::UnknownTableOrBucketException | F::PartitionNotExists) => {
            Failure::TableUnknown
        }
        Some(
            F::RecordTooLargeException
            | F::InvalidTableException
            | F::NonPrimaryKeyTableException
            | F::InvalidColumnProjection
            | F::InvalidTargetColumn
            | F::InvalidTimestampException
            | F::TableNotPartitionedException
            | F::AuthorizationException
            | F::AuthenticateException
            | F::UnsupportedVersion
            | F::InvalidConfigException,
        ) => Failure::Permanent,
        Some(_) => Failure::Transient,
        None => match error {
            E::RowConvertError { .. }
            | E::IllegalArgument { .. }
            | E::ArrowError { .. }
            | E::JsonSerdeError { .. }
            | E::UnsupportedOperation { .. } => Failure::Permanent,
            _ => Failure::Transient,
        },
    }
}

impl FlussWriter {
    /// Connects to the cluster (the password is never logged).
    pub async fn connect(settings: WriterSettings) -> Result<Self, WriteError> {
        let mut config = fluss::config::Config {
            bootstrap_servers: settings.bootstrap_servers.clone(),
            writer_buffer_wait_timeout_ms: settings.buffer_wait_timeout.as_millis() as u64,
            writer_retries: settings.max_retries as i32,
            writer_batch_timeout_ms: settings.batch_timeout.as_millis() as i64,
            ..Default::default()
        };
        if let Some((user, password)) = &settings.sasl {
            config.security_protocol = "sasl".into();
            config.security_sasl_mechanism = "PLAIN".into();
            config.security_sasl_username = user.clone();
            config.security_sasl_password = password.clone();
        }
        let fail = |e: &dyn std::fmt::Display| WriteError::Connect {
            servers: settings.bootstrap_servers.clone(),
            reason: e.to_string(),
        };
        let connection = FlussConnection::new(config).await.map_err(|e| fail(&e))?;
        let admin = connection.get_admin().map_err(|e| fail(&e))?;
        admin.get_server_nodes().await.map_err(|e| fail(&e))?;
        let writer = Self {
            connection,
            admin,
            settings,
            tables: Mutex::new(HashMap::new()),
        };
        if let Some(path) = writer.settings.dead_letter_table.clone() {
            writer.ensure_table(&dead_letter_schema(path)).await?;
        }
        Ok(writer)
    }

    /// The settings in force.
    pub fn settings(&self) -> &WriterSettings {
        &self.settings
    }

    /// Creates `schema`'s database and table when absent, then opens it.
    pub async fn ensure_table(&self, schema: &TableSchema) -> Result<TableSchema, WriteError> {
        let fail = |reason: String| WriteError::Table {
            table: schema.path.to_string(),
            reason,
        };
        self.admin
            .create_database(&schema.path.database, None, true)
            .await
            .map_err(|e| fail(format!("cannot create database: {e}")))?;
        let mut builder = FlussSchema::builder();
        for column in &schema.columns {
            builder = builder.column(column.name.clone(), fluss_type(column));
        }
        if !schema.primary_key.is_empty() {
            builder = builder
                .primary_key(schema.primary_key.clone())
                .map_err(|e| fail(e.to_string()))?;
        }
        let descriptor = TableDescriptor::builder()
            .schema(builder.build().map_err(|e| fail(e.to_string()))?)
            .distributed_by(self.settings.bucket_count, Vec::new())
            .build()
            .map_err(|e| fail(e.to_string()))?;
        self.admin
            .create_table(&fluss_path(&schema.path), &descriptor, true)
            .await
            .map_err(|e| fail(format!("cannot create table: {e}")))?;
        Ok(self.table(&schema.path).await?.schema.clone())
    }

    /// The schema of an existing table, read from Fluss.
    pub async fn table_schema(&self, path: &TablePath) -> Result<TableSchema, WriteError> {
        Ok(self.table(path).await?.schema.clone())
    }

    async fn table(&self, path: &TablePath) -> Result<Arc<Table>, WriteError> {
        let mut tables = self.tables.lock().await;
        if let Some(t) = tables.get(path) {
            return Ok(t.clone());
        }
        let fail = |reason: String| WriteError::Table {
            table: path.to_string(),
            reason,
        };
        let table = self
            .connection
            .get_table(&fluss_path(path))
            .await
            .map_err(|e| fail(e.to_string()))?;
        let info = table.get_table_info();
        let row_type = info.row_type();
        let columns = row_type
            .fields()
            .iter()
            .map(|f| {
                let text = f.data_type().to_string();
                let data_type = text
                    .parse::<DataType>()
                    .map_err(|e| fail(format!("column `{}`: {e}", f.name())))?;
                Ok(Column::new(f.name(), data_type, f.data_type().is_nullable()))
            })
            .collect::<Result<Vec<_>, WriteError>>()?;
        let schema = TableSchema {
            path: path.clone(),
            columns,
            primary_key: info
                .get_schema()
                .primary_key_column_names()
                .iter()
                .map(|s| s.to_string())
                .collect(),
        };
        let arrow_schema = fluss::record::to_arrow_schema(row_type).map_err(|e| fail(e.to_string()))?;
        let sink = if table.has_primary_key() {
            Sink::Keyed(
                table
                    .new_upsert()
                    .and_then(|u| u.create_writer())
                    .map_err(|e| fail(e.to_string()))?,
            )
        } else {
            Sink::Log(
                table
                    .new_append()
                    .and_then(|a| a.create_writer())
                    .map_err(|e| fail(e.to_string()))?,
            )
        };
        let handle = Arc::new(Table {
            schema,
            arrow_schema,
            sink,
            whole_batches: !info.has_bucket_key() || info.get_num_buckets() <= 1,
        });
        tables.insert(path.clone(), handle.clone());
        Ok(handle)
    }

    /// Resolves a routed table: opens it, or creates it like `template` when
    /// `auto_create_table` is on.
    async fn resolve(&self, path: &TablePath, template: &TableSchema) -> Result<Arc<Table>, String> {
        match self.table(path).await {
            Ok(t) => Ok(t),
            Err(e) if self.settings.auto_create_table => {
                tracing::info!(table = %path, "creating routed table like {}: {e}", template.path);
                let schema = TableSchema {
                    path: path.clone(),
                    ..template.clone()
                };
                self.ensure_table(&schema).await.map_err(|e| e.to_string())?;
                self.table(path).await.map_err(|e| e.to_string())
            }
            Err(e) => Err(format!("{e} (auto_create_table is off)")),
        }
    }

    /// Writes `output`'s rows for `batch` to `default_table` and the tables
    /// the rows name, waits for every acknowledgement, and dead-letters what
    /// cannot be written; `stage` names where earlier dead letters came from.
    pub async fn write(
        &self,
        batch: &MessageBatch,
        mut output: TransformOutput,
        default_table: &TablePath,
        stage: &str,
    ) -> Result<WriteReport, WriteError> {
        let default = self.table(default_table).await?;
        let mut kinds: Vec<&str> = vec![stage; batch.len()];

        // Resolve every routed table; rows for one that cannot be had dead-letter their message.
        let mut routed: HashMap<u16, Arc<Table>> = HashMap::new();
        for (index, name) in output.rows.tables().iter().enumerate() {
            let index = index as u16 + 1;
            let resolved = match name.parse::<TablePath>() {
                Ok(path) => self.resolve(&path, &default.schema).await,
                Err(e) => Err(e.to_string()),
            };
            match resolved {
                Ok(t) => {
                    routed.insert(index, t);
                }
                Err(reason) => {
                    for (entry, _) in output.rows.iter() {
                        if entry.table == index {
                            output.outcomes[entry.message as usize] =
                                MessageOutcome::DeadLetter(format!("table {name}: {reason}"));
                            kinds[entry.message as usize] = "table";
                        }
                    }
                }
            }
        }
        let table_of = |t: u16| if t == 0 { Some(&default) } else { routed.get(&t) };
        if self.settings.include_metadata {
            crate::metadata::fill(&mut output, batch, |t| table_of(t).map(|t| &t.schema));
        }

        // Check every row against its table (the transform engine checks only
        // the tables it was given); a row that does not fit dead-letters its message.
        for (entry, row) in output.rows.iter() {
            let m = entry.message as usize;
            if matches!(output.outcomes[m], MessageOutcome::DeadLetter(_)) {
                continue;
            }
            let Some(table) = table_of(entry.table) else {
                continue;
            };
            let checked =
                check_row(&table.schema, &row).and_then(|()| arrow_rows::convertible(&row, &table.schema));
            if let Err(reason) = checked {
                output.outcomes[m] =
                    MessageOutcome::DeadLetter(format!("table {}: {reason}", table.schema.path));
                kinds[m] = "schema";
            }
        }

        // Group the rows of live messages by table, in order.
        let mut groups: Vec<(u16, Vec<PendingRow<'_>>)> = Vec::new();
        for (entry, row) in output.rows.iter() {
            if matches!(
                output.outcomes[entry.message as usize],
                MessageOutcome::DeadLetter(_)
            ) {
                continue;
            }
            match groups.iter_mut().find(|(t, _)| *t == entry.table) {
                Some((_, rows)) => rows.push((entry.message, entry.kind, row)),
                None => groups.push((entry.table, vec![(entry.message, entry.kind, row)])),
            }
        }

        let mut failures: Vec<(u32, String)> = Vec::new();
        for (table_index, rows) in &groups {
            let table = table_of(*table_index).expect("resolved above");
            self.write_group(table, rows, &mut failures).await?;
        }
        for (message, reason) in failures {
            output.outcomes[message as usize] = MessageOutcome::DeadLetter(reason);
            kinds[message as usize] = "write";
        }

        let mut report = WriteReport::default();
        let mut letters = Vec::new();
        for (i, outcome) in output.outcomes.iter().enumerate() {
            match outcome {
                MessageOutcome::Rows(0) => report.filtered += 1,
                MessageOutcome::Rows(_) => report.written += 1,
                MessageOutcome::DeadLetter(reason) => {
                    report.dead_lettered += 1;
                    letters.push((i, kinds[i], reason.as_str()));
                }
            }
        }
        self.dead_letter(batch, &letters).await?;
        Ok(report)
    }

    /// Appends Arrow IPC stream payloads to `table` (a log table) as they
    /// are; a payload that does not decode or fit is dead-lettered.
    pub async fn write_arrow_ipc(
        &self,
        batch: &MessageBatch,
        table: &TablePath,
    ) -> Result<WriteReport, WriteError> {
        let target = self.table(table).await?;
        let Sink::Log(writer) = &target.sink else {
            return Err(WriteError::Table {
                table: table.to_string(),
                reason: "arrow_ipc payloads go to log tables only".into(),
            });
        };
        let mut report = WriteReport::default();
        let mut letters = Vec::new();
        let mut reasons = Vec::new();
        for (i, message) in batch.iter().enumerate() {
            let record = match arrow_ipc::decode(message.payload, &target.arrow_schema) {
                Ok(b) => b,
                Err(reason) => {
                    reasons.push((i, reason));
                    continue;
                }
            };
            if record.num_rows() == 0 {
                report.filtered += 1;
                continue;
            }
            let what = format!("the Arrow rows of offset {} to {table}", message.offset);
            let ack = self.deliver(table, &what, true, || writer.append_arrow_batch(record.clone()));
            let (ack, ()) = tokio::join!(biased; ack, self.hurry(writer.flush()));
            match ack? {
                Ok(()) => report.written += 1,
                Err(reason) => reasons.push((i, reason)),
            }
        }
        for (i, reason) in &reasons {
            letters.push((*i, "arrow_ipc", reason.as_str()));
        }
        report.dead_lettered = letters.len();
        self.dead_letter(batch, &letters).await?;
        Ok(report)
    }

    /// Writes one table's rows; messages whose rows Fluss refuses for good
    /// are added to `failures`.
    async fn write_group(
        &self,
        table: &Table,
        rows: &[PendingRow<'_>],
        failures: &mut Vec<(u32, String)>,
    ) -> Result<(), WriteError> {
        let what = format!("{} rows for {}", rows.len(), table.schema.path);
        match &table.sink {
            Sink::Log(writer) if table.whole_batches => {
                // Bisect on a permanent error so that only the refused rows fail:
                // a refused batch was refused whole, so nothing is sent twice.
                let mut pending = vec![rows];
                while let Some(part) = pending.pop() {
                    let views: Vec<RowView<'_>> = part.iter().map(|(_, _, r)| *r).collect();
                    let batch = arrow_rows::record_batch(&views, &table.schema, &table.arrow_schema)
                        .map_err(|reason| WriteError::Table {
                            table: table.schema.path.to_string(),
                            reason,
                        })?;
                    let ack = self.deliver(&table.schema.path, &what, true, || {
                        writer.append_arrow_batch(batch.clone())
                    });
                    let (ack, ()) = tokio::join!(biased; ack, self.hurry(writer.flush()));
                    match ack? {
                        Ok(()) => {}
                        Err(reason) if part.len() == 1 => failures.push((part[0].0, reason)),
                        Err(_) => {
                            let mid = part.len() / 2;
                            pending.push(&part[mid..]);
                            pending.push(&part[..mid]);
                        }
                    }
                }
            }
            // A batch split across buckets could be refused in some and taken
            // in others: append row by row, each with its own acknowledgement.
            Sink::Log(writer) => {
                let send = |_: RowKind, row: &GenericRow<'static>| writer.append(row);
                self.write_rows(table, rows, &what, send, writer.flush(), failures)
                    .await?;
            }
            Sink::Keyed(writer) => {
                let send = |kind, row: &GenericRow<'static>| send_keyed(writer, kind, row);
                self.write_rows(table, rows, &what, send, writer.flush(), failures)
                    .await?;
            }
        }
        Ok(())
    }

    /// Sends `rows` one by one with `send`, then awaits each row's
    /// acknowledgement (sending again what failed transiently); messages
    /// whose rows are refused for good are added to `failures`.
    async fn write_rows(
        &self,
        table: &Table,
        rows: &[PendingRow<'_>],
        what: &str,
        send: impl Fn(RowKind, &GenericRow<'static>) -> fluss::error::Result<WriteResultFuture>,
        flush: impl Future<Output = fluss::error::Result<()>>,
        failures: &mut Vec<(u32, String)>,
    ) -> Result<(), WriteError> {
        let mut converted = Vec::with_capacity(rows.len());
        for (message, kind, row) in rows {
            match arrow_rows::generic_row(row, &table.schema) {
                Ok(g) => converted.push((*message, *kind, g)),
                Err(reason) => failures.push((*message, reason)),
            }
        }
        // Send everything first, then await: the client batches per bucket.
        let sent: Vec<_> = converted
            .iter()
            .map(|(m, kind, row)| (*m, *kind, row, send(*kind, row)))
            .collect();
        let acks = async {
            for (index, (message, kind, row, first)) in sent.into_iter().enumerate() {
                let mut first = Some(first);
                // A transient error hits every row alike: warn about the first
                // row's retries only, not once per row.
                let result = self
                    .deliver(&table.schema.path, what, index == 0, || {
                        first.take().unwrap_or_else(|| send(kind, row))
                    })
                    .await?;
                if let Err(reason) = result {
                    failures.push((message, reason));
                }
            }
            Ok::<(), WriteError>(())
        };
        let (acks, ()) = tokio::join!(biased; acks, self.hurry(flush));
        acks
    }

    /// Runs a client flush so that rows just sent leave without waiting for
    /// the client's batch timeout. Its result is not used: every row's own
    /// acknowledgement carries its error.
    async fn hurry(&self, flush: impl Future<Output = fluss::error::Result<()>>) {
        let _ = tokio::time::timeout(self.settings.delivery_timeout, flush).await;
    }

    /// Sends with `send` until acknowledged: transient errors are retried
    /// with exponential backoff and jitter, bounded by `max_retries` and the
    /// delivery timeout. `Ok(Err(reason))` is a permanent refusal. Retries
    /// are logged at warn level when `warn_on_retry`, at debug level otherwise.
    async fn deliver(
        &self,
        table: &TablePath,
        what: &str,
        warn_on_retry: bool,
        mut send: impl FnMut() -> fluss::error::Result<WriteResultFuture>,
    ) -> Result<Result<(), String>, WriteError> {
        let started = Instant::now();
        let timeout = self.settings.delivery_timeout;
        let mut backoff = self.settings.retry_backoff;
        let mut attempt = 0u32;
        loop {
            let result = match send() {
                Ok(future) => match self.acknowledgement(table, future, started).await {
                    Some(result) => result,
                    None => {
                        return Err(WriteError::Undelivered {
                            what: what.into(),
                            timeout,
                            retries: attempt,
                            reason: "no acknowledgement before the delivery timeout".into(),
                        });
                    }
                },
                Err(e) => Err(e),
            };
            let error = match result {
                Ok(()) => return Ok(Ok(())),
                Err(e) => e,
            };
            let failure = match classify(&error) {
                Failure::TableUnknown => match self.admin.table_exists(&fluss_path(table)).await {
                    Ok(false) => Failure::Permanent,
                    _ => {
                        // The client forgot the table (see `refresh_table_metadata`).
                        self.refresh_table_metadata(table).await;
                        Failure::Transient
                    }
                },
                other => other,
            };
            if failure == Failure::Permanent {
                return Ok(Err(format!("Fluss refused the write: {error}")));
            }
            attempt += 1;
            let jitter = backoff.mul_f64(fastrand::f64() * 0.5);
            if attempt > self.settings.max_retries || started.elapsed() + backoff + jitter >= timeout {
                return Err(WriteError::Undelivered {
                    what: what.into(),
                    timeout,
                    retries: attempt - 1,
                    reason: error.to_string(),
                });
            }
            let wait = backoff + jitter;
            if warn_on_retry {
                tracing::warn!(
                    attempt,
                    "transient Fluss error writing {what}, retrying in {wait:?}: {error}"
                );
            } else {
                tracing::debug!(
                    attempt,
                    "transient Fluss error writing {what}, retrying in {wait:?}: {error}"
                );
            }
            tokio::time::sleep(backoff + jitter).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }

    /// Waits for `ack` until the delivery timeout counted from `started`
    /// (`None` when it passes), refreshing the client's metadata of `table`
    /// whenever an acknowledgement is slow to come.
    async fn acknowledgement(
        &self,
        table: &TablePath,
        ack: WriteResultFuture,
        started: Instant,
    ) -> Option<fluss::error::Result<()>> {
        let deadline = tokio::time::Instant::from_std(started + self.settings.delivery_timeout);
        tokio::pin!(ack);
        loop {
            let nudge = (tokio::time::Instant::now() + METADATA_NUDGE).min(deadline);
            tokio::select! {
                result = &mut ack => return Some(result),
                () = tokio::time::sleep_until(nudge) => {
                    if nudge >= deadline {
                        return None;
                    }
                    self.refresh_table_metadata(table).await;
                }
            }
        }
    }

    /// Fetches `table`'s metadata into the client again. fluss-rs 1.0 rebuilds
    /// its cluster view from the bootstrap servers when no tablet server
    /// answers (a restart of the only one), and that view holds no tables: until
    /// something fetches the table again, new writes fail with "table not
    /// found" and batches already queued are never sent.
    async fn refresh_table_metadata(&self, table: &TablePath) {
        let metadata = self.connection.get_metadata();
        if let Err(e) = metadata.update_table_metadata(&fluss_path(table)).await {
            tracing::debug!(%table, "refreshing the table's metadata: {e}");
        }
    }

    /// Sends dead letters to the dead-letter table, or logs them without one.
    async fn dead_letter(
        &self,
        batch: &MessageBatch,
        letters: &[(usize, &str, &str)],
    ) -> Result<(), WriteError> {
        if letters.is_empty() {
            return Ok(());
        }
        let Some(path) = &self.settings.dead_letter_table else {
            for (i, kind, reason) in letters {
                let m = batch.get(*i);
                tracing::error!(
                    offset = m.offset,
                    kind,
                    "dead letter (no dead_letter_table configured): {reason}"
                );
            }
            return Ok(());
        };
        let table = self.table(path).await?;
        let Sink::Log(writer) = &table.sink else {
            return Err(WriteError::Table {
                table: path.to_string(),
                reason: "the dead-letter table must be a log table".into(),
            });
        };
        let failed_at = now_micros();
        let mut rows = fluss_row_codec::RowsBuilder::new();
        for (i, kind, reason) in letters {
            let m = batch.get(*i);
            rows.begin_row(RowKind::Append, 0);
            rows.string(&batch.source.stream);
            rows.string(&batch.source.topic);
            rows.int(batch.source.partition as i32);
            rows.bigint(m.offset as i64);
            rows.string(&m.id.to_string());
            rows.timestamp_ltz(m.timestamp as i64);
            rows.bytes(m.payload);
            rows.string(kind);
            rows.string(reason);
            rows.timestamp_ltz(failed_at);
            rows.end_row();
        }
        let bytes = rows.into_bytes();
        let views: Vec<RowView<'_>> = fluss_row_codec::Rows::new(&bytes)
            .map(|r| r.expect("just encoded"))
            .collect();
        let record =
            arrow_rows::record_batch(&views, &table.schema, &table.arrow_schema).map_err(|reason| {
                WriteError::Table {
                    table: path.to_string(),
                    reason,
                }
            })?;
        let what = format!("{} dead letters to {path}", letters.len());
        let ack = self.deliver(path, &what, true, || writer.append_arrow_batch(record.clone()));
        let (ack, ()) = tokio::join!(biased; ack, self.hurry(writer.flush()));
        match ack? {
            Ok(()) => Ok(()),
            Err(reason) => Err(WriteError::Table {
                table: path.to_string(),
                reason,
            }),
        }
    }

    /// Closes the connection, waiting up to `timeout` for in-flight writes.
    pub async fn close(&self, timeout: Duration) {
        if let Err(e) = self.connection.close(timeout).await {
            tracing::warn!("closing the Fluss connection: {e}");
        }
    }
}

fn send_keyed(
    writer: &UpsertWriter,
    kind: RowKind,
    row: &GenericRow<'static>,
) -> fluss::error::Result<WriteResultFuture> {
    match kind {
        RowKind::Delete => writer.delete(row),
        _ => writer.upsert(row),
    }
}
