//! Columns the sink adds for JSON fields its table lacks (`evolve_schema`).
//!
//! The JSON mapping refuses a message with such a field (its value not
//! `null`) instead of dropping the field. A batch is written up to the
//! first message (a lean chunk: up to that chunk) refused so; then the
//! columns the rest of the batch needs are added to the table (typed from
//! the JSON values, nullable, at the end, at most `max_table_columns` in
//! all), the row stage is made again for them, and the rest is written
//! with it. The rows of a batch reach Fluss in message order, and a field
//! that cannot have a column (past the cap, a name Fluss refuses) sends
//! its message to the dead letters (`schema`) with the reason.

use std::collections::HashMap;
use std::sync::Arc;

use fluss_row_codec::json::field_types;

use super::{Held, Pipeline, PipelineError};

mod create;

use crate::batch::{MessageBatch, PayloadSchema};
use crate::deadline::Deadline;
use crate::rows::json::new_field_of;
use crate::rows::{DeadLetterKind, MessageOutcome};
use crate::schema::{Column, DataType, TableSchema};
use crate::writer::{FlussWriter, MadeChunks, WriteReport};
pub(in crate::pipeline) use create::not_made_yet;

/// The index of the first message `outcomes` says was refused for a field
/// its table lacks.
pub(super) fn first_new_field(outcomes: &[MessageOutcome]) -> Option<usize> {
    outcomes.iter().position(|o| new_field_of(o).is_some())
}

/// Chunks of a batch up to the first one with a message refused for a field
/// its table lacks: that one and the rest are left, and where they start
/// is kept.
pub(super) struct UntilNewField<C> {
    chunks: C,
    next: usize,
    stopped_at: Option<usize>,
}

impl<C> UntilNewField<C> {
    pub(super) fn new(chunks: C) -> Self {
        Self {
            chunks,
            next: 0,
            stopped_at: None,
        }
    }

    /// Where the chunks stopped: the first message of the chunk that had
    /// a field its table lacks (`None`: every chunk was given).
    pub(super) fn stopped_at(&self) -> Option<usize> {
        self.stopped_at
    }
}

impl<C> MadeChunks for UntilNewField<C>
where
    C: MadeChunks<Chunk = crate::rows::columns::ColumnOutput>,
{
    type Chunk = C::Chunk;

    async fn next_chunk(&mut self) -> Option<Self::Chunk> {
        if self.stopped_at.is_some() {
            return None;
        }
        let chunk = self.chunks.next_chunk().await?;
        if first_new_field(&chunk.outcomes).is_some() {
            self.stopped_at = Some(self.next);
            return None;
        }
        self.next += chunk.outcomes.len();
        Some(chunk)
    }

    fn next_is_made(&self) -> bool {
        self.stopped_at.is_some() || self.chunks.next_is_made()
    }
}

/// The sink's table `schema` (read from Fluss) with the declared `columns`
/// it lacks added (`evolve_schema` at `open`), within `deadline`. A
/// declared column of another type than the table's, one Fluss refuses, or
/// more columns than `max_columns` fail `open`, saying which.
pub(super) async fn add_declared_columns(
    writer: &FlussWriter,
    declared: &TableSchema,
    schema: TableSchema,
    max_columns: usize,
    deadline: Deadline,
) -> Result<TableSchema, PipelineError> {
    let mismatch = |reason: String| PipelineError::TableMismatch {
        table: schema.path.clone(),
        reason,
    };
    let mut lacking = Vec::new();
    for column in &declared.columns {
        match schema.columns.iter().find(|c| c.name == column.name) {
            Some(found) if found.data_type != column.data_type => {
                return Err(mismatch(format!(
                    "column `{}` is declared {} but the table has it as {}; Fluss cannot change a \
                     column's type (declare it {}, or write to another table)",
                    column.name, column.data_type, found.data_type, found.data_type
                )));
            }
            Some(_) => {}
            None => lacking.push(column.clone()),
        }
    }
    if lacking.is_empty() {
        return Ok(schema);
    }
    if schema.columns.len() + lacking.len() > max_columns {
        return Err(mismatch(format!(
            "adding the declared column(s) {} would take it past max_table_columns = {max_columns}",
            names(&lacking)
        )));
    }
    let added = writer.add_columns(&schema.path, &lacking, deadline).await?;
    if let Some((name, reason)) = added.refused.first() {
        return Err(mismatch(format!(
            "Fluss refused to add the declared column `{name}`: {reason}"
        )));
    }
    tracing::info!(
        table = %schema.path,
        "table {} changed: added declared column(s) {} (evolve_schema)",
        schema.path,
        names(&lacking)
    );
    Ok(added.schema)
}

fn names(columns: &[Column]) -> String {
    let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
    names.join(", ")
}

/// Why a message's field has no column after the sink tried to add them.
enum Missing {
    /// The table would pass `max_table_columns`.
    PastCap,
    /// Fluss refused the column, for this reason.
    Refused(String),
}

impl Pipeline {
    /// Whether JSON fields the table lacks add their columns.
    pub(super) fn evolves(&self) -> bool {
        self.config.evolve_schema && self.config.transform.is_none()
    }

    /// Writes `batch`'s messages before `at` (mapped again: their rows were
    /// made with the rest's), then the rest once the columns for its new
    /// fields are added (see the module's documentation).
    pub(super) async fn write_split(
        self: &Arc<Self>,
        schema: PayloadSchema,
        batch: &MessageBatch,
        at: usize,
        deadline: Deadline,
    ) -> Result<WriteReport, PipelineError> {
        let mut written = WriteReport::default();
        if at > 0 {
            let before = Held {
                schema,
                batch: Arc::new(batch.slice(0..at)),
                rows: None,
                rows_made_for: None,
            };
            written = Box::pin(self.write_held_rows(before, false, deadline)).await?;
        }
        self.write_after_new_fields(schema, batch, at, written, deadline)
            .await
    }

    /// Writes `batch` from message `at` on, its messages before `at` written
    /// already (`written`), once the columns for the new fields of the rest
    /// are added: see the module's documentation.
    pub(super) async fn write_after_new_fields(
        self: &Arc<Self>,
        schema: PayloadSchema,
        batch: &MessageBatch,
        at: usize,
        mut written: WriteReport,
        deadline: Deadline,
    ) -> Result<WriteReport, PipelineError> {
        let rest = batch.slice(at..batch.len());
        let known = self.stage_schema();
        // The routing field names a table; it is never a column of its own.
        let route_field = self.config.route_field();
        let fields: Vec<Vec<(String, DataType)>> = rest
            .iter()
            .map(|m| {
                let mut fields = field_types(m.payload).unwrap_or_default();
                fields.retain(|(name, _)| !known.has_column(name) && route_field.as_ref() != Some(name));
                fields
            })
            .collect();
        let (wanted, past_cap) = self.columns_within_cap(&known, &fields);
        let (schema_now, refused) = self.add_columns(&wanted, deadline).await?;
        let not_made = schema_now
            .columns
            .is_empty()
            .then(|| self.not_made(&schema_now, &wanted));
        let mut keep = MessageBatch::new(rest.source.clone());
        let mut letters = Vec::new();
        for (i, (message, fields)) in rest.iter().zip(&fields).enumerate() {
            if let Some(reason) = &not_made {
                letters.push((i, DeadLetterKind::Schema, reason.clone()));
                continue;
            }
            let missing = fields.iter().find_map(|(name, _)| {
                if schema_now.has_column(name) {
                    None
                } else if let Some(reason) = refused.get(name) {
                    Some((name, Missing::Refused(reason.clone())))
                } else {
                    past_cap.then_some((name, Missing::PastCap))
                }
            });
            match missing {
                None => keep
                    .push(
                        message.offset,
                        message.id,
                        message.timestamp,
                        message.payload,
                        message.headers.iter().cloned(),
                    )
                    .expect("a part of a batch fits as the batch did"),
                Some((name, why)) => letters.push((i, DeadLetterKind::Schema, self.no_column(name, &why))),
            }
        }
        if !letters.is_empty() {
            self.writer
                .dead_letter_messages(&rest, &letters, deadline)
                .await?;
            written.dead_lettered += letters.len();
        }
        if !keep.is_empty() {
            let held = Held {
                schema,
                batch: Arc::new(keep),
                rows: None,
                rows_made_for: None,
            };
            written.add(&Box::pin(self.write_held_rows(held, false, deadline)).await?);
        }
        Ok(written)
    }

    /// The new columns `fields` (per message) ask for, first asked first,
    /// as many as `max_table_columns` leaves room for beside `known`'s; and
    /// whether some were left out for the cap.
    fn columns_within_cap(
        &self,
        known: &TableSchema,
        fields: &[Vec<(String, DataType)>],
    ) -> (Vec<Column>, bool) {
        let room = self.config.max_table_columns.saturating_sub(known.columns.len());
        let mut wanted: Vec<Column> = Vec::new();
        let mut past_cap = false;
        for (name, data_type) in fields.iter().flatten() {
            if wanted.iter().any(|c| &c.name == name) {
                continue;
            }
            if wanted.len() == room {
                past_cap = true;
                continue;
            }
            wanted.push(Column::new(name, *data_type, true));
        }
        (wanted, past_cap)
    }

    /// Adds `columns` to the sink's table (creates it with them, when it
    /// is not made yet) and makes the row stage again for its columns now;
    /// gives them, and the columns Fluss refused with the reason.
    async fn add_columns(
        &self,
        columns: &[Column],
        deadline: Deadline,
    ) -> Result<(TableSchema, HashMap<String, String>), PipelineError> {
        let known = self.stage_schema();
        if known.columns.is_empty() {
            return Ok((self.create_table(known, columns, deadline).await?, HashMap::new()));
        }
        if columns.is_empty() {
            return Ok((known, HashMap::new()));
        }
        let added = self.writer.add_columns(&self.table, columns, deadline).await?;
        for (name, reason) in &added.refused {
            tracing::warn!(table = %self.table, "Fluss refused to add column `{name}` to {}: {reason}", self.table);
        }
        if !added.added.is_empty() {
            self.metrics.schema_change(&self.table, "added");
            tracing::info!(
                table = %self.table,
                "table {} changed: added column(s) {} for new JSON fields (evolve_schema; now {})",
                self.table,
                added.added.join(", "),
                crate::pipeline::follow::column_names(&added.schema)
            );
        }
        if !added.found.is_empty() {
            tracing::info!(
                table = %self.table,
                "table {} already has column(s) {} for new JSON fields: another client added them",
                self.table,
                added.found.join(", ")
            );
        }
        if self.stage_schema().columns != added.schema.columns {
            self.remake_stage(&added.schema, deadline).await?;
        }
        Ok((added.schema, added.refused.into_iter().collect()))
    }

    /// Why field `name` of a message has no column.
    fn no_column(&self, name: &str, why: &Missing) -> String {
        match why {
            Missing::PastCap => format!(
                "field `{name}` needs a new column, but table {} may not have more than \
                 max_table_columns = {} columns",
                self.table, self.config.max_table_columns
            ),
            Missing::Refused(reason) => {
                format!(
                    "Fluss refused to add column `{name}` to table {}: {reason}",
                    self.table
                )
            }
        }
    }
}
