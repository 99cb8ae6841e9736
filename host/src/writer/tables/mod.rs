//! The tables a writer writes to: opened once and kept (schema, Arrow
//! schema, the fluss-rs writer), created when the config declares them, and
//! routed tables resolved by name.

mod birth;
mod coordinator;
mod evolve;
mod follow;
pub(in crate::writer) mod routing;

pub(in crate::writer) use birth::Births;
pub(in crate::writer) use coordinator::KnownTables;
pub use evolve::AddedColumns;
pub use follow::SchemaChange;

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use fluss::client::AppendWriter;
use fluss::metadata::{DataTypes, Schema as FlussSchema, TableDescriptor, TablePath as FlussPath};

use crate::deadline::Deadline;
use crate::schema::{Column, DataType, TablePath, TableSchema};
use crate::writer::partitions::Partitioning;
use crate::writer::send::partial::KeyedSink;
use crate::writer::{FlussWriter, WriteError};

/// The fluss-rs writer of one table.
pub(in crate::writer) enum Sink {
    Log(AppendWriter),
    Keyed(Box<KeyedSink>),
}

/// How a table takes rows, chosen once when it is opened: what a row stage
/// makes a batch's rows into for it, and how the writer sends them.
#[derive(Debug, Clone)]
pub enum TableKind {
    /// A log table whose appended Arrow batches land whole (no bucket key,
    /// or one bucket; partitioned or not): Arrow columns of this schema,
    /// appended (a partitioned table's cut by partition first).
    Columns(SchemaRef),
    /// An unpartitioned primary-key table: whole fluss-rs rows, upserted
    /// and deleted through its upsert writer.
    KeyedRows,
    /// Any other table (a log table whose batches fluss-rs would split
    /// across buckets, a partitioned primary-key table): encoded rows, sent
    /// row by row. Partial updates go this way on any primary-key table.
    Rows,
}

/// An open table.
pub(in crate::writer) struct Table {
    pub schema: TableSchema,
    pub arrow_schema: SchemaRef,
    pub sink: Sink,
    /// How it takes rows.
    pub kind: TableKind,
    /// The table's partitions, when it is partitioned.
    pub partitioning: Option<Partitioning>,
    /// Fluss's id of the table when it was opened: another id at the same
    /// path is a table made again (see [`follow`]).
    pub table_id: i64,
    /// Fluss's id of the table's schema when it was opened: another id is
    /// a schema that changed (see [`follow`]).
    pub schema_id: i32,
}

impl Table {
    /// Whether Arrow columns are appended here ([`TableKind::Columns`]).
    pub(in crate::writer) fn takes_columns(&self) -> bool {
        matches!(self.kind, TableKind::Columns(_))
    }

    /// Whether whole fluss-rs rows are upserted here ([`TableKind::KeyedRows`]).
    pub(in crate::writer) fn takes_keyed_rows(&self) -> bool {
        matches!(self.kind, TableKind::KeyedRows)
    }
}

pub(in crate::writer) fn fluss_path(path: &TablePath) -> FlussPath {
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

/// The Arrow schema fluss-rs appends to a table of `schema`'s columns (what
/// an open table's `arrow_schema` is, without asking the cluster), for
/// tests and benchmarks.
#[cfg(any(test, feature = "test-support"))]
pub(crate) fn arrow_schema_of(schema: &TableSchema) -> Result<SchemaRef, String> {
    let fields = schema
        .columns
        .iter()
        .map(|c| fluss::metadata::DataField::new(c.name.clone(), fluss_type(c), None))
        .collect();
    fluss::record::to_arrow_schema(&fluss::metadata::RowType::new(fields)).map_err(|e| e.to_string())
}

fn expired(path: &TablePath, step: &str) -> WriteError {
    WriteError::DeadlinePassed {
        step: format!("{step} {path}"),
    }
}

impl FlussWriter {
    /// Creates `schema`'s database and table when absent, then opens it, all
    /// within `deadline`.
    pub async fn ensure_table_within(
        &self,
        schema: &TableSchema,
        deadline: Deadline,
    ) -> Result<TableSchema, WriteError> {
        let path = &schema.path;
        let fail = |reason: String| WriteError::Table {
            table: path.to_string(),
            reason,
        };
        let refused = |step: &str, source| WriteError::Catalog {
            table: path.to_string(),
            step: Some(step.into()),
            source: Box::new(source),
        };
        deadline
            .run(self.admin.create_database(&path.database, None, true))
            .await
            .map_err(|_| expired(path, "creating the database"))?
            .map_err(|e| refused("cannot create database", e))?;
        let mut builder = FlussSchema::builder();
        for column in &schema.columns {
            builder = builder.column(column.name.clone(), fluss_type(column));
        }
        if !schema.primary_key.is_empty() {
            builder = builder
                .primary_key(schema.primary_key.clone())
                .map_err(|e| fail(e.to_string()))?;
        }
        // Auto-partitioning applies to partitioned tables only (the dead-letter
        // table, for one, is not).
        let properties: HashMap<&String, &String> = self
            .settings
            .table_properties
            .iter()
            .filter(|(k, _)| schema.is_partitioned() || !k.starts_with("table.auto-partition."))
            .collect();
        let descriptor = TableDescriptor::builder()
            .schema(builder.build().map_err(|e| fail(e.to_string()))?)
            .partitioned_by(schema.partition_keys.clone())
            .distributed_by(self.settings.bucket_count, Vec::new())
            .properties(properties)
            .build()
            .map_err(|e| fail(e.to_string()))?;
        self.create_table_up(path, &descriptor, deadline).await?;
        Ok(self.table(path, deadline).await?.schema.clone())
    }

    /// The open table at `path`, opened now if it was not yet. The RPC runs
    /// outside the tables lock, so one slow table delays no other.
    pub(in crate::writer) async fn table(
        &self,
        path: &TablePath,
        deadline: Deadline,
    ) -> Result<Arc<Table>, WriteError> {
        if let Some(t) = self.tables.lock().await.get(path) {
            return Ok(t.clone());
        }
        let opened = Arc::new(self.open_table(path, deadline).await?);
        self.sweeper.sweep_now().await;
        let mut tables = self.tables.lock().await;
        Ok(tables.entry(path.clone()).or_insert(opened).clone())
    }

    /// How the table at `path` takes rows (opened now if it was not yet).
    pub async fn table_kind(&self, path: &TablePath, deadline: Deadline) -> Result<TableKind, WriteError> {
        Ok(self.table(path, deadline).await?.kind.clone())
    }

    /// The schema of the table at `path` as the writer has it open now
    /// (`None` when it is not open), never waiting for Fluss.
    pub async fn open_schema(&self, path: &TablePath) -> Option<TableSchema> {
        Some(self.open_table_now(path).await?.schema.clone())
    }

    /// The table at `path` if it is open already (never waits for Fluss).
    pub(in crate::writer) async fn open_table_now(&self, path: &TablePath) -> Option<Arc<Table>> {
        self.tables.lock().await.get(path).cloned()
    }

    /// The open tables rows may be routed to now (see
    /// [`crate::writer::tables::routing::Router::refusal`]), by path.
    pub(in crate::writer) async fn routable_open_tables(&self) -> Vec<(TablePath, Arc<Table>)> {
        let open: Vec<(TablePath, Arc<Table>)> = (self.tables.lock().await.iter())
            .map(|(path, table)| (path.clone(), table.clone()))
            .collect();
        open.into_iter()
            .filter(|(path, _)| self.router.refusal(path).is_none())
            .collect()
    }

    async fn open_table(&self, path: &TablePath, deadline: Deadline) -> Result<Table, WriteError> {
        let fail = |reason: String| WriteError::Table {
            table: path.to_string(),
            reason,
        };
        let table = deadline
            .run(self.connection.get_table(&fluss_path(path)))
            .await
            .map_err(|_| expired(path, "opening the table"))?
            .map_err(|source| WriteError::Catalog {
                table: path.to_string(),
                step: None,
                source: Box::new(source),
            })?;
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
            partition_keys: info.get_partition_keys().to_vec(),
            added_columns: 0,
        };
        let partitioning = Partitioning::of(
            &schema,
            info.is_auto_partitioned(),
            self.settings.auto_create_partitions,
        )
        .map_err(fail)?;
        let arrow_schema = fluss::record::to_arrow_schema(row_type).map_err(|e| fail(e.to_string()))?;
        // Should the connection have no writer client (the writer makes one
        // at connect and at each renewal), the one made here also sends from
        // this writer's sender thread.
        let on_sender = self.sender.enter();
        let sink = if table.has_primary_key() {
            Sink::Keyed(
                table
                    .new_upsert()
                    .and_then(KeyedSink::new)
                    .map(Box::new)
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
        drop(on_sender);
        let whole_batches = !info.has_bucket_key() || info.get_num_buckets() <= 1;
        let kind = match &sink {
            Sink::Log(_) if whole_batches => TableKind::Columns(arrow_schema.clone()),
            Sink::Keyed(_) if partitioning.is_none() => TableKind::KeyedRows,
            _ => TableKind::Rows,
        };
        Ok(Table {
            schema,
            arrow_schema,
            sink,
            kind,
            partitioning,
            table_id: info.get_table_id(),
            schema_id: info.get_schema_id(),
        })
    }

    /// Resolves a routed table: opens it, or creates it like `template` when
    /// `auto_create_table` is on. `Ok(Err(reason))`: the table cannot be had
    /// (its rows dead-letter); `Err`: the deadline passed first.
    pub(in crate::writer) async fn resolve(
        &self,
        path: &TablePath,
        template: &TableSchema,
        deadline: Deadline,
    ) -> Result<Result<Arc<Table>, String>, WriteError> {
        let unusable = |e: WriteError| match e {
            e @ WriteError::DeadlinePassed { .. } => Err(e),
            e => Ok(Err(e.to_string())),
        };
        match self.table(path, deadline).await {
            Ok(t) => Ok(Ok(t)),
            Err(e @ WriteError::DeadlinePassed { .. }) => Err(e),
            Err(e) if self.settings.auto_create_table => {
                tracing::info!(table = %path, "creating routed table like {}: {e}", template.path);
                let schema = TableSchema {
                    path: path.clone(),
                    ..template.clone()
                };
                if let Err(e) = self.ensure_table_within(&schema, deadline).await {
                    return unusable(e);
                }
                self.table(path, deadline)
                    .await
                    .map_or_else(unusable, |t| Ok(Ok(t)))
            }
            Err(e) => Ok(Err(format!("{e} (auto_create_table is off)"))),
        }
    }
}
