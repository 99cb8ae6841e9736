//! One write of a batch's rows, step by step: resolve the tables the rows
//! name, check each row against its table, place rows in their partitions,
//! group them by table and partition, write the groups side by side, and
//! report what became of every message (dead letters included).

use std::collections::HashMap;
use std::sync::Arc;

use crate::batch::MessageBatch;
use crate::deadline::Deadline;
use crate::rows::{DeadLetterKind, MessageOutcome, RowBatch, TransformOutput, check, metadata};
use crate::schema::TablePath;
use crate::writer::tables::Table;
use crate::writer::tables::routing;
use crate::writer::{FlussWriter, GroupKey, PendingRow, WriteError, WriteReport, report_of};

/// Tables by their index in a [`TransformOutput`]'s rows (0: the sink's own).
type RoutedTables = HashMap<u16, Arc<Table>>;

impl FlussWriter {
    /// The encoded path: `output`'s rows for `batch` checked against their
    /// tables, placed in partitions, grouped and written, then every
    /// message's fate reported.
    pub(in crate::writer) async fn write_rows_of(
        &self,
        batch: &MessageBatch,
        mut output: TransformOutput,
        default_table: &TablePath,
        stage: DeadLetterKind,
        deadline: Deadline,
    ) -> Result<WriteReport, WriteError> {
        let default = self.table(default_table, deadline).await?;
        let mut kinds: Vec<DeadLetterKind> = vec![stage; batch.len()];
        let routed = self
            .resolve_tables(&mut output, &mut kinds, default_table, &default, deadline)
            .await?;
        let table_of = |t: u16| if t == 0 { Some(&default) } else { routed.get(&t) };
        if self.settings.include_metadata {
            metadata::fill(&mut output, batch, |t| table_of(t).map(|t| &t.schema));
        }
        check_against_tables(&mut output, &mut kinds, &table_of);
        let partition_of = self
            .place_in_partitions(&mut output, &mut kinds, &table_of, deadline)
            .await?;
        let groups = group(&output.rows, &output.outcomes, &partition_of);
        for (message, reason) in self.write_groups(&groups, &table_of, deadline).await? {
            output.outcomes[message as usize] = MessageOutcome::DeadLetter(reason);
            kinds[message as usize] = DeadLetterKind::Write;
        }
        self.count_rows_written(&groups, &output.outcomes, &table_of);
        let (report, letters) = report_of(&output.outcomes, &kinds, self.settings.conversions_are_schema);
        self.dead_letter(batch, &letters, deadline).await?;
        Ok(report)
    }

    /// Resolves every table the rows name; rows for one that cannot be had
    /// (or may not be routed to) dead-letter their message.
    async fn resolve_tables(
        &self,
        output: &mut TransformOutput,
        kinds: &mut [DeadLetterKind],
        default_table: &TablePath,
        default: &Arc<Table>,
        deadline: Deadline,
    ) -> Result<RoutedTables, WriteError> {
        let mut routed = RoutedTables::new();
        for (index, name) in output.rows.tables().iter().enumerate() {
            let resolved = if index >= routing::MAX_TABLES_PER_BATCH {
                Err(format!(
                    "the batch names more than {} distinct tables",
                    routing::MAX_TABLES_PER_BATCH
                ))
            } else {
                self.resolve_routed(name, default_table, default, deadline)
                    .await?
            };
            let index = (index + 1) as u16;
            match resolved {
                Ok(t) => {
                    routed.insert(index, t);
                }
                Err(reason) => {
                    for (entry, _) in output.rows.iter() {
                        if entry.table == index {
                            output.outcomes[entry.message as usize] =
                                MessageOutcome::DeadLetter(format!("table {name}: {reason}"));
                            kinds[entry.message as usize] = DeadLetterKind::Table;
                        }
                    }
                }
            }
        }
        Ok(routed)
    }

    /// The table a row names, if rows may go there and it can be had.
    pub(in crate::writer) async fn resolve_routed(
        &self,
        name: &str,
        default_table: &TablePath,
        default: &Arc<Table>,
        deadline: Deadline,
    ) -> Result<Result<Arc<Table>, String>, WriteError> {
        let path = match name.parse::<TablePath>() {
            Ok(path) => path,
            Err(e) => return Ok(Err(e.to_string())),
        };
        if &path == default_table {
            return Ok(Ok(default.clone()));
        }
        if let Some(reason) = self.router.refusal(&path) {
            return Ok(Err(reason));
        }
        let resolved = match self.resolve(&path, &default.schema, deadline).await? {
            Ok(table) => self.catch_up_routed(table, &default.schema, deadline).await?,
            unusable => unusable,
        };
        if let Err(reason) = &resolved {
            self.router.remember_unknown(&path, reason);
        }
        Ok(resolved)
    }

    /// Writes the groups side by side; gives the messages Fluss refused for
    /// good, with why.
    async fn write_groups<'t>(
        &self,
        groups: &[(GroupKey<'_>, Vec<PendingRow<'_>>)],
        table_of: &impl Fn(u16) -> Option<&'t Arc<Table>>,
        deadline: Deadline,
    ) -> Result<Vec<(u32, String)>, WriteError> {
        let writes = groups.iter().map(|((table_index, _), rows)| async {
            let table = table_of(*table_index).expect("resolved before grouping");
            let mut failures = Vec::new();
            let written = self.write_group(table, rows, deadline, &mut failures).await;
            if written.is_err()
                && let Some(partitioning) = &table.partitioning
            {
                // A partition may have gone (dropped, or expired by Fluss).
                partitioning.forget();
            }
            written.map(|()| failures)
        });
        let mut failures = Vec::new();
        for written in futures::future::join_all(writes).await {
            failures.extend(written?);
        }
        Ok(failures)
    }

    /// Counts each table's rows of the messages that were written.
    fn count_rows_written<'t>(
        &self,
        groups: &[(GroupKey<'_>, Vec<PendingRow<'_>>)],
        outcomes: &[MessageOutcome],
        table_of: &impl Fn(u16) -> Option<&'t Arc<Table>>,
    ) {
        let Some(metrics) = &self.metrics else {
            return;
        };
        for ((table_index, _), rows) in groups {
            let written = rows
                .iter()
                .filter(|(m, _, _)| !matches!(outcomes[*m as usize], MessageOutcome::DeadLetter(_)))
                .count();
            if written > 0 {
                let table = &table_of(*table_index)
                    .expect("resolved before grouping")
                    .schema
                    .path;
                metrics.rows_written(table, written as u64);
            }
        }
    }
}

/// Checks every row against its table, once, here (the lean path's rows
/// were checked by the mapping that made them); a row that does not fit
/// dead-letters its message.
fn check_against_tables<'t>(
    output: &mut TransformOutput,
    kinds: &mut [DeadLetterKind],
    table_of: &impl Fn(u16) -> Option<&'t Arc<Table>>,
) {
    for misfit in check::misfits(output, |t| table_of(t).map(|t| &t.schema)) {
        let m = misfit.message as usize;
        output.outcomes[m] =
            MessageOutcome::DeadLetter(format!("table {}: {}", misfit.schema.path, misfit.reason));
        kinds[m] = DeadLetterKind::Schema;
    }
}

/// The rows of live messages grouped by table and partition, in order.
fn group<'o>(
    rows: &'o RowBatch,
    outcomes: &[MessageOutcome],
    partition_of: &'o [Option<String>],
) -> Vec<(GroupKey<'o>, Vec<PendingRow<'o>>)> {
    let mut groups: Vec<(GroupKey<'_>, Vec<PendingRow<'_>>)> = Vec::new();
    for (i, (entry, row)) in rows.iter().enumerate() {
        if matches!(outcomes[entry.message as usize], MessageOutcome::DeadLetter(_)) {
            continue;
        }
        let key = (entry.table, partition_of[i].as_deref());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, rows)) => rows.push((entry.message, entry.kind, row)),
            None => groups.push((key, vec![(entry.message, entry.kind, row)])),
        }
    }
    groups
}
