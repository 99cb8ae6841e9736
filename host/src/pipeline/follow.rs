//! The pipeline's side of tables that change: a task that has the writer
//! look at its open tables' schemas every `schema_refresh_interval` (see
//! [`crate::writer::FlussWriter::follow_tables`]), logs and counts each
//! change, and, when the sink's own table changed, makes the row stage
//! again for its new columns (the JSON mapping made anew, a transform
//! initialised again with the new schema), so that the batches after it
//! write them. A batch already under way finishes with the stage it took;
//! one a change catches (fluss-rs refuses writers older than its metadata)
//! is written again for the new columns.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tracing::Instrument;

use super::open::make_stage;
use super::{Held, HeldRows, Pipeline, PipelineError};
use crate::deadline::Deadline;
use crate::metrics::InstanceMetrics;
use crate::schema::TableSchema;
use crate::writer::{SchemaChange, WriteError, WriteReport};

/// The least time one look at the tables may take, however short the
/// interval: one RPC to the coordinator per open table.
const MIN_LOOK: Duration = Duration::from_secs(1);

/// The most a look made at once (a write found its table changed) takes.
const LOOK_BOUND: Duration = Duration::from_secs(5);

impl Pipeline {
    /// Starts looking at the tables every `interval`, until the pipeline
    /// closes or is dropped.
    pub(super) fn start_follower(self: &Arc<Self>, interval: Duration) {
        let task = tokio::spawn(follow(Arc::downgrade(self), interval).instrument(tracing::Span::current()));
        *self.follower.lock().unwrap_or_else(|e| e.into_inner()) = Some(task.abort_handle());
    }

    /// Stops looking at the tables.
    pub(super) fn stop_follower(&self) {
        if let Some(task) = self.follower.lock().unwrap_or_else(|e| e.into_inner()).take() {
            task.abort();
        }
    }

    /// One look at every open table, within `deadline`: each change logged
    /// and counted, and the row stage made again when it was made for
    /// other columns than the sink's own table has now (a stage that could
    /// not be made at one look is tried again at the next).
    pub(crate) async fn follow_tables(&self, deadline: Deadline) {
        for change in self.writer.follow_tables(deadline).await {
            log_change(&self.metrics, &change);
        }
        let Some(schema) = self.writer.open_schema(&self.table).await else {
            return;
        };
        if self.stage_schema().columns == schema.columns {
            return;
        }
        match self.remake_stage(&schema, deadline).await {
            Ok(()) => tracing::info!(
                table = %self.table,
                "rows for {} are made with its columns {} from the next batch on",
                self.table,
                column_names(&schema)
            ),
            Err(e) => tracing::error!(
                table = %self.table,
                "cannot make rows for the columns {} of {}: {e}; rows keep the columns they had \
                 (the new ones NULL), and the next look tries again",
                column_names(&schema),
                self.table
            ),
        }
    }

    /// After a batch whose JSON mapping met a field without a column
    /// (skipped: `evolve_schema` is off), looks at the tables now, in the
    /// background, at most once per `schema_refresh_interval`: a column
    /// added for that field is written from the next batches on, without
    /// waiting for the next regular look.
    pub(super) fn look_after_unknown_field(self: &Arc<Self>) {
        if !self.stage().took_unknown_field() {
            return;
        }
        let interval = self.config.schema_refresh_interval;
        {
            let mut last = self.looked_for_field.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_some_and(|at| at.elapsed() < interval) {
                return;
            }
            *last = Some(std::time::Instant::now());
        }
        tracing::debug!(table = %self.table, "a JSON field names no column of {}: its schema is looked at now", self.table);
        let pipeline = Arc::downgrade(self);
        let look = async move {
            if let Some(pipeline) = pipeline.upgrade() {
                pipeline
                    .follow_tables(Deadline::after(interval.max(MIN_LOOK)))
                    .await;
            }
        };
        tokio::spawn(look.instrument(tracing::Span::current()));
    }

    /// Writes `held` before `deadline`. When its table's schema changed
    /// while it was written (see [`WriteError::SchemaChanged`]), the sink
    /// looks at its tables at once and writes it again, once, with rows
    /// made for the new columns (a transform's made again, as a replay's
    /// are); only primary-key tables refuse rows of the schema before, and
    /// their upserts and deletes may be repeated (the final state is the
    /// same).
    pub(super) async fn write_held(
        self: &Arc<Self>,
        held: Held,
        deadline: Deadline,
    ) -> Result<WriteReport, PipelineError> {
        let again = Held {
            rows: match &held.rows {
                Some((HeldRows::Made(rows), kind)) => Some((HeldRows::Made(rows.clone()), *kind)),
                _ => None,
            },
            ..held.clone()
        };
        match self.write_held_once(held, deadline).await {
            Err(PipelineError::Write(WriteError::SchemaChanged { table })) => {
                tracing::info!(table = %table, "table {table} changed while a batch was written: it is written again for the new columns");
                self.follow_tables(deadline.at_most(LOOK_BOUND)).await;
                self.write_held_once(again, deadline).await
            }
            written => written,
        }
    }

    /// Makes the row stage for `schema` and puts it in force; when it
    /// cannot be made, the stage in force stays.
    pub(super) async fn remake_stage(
        &self,
        schema: &TableSchema,
        deadline: Deadline,
    ) -> Result<(), PipelineError> {
        let reloadable = self.versions.as_ref().map(|v| v.reloadable().clone());
        let (stage, _) = make_stage(&self.config, schema, &self.writer, reloadable, deadline).await?;
        *self.stage.write().unwrap_or_else(|e| e.into_inner()) = (Arc::new(stage), schema.clone());
        Ok(())
    }
}

/// Logs `change` and counts it in `metrics`.
fn log_change(metrics: &InstanceMetrics, change: &SchemaChange) {
    let kind = if change.remade { "remade" } else { "followed" };
    metrics.schema_change(&change.table, kind);
    if change.remade {
        tracing::warn!(
            table = %change.table,
            "table {} was dropped and made again in Fluss (its columns now: {}); rows are checked against them",
            change.table,
            column_names(&change.schema)
        );
    } else {
        tracing::info!(
            table = %change.table,
            "table {} changed in Fluss: added column(s) {} (followed; now {})",
            change.table,
            change.added.join(", "),
            column_names(&change.schema)
        );
    }
}

pub(super) fn column_names(schema: &TableSchema) -> String {
    let names: Vec<&str> = schema.columns.iter().map(|c| c.name.as_str()).collect();
    names.join(", ")
}

async fn follow(pipeline: Weak<Pipeline>, interval: Duration) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let Some(pipeline) = pipeline.upgrade() else {
            return;
        };
        pipeline
            .follow_tables(Deadline::after(interval.max(MIN_LOOK)))
            .await;
    }
}
