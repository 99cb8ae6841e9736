//! Columns the sink adds to a table itself (`evolve_schema`): nullable, at
//! the end, as Fluss allows. Adding is idempotent across sinks: a column
//! that another client added meanwhile is taken as it is, so two sinks
//! adding the same column at once both go on.

use std::sync::Arc;
use std::time::Duration;

use fluss::metadata::{AddColumn, AlterTableChanges, ColumnPositionType, JsonSerde};

use super::{Table, expired, fluss_path, fluss_type};
use crate::deadline::Deadline;
use crate::schema::{Column, TablePath, TableSchema};
use crate::writer::{FlussWriter, WriteError};

/// How long the writer waits between looks for a column it added to show
/// in the table's metadata.
const SHOW_PAUSE: Duration = Duration::from_millis(100);

/// What [`FlussWriter::add_columns`] did.
#[derive(Debug, Clone)]
pub struct AddedColumns {
    /// The table's schema now, as the writer has it open.
    pub schema: TableSchema,
    /// The columns this call added.
    pub added: Vec<String>,
    /// The columns another client added first (Fluss refused them to this
    /// call as existing; the table has them now).
    pub found: Vec<String>,
    /// Each column Fluss refused, with its reason.
    pub refused: Vec<(String, String)>,
}

impl FlussWriter {
    /// Adds to the table at `path` those of `columns` it lacks (each made
    /// nullable, at the end, in order), then opens the table again with
    /// them, all within `deadline`. All are asked for at once; when Fluss
    /// refuses that, each is asked for alone, so that one bad name does not
    /// keep the others out. A column refused because another client added
    /// it meanwhile is taken as it is (see [`AddedColumns::found`]).
    pub async fn add_columns(
        &self,
        path: &TablePath,
        columns: &[Column],
        deadline: Deadline,
    ) -> Result<AddedColumns, WriteError> {
        let before = self.table(path, deadline).await?.schema.clone();
        let wanted: Vec<&Column> = columns.iter().filter(|c| !before.has_column(&c.name)).collect();
        let mut refused = Vec::new();
        if !wanted.is_empty() && self.alter(path, &wanted, deadline).await?.is_err() {
            for column in &wanted {
                if let Err(reason) = self.alter(path, &[column], deadline).await? {
                    refused.push((column.name.clone(), reason));
                }
            }
        }
        let schema = self.open_with(path, &wanted, &refused, deadline).await?;
        let added = wanted
            .iter()
            .filter(|c| schema.has_column(&c.name) && !refused.iter().any(|(name, _)| *name == c.name))
            .map(|c| c.name.clone())
            .collect();
        // A refusal for a column that is there now was a race another client won.
        let (raced, refused): (Vec<_>, Vec<_>) =
            refused.into_iter().partition(|(name, _)| schema.has_column(name));
        Ok(AddedColumns {
            schema,
            added,
            found: raced.into_iter().map(|(name, _)| name).collect(),
            refused,
        })
    }

    /// Routed `table` given the columns of `template` (the sink's table) it
    /// lacks, when `evolve_routed_tables` is on: rows are mapped onto the
    /// sink table's columns, so a routed table whose columns are the first
    /// of the template's takes the rest (added as with `evolve_schema`,
    /// nullable, at the end). `Ok(Err(reason))`: the table cannot take the
    /// rows (its columns are not the template's first, the cap, or Fluss
    /// refused a column); `Err`: the deadline passed first.
    pub(in crate::writer) async fn catch_up_routed(
        &self,
        table: Arc<Table>,
        template: &TableSchema,
        deadline: Deadline,
    ) -> Result<Result<Arc<Table>, String>, WriteError> {
        let Some(max_columns) = self.settings.evolve_routed_tables else {
            return Ok(Ok(table));
        };
        let (have, all) = (&table.schema.columns, &template.columns);
        if have.len() >= all.len() {
            return Ok(Ok(table));
        }
        let path = &table.schema.path;
        if let Some((ours, theirs)) = have
            .iter()
            .zip(all)
            .find(|(ours, theirs)| ours.name != theirs.name || ours.data_type != theirs.data_type)
        {
            return Ok(Err(format!(
                "evolve_schema cannot give it the columns of {} it lacks: its column `{}` {} is \
                 `{}` {} in {} (a routed table's columns must be the first of the sink table's)",
                template.path, ours.name, ours.data_type, theirs.name, theirs.data_type, template.path
            )));
        }
        if all.len() > max_columns {
            return Ok(Err(format!(
                "it would take the {} columns of {}, past max_table_columns = {max_columns}",
                all.len(),
                template.path
            )));
        }
        let lacking = &all[have.len()..];
        let added = self.add_columns(path, lacking, deadline).await?;
        if let Some((name, reason)) = added.refused.first() {
            return Ok(Err(format!("Fluss refused to add column `{name}`: {reason}")));
        }
        if !added.added.is_empty() {
            if let Some(metrics) = &self.metrics {
                metrics.schema_change(path, "added");
            }
            tracing::info!(
                table = %path,
                "table {path} changed: added column(s) {} of {} (evolve_schema, a routed table)",
                added.added.join(", "),
                template.path
            );
        }
        self.table(path, deadline).await.map(Ok)
    }

    /// Whether the table at `path` exists, asked within `deadline`.
    pub async fn table_exists_within(
        &self,
        path: &TablePath,
        deadline: Deadline,
    ) -> Result<bool, WriteError> {
        deadline
            .run(self.admin.table_exists(&fluss_path(path)))
            .await
            .map_err(|_| expired(path, "asking whether it exists:"))?
            .map_err(|source| WriteError::Catalog {
                table: path.to_string(),
                step: Some("cannot ask whether the table exists".into()),
                source: Box::new(source),
            })
    }

    /// One `ALTER TABLE … ADD COLUMN` of `columns`; `Ok(Err(reason))` when
    /// Fluss refuses it.
    async fn alter(
        &self,
        path: &TablePath,
        columns: &[&Column],
        deadline: Deadline,
    ) -> Result<Result<(), String>, WriteError> {
        let mut add_columns = Vec::with_capacity(columns.len());
        for column in columns {
            let nullable = Column {
                nullable: true,
                ..(*column).clone()
            };
            let data_type = fluss_type(&nullable)
                .serialize_json()
                .map_err(|e| WriteError::Table {
                    table: path.to_string(),
                    reason: format!("column `{}`: {e}", column.name),
                })?;
            add_columns.push(AddColumn {
                column_name: column.name.clone(),
                data_type_json: serde_json::to_vec(&data_type).expect("a JSON value serialises"),
                comment: None,
                position: ColumnPositionType::Last,
            });
        }
        let changes = AlterTableChanges {
            add_columns,
            ..AlterTableChanges::default()
        };
        let altered = deadline
            .run(self.admin.alter_table(&fluss_path(path), false, changes))
            .await
            .map_err(|_| expired(path, "adding columns to"))?;
        Ok(altered.map_err(|e| e.to_string()))
    }

    /// The table at `path` opened again until every one of `wanted` not
    /// `refused` shows in it (the metadata may lag the change a moment),
    /// or `deadline` passes.
    async fn open_with(
        &self,
        path: &TablePath,
        wanted: &[&Column],
        refused: &[(String, String)],
        deadline: Deadline,
    ) -> Result<TableSchema, WriteError> {
        loop {
            // The change is the caller's to tell (as columns added).
            let open = self.table(path, deadline).await?;
            self.follow_table(path, &open, deadline).await?;
            let schema = self.table(path, deadline).await?.schema.clone();
            let missing = wanted
                .iter()
                .filter(|c| !schema.has_column(&c.name))
                .any(|c| !refused.iter().any(|(name, _)| *name == c.name));
            if !missing {
                return Ok(schema);
            }
            if deadline.remaining() <= SHOW_PAUSE {
                return Err(expired(path, "waiting for added columns to show in"));
            }
            tokio::time::sleep(SHOW_PAUSE).await;
        }
    }
}
