//! The sink's table made from the fields of its first batch
//! (`evolve_schema` without `columns`): until then it has its keys from the
//! config and no columns, and the first batch's messages are all taken as
//! new fields (see the parent module).

use super::super::{Pipeline, PipelineError};
use crate::config::SinkConfig;
use crate::deadline::Deadline;
use crate::rows::metadata::{METADATA_COLUMNS, MetadataColumn, is_metadata_column};
use crate::schema::{Column, TablePath, TableSchema};

/// The sink's table before it is made from the first batch's fields
/// (`evolve_schema`, no `columns`): its keys from `config`, no columns.
pub(in crate::pipeline) fn not_made_yet(config: &SinkConfig, path: TablePath) -> TableSchema {
    TableSchema {
        path,
        columns: Vec::new(),
        primary_key: config.primary_key_columns.clone(),
        partition_keys: config.partition_keys.clone(),
        added_columns: 0,
    }
}

impl Pipeline {
    /// Creates the sink's table, `pending` (its keys, no columns yet), with
    /// `columns` (the key columns NOT NULL) and, with `include_metadata`,
    /// the metadata columns after them; makes the row stage for it. Gives
    /// `pending` as it is when a key column is not among `columns`.
    pub(super) async fn create_table(
        &self,
        pending: TableSchema,
        columns: &[Column],
        deadline: Deadline,
    ) -> Result<TableSchema, PipelineError> {
        let keys = pending.primary_key.iter().chain(&pending.partition_keys);
        if let Some(key) = keys.clone().find(|k| !columns.iter().any(|c| &c.name == *k)) {
            tracing::warn!(
                table = %self.table,
                "table {} cannot be created from this batch: no message has a value for its key column `{key}`",
                self.table
            );
            return Ok(pending);
        }
        let include_metadata = self.config.include_metadata;
        let mut made: Vec<Column> = columns
            .iter()
            .filter(|c| !(include_metadata && is_metadata_column(&c.name)))
            .map(|c| Column {
                nullable: !pending.primary_key.contains(&c.name),
                ..c.clone()
            })
            .collect();
        if include_metadata {
            for name in METADATA_COLUMNS {
                let data_type = MetadataColumn::of(name).expect("a metadata column").data_type();
                made.push(Column::new(name, data_type, true));
            }
        }
        let schema = self
            .writer
            .ensure_table_within(
                &TableSchema {
                    columns: made,
                    ..pending
                },
                deadline,
            )
            .await?;
        self.metrics.schema_change(&self.table, "created");
        tracing::info!(
            table = %self.table,
            "table {} created from the fields of the first batch (evolve_schema): {}",
            self.table,
            crate::pipeline::follow::column_names(&schema)
        );
        self.remake_stage(&schema, deadline).await?;
        Ok(schema)
    }

    /// Why the sink's table, `pending`, could not be made of the `wanted`
    /// columns of a batch.
    pub(super) fn not_made(&self, pending: &TableSchema, wanted: &[Column]) -> String {
        let keys = pending.primary_key.iter().chain(&pending.partition_keys);
        let why = match keys.clone().find(|k| !wanted.iter().any(|c| &c.name == *k)) {
            Some(key) => format!("no message of the batch has a value for its key column `{key}`"),
            None => "no message of the batch has a field with a value to make a column of".into(),
        };
        format!(
            "table {} does not exist yet and cannot be created from this batch (evolve_schema): {why}",
            self.table
        )
    }
}
