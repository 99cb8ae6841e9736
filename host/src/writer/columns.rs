//! The lean path's writes: Arrow columns made chunk by chunk (by the JSON
//! mapping or from a transform's rows) appended to a log table whose
//! batches land whole, each chunk sent as soon as it is made. On a
//! partitioned table each chunk is cut by partition first (fluss-rs takes an
//! Arrow batch's partition from its first row), the partitions its rows need
//! are made sure of, and each partition's rows go as a batch of their own, in
//! message order.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use arrow::record_batch::RecordBatch;

use super::append::{AppendRows, Sent, append_parts};
use super::partitions::Partitioning;
use super::tables::{Sink, Table};
use super::{DeadLetterKind, FlussWriter, WriteError, WriteReport};
use crate::batch::MessageBatch;
use crate::deadline::Deadline;
use crate::rows::MessageOutcome;
use crate::rows::columns::ColumnOutput;
use crate::schema::TablePath;

/// One partition's rows of one chunk, taken out of the chunk's columns.
struct PartitionRows {
    messages: Vec<u32>,
    record: RecordBatch,
}

impl AppendRows for PartitionRows {
    fn messages(&self) -> &[u32] {
        &self.messages
    }

    fn parts(&self, rows: Range<usize>, bytes: usize) -> Vec<Range<usize>> {
        let size = self.record.get_array_memory_size() / self.record.num_rows().max(1);
        append_parts(&self.messages, rows, |_| size, bytes)
    }

    fn record(&self, rows: Range<usize>) -> Result<RecordBatch, String> {
        Ok(self.record.slice(rows.start, rows.len()))
    }
}

/// Where the rows of one chunk go on a partitioned table.
#[derive(Debug, Default, PartialEq)]
struct Placement {
    /// Each partition's rows (indexes into the chunk), partitions in order of
    /// first appearance, rows in order.
    groups: Vec<(String, Vec<u32>)>,
    /// Messages none of whose rows are written, with why (the first reason
    /// one of its rows gave).
    unplaced: Vec<(u32, String)>,
}

/// Places a chunk's rows: `names[i]` is row i's partition (or why it has
/// none), `messages[i]` its message. A message with a row that has no
/// partition, or one in a partition `refused` (with the reason), is
/// unplaced whole: none of its rows are in any group.
fn place(
    names: &[Result<String, String>],
    messages: &[u32],
    refused: &HashMap<String, String>,
    table: &TablePath,
) -> Placement {
    let mut placement = Placement::default();
    let mut unplaced: HashSet<u32> = HashSet::new();
    for (name, &message) in names.iter().zip(messages) {
        if unplaced.contains(&message) {
            continue;
        }
        let reason = match name {
            Err(reason) => format!("table {table}: {reason}"),
            Ok(name) => match refused.get(name) {
                Some(reason) => reason.clone(),
                None => continue,
            },
        };
        unplaced.insert(message);
        placement.unplaced.push((message, reason));
    }
    for (row, (name, message)) in names.iter().zip(messages).enumerate() {
        let Ok(name) = name else { continue };
        if unplaced.contains(message) {
            continue;
        }
        match placement.groups.iter_mut().find(|(n, _)| n == name) {
            Some((_, rows)) => rows.push(row as u32),
            None => placement.groups.push((name.clone(), vec![row as u32])),
        }
    }
    placement
}

impl FlussWriter {
    /// The Arrow schema of `path`'s appends when the lean row path can
    /// write to it (see [`FlussWriter::write_columns_within`]): a log table
    /// whose Arrow batches land whole (no bucket key, or one bucket),
    /// partitioned or not. `None` for other tables.
    pub async fn whole_batch_schema(
        &self,
        path: &TablePath,
        deadline: Deadline,
    ) -> Result<Option<arrow::datatypes::SchemaRef>, WriteError> {
        let table = self.table(path, deadline).await?;
        Ok(table.takes_columns().then(|| table.arrow_schema.clone()))
    }

    /// Writes the lean path's rows of `batch` to `path` (a table for which
    /// [`FlussWriter::whole_batch_schema`] is some): `chunks` makes them,
    /// chunk after chunk in message order, and each chunk's rows are sent as
    /// soon as they are made, so that the client sends chunk i while chunk
    /// i+1 is made; then every acknowledgement is awaited together and what
    /// cannot be written is dead-lettered (earlier dead letters are the
    /// mapping's), all before `deadline`. An error means some messages may
    /// not be in Fluss.
    pub async fn write_columns_within(
        &self,
        batch: &MessageBatch,
        chunks: impl Iterator<Item = ColumnOutput>,
        path: &TablePath,
        deadline: Deadline,
    ) -> Result<WriteReport, WriteError> {
        self.write_column_chunks(batch, chunks, path, DeadLetterKind::Mapping, deadline)
            .await
    }

    /// [`FlussWriter::write_columns_within`] for columns made by `stage`
    /// (the kind of the dead letters already in `chunks`' outcomes).
    pub(super) async fn write_column_chunks(
        &self,
        batch: &MessageBatch,
        chunks: impl Iterator<Item = ColumnOutput>,
        path: &TablePath,
        stage: DeadLetterKind,
        deadline: Deadline,
    ) -> Result<WriteReport, WriteError> {
        let mut output = ColumnOutput::default();
        let mut unplaced = Vec::new();
        let table = self.table(path, deadline).await?;
        let written = self
            .guard_staleness(path, deadline, async {
                let (Sink::Log(writer), true) = (&table.sink, table.takes_columns()) else {
                    return Err(WriteError::Table {
                        table: path.to_string(),
                        reason: "Arrow columns go to log tables whose batches land whole".into(),
                    });
                };
                // Unpartitioned: one run of parts over all the rows. Partitioned:
                // one per partition of each chunk.
                let mut sent = Sent::default();
                let mut by_partition: Vec<(PartitionRows, Sent)> = Vec::new();
                tokio::task::block_in_place(|| {
                    for chunk in chunks {
                        let first = output.rows.len();
                        output.append(chunk);
                        let made = first..output.rows.len();
                        let Some(partitioning) = &table.partitioning else {
                            self.send_parts(path, writer, &output.rows, made, deadline, &mut sent)?;
                            continue;
                        };
                        if made.is_empty() {
                            continue;
                        }
                        let rows = tokio::runtime::Handle::current().block_on(self.split_by_partition(
                            &table,
                            partitioning,
                            &output,
                            made,
                            &mut unplaced,
                            deadline,
                        ))?;
                        for part in rows {
                            let mut sent = Sent::default();
                            let all = 0..part.messages.len();
                            self.send_parts(path, writer, &part, all, deadline, &mut sent)?;
                            by_partition.push((part, sent));
                        }
                    }
                    Ok::<_, WriteError>(())
                })?;
                let mut failures = Vec::new();
                let what = format!("{} rows for {path}", output.rows.len());
                if table.partitioning.is_none() {
                    self.settle(path, writer, &output.rows, sent, &what, deadline, &mut failures)
                        .await?;
                }
                for (rows, sent) in by_partition {
                    self.settle(path, writer, &rows, sent, &what, deadline, &mut failures)
                        .await?;
                }
                Ok(failures)
            })
            .await;
        if written.is_err()
            && let Some(partitioning) = &table.partitioning
        {
            // A partition may have gone (dropped, or expired by Fluss).
            partitioning.forget();
        }
        let written = written?;
        let mut kinds = vec![stage; batch.len()];
        for &message in &output.misfits {
            kinds[message as usize] = DeadLetterKind::Schema;
        }
        for (message, reason) in unplaced {
            output.outcomes[message as usize] = MessageOutcome::DeadLetter(reason);
            kinds[message as usize] = DeadLetterKind::Partition;
        }
        let row_messages = output.rows.messages().to_vec();
        self.finish_lean_write(
            batch,
            &mut output.outcomes,
            &mut kinds,
            written,
            row_messages.into_iter(),
            path,
            deadline,
        )
        .await
    }

    /// The rows `made` of `output` (one chunk's) cut by partition, once the
    /// partitions they need exist. Messages whose rows cannot be placed are
    /// added to `unplaced`, and none of their rows are returned.
    async fn split_by_partition(
        &self,
        table: &Table,
        partitioning: &Partitioning,
        output: &ColumnOutput,
        made: Range<usize>,
        unplaced: &mut Vec<(u32, String)>,
        deadline: Deadline,
    ) -> Result<Vec<PartitionRows>, WriteError> {
        let path = &table.schema.path;
        let record = output
            .rows
            .record(made.clone())
            .map_err(|reason| WriteError::Table {
                table: path.to_string(),
                reason,
            })?;
        let names = partitioning.names(&record);
        let messages = &output.rows.messages()[made];
        let wanted: HashSet<String> = names.iter().filter_map(|n| n.as_ref().ok().cloned()).collect();
        let refused = self.ensure_partitions(table, &wanted, deadline).await?;
        let placement = place(&names, messages, &refused, path);
        unplaced.extend(placement.unplaced);
        placement
            .groups
            .into_iter()
            .map(|(_, rows)| {
                let messages = rows.iter().map(|&r| messages[r as usize]).collect();
                let record = if rows.len() == record.num_rows() {
                    record.clone()
                } else {
                    let indices = arrow::array::UInt32Array::from(rows);
                    arrow::compute::take_record_batch(&record, &indices).map_err(|e| WriteError::Table {
                        table: path.to_string(),
                        reason: format!("cannot split the rows by partition: {e}"),
                    })?
                };
                Ok(PartitionRows { messages, record })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path() -> TablePath {
        TablePath {
            database: "db".into(),
            table: "t".into(),
        }
    }

    #[test]
    fn rows_are_grouped_by_partition_in_order_of_first_appearance() {
        let names: Vec<Result<String, String>> = ["eu", "us", "eu", "ap", "us"]
            .iter()
            .map(|n| Ok(n.to_string()))
            .collect();
        let placement = place(&names, &[0, 1, 2, 3, 4], &HashMap::new(), &path());
        assert_eq!(
            placement,
            Placement {
                groups: vec![
                    ("eu".into(), vec![0, 2]),
                    ("us".into(), vec![1, 4]),
                    ("ap".into(), vec![3]),
                ],
                unplaced: vec![],
            }
        );
    }

    #[test]
    fn a_message_with_one_unplaceable_row_is_unplaced_whole() {
        // Message 1 has rows 1 and 2: row 2's partition is refused, so row 1
        // (in a partition that exists) is not written either.
        let names: Vec<Result<String, String>> = vec![
            Ok("eu".into()),
            Ok("eu".into()),
            Ok("gone".into()),
            Err("partition key `region`: the value is NULL, and a partition key cannot be".into()),
            Ok("us".into()),
        ];
        let refused = HashMap::from([("gone".to_string(), "partition `gone` does not exist".to_string())]);
        let placement = place(&names, &[0, 1, 1, 2, 3], &refused, &path());
        assert_eq!(
            placement.groups,
            vec![("eu".into(), vec![0]), ("us".into(), vec![4])]
        );
        assert_eq!(
            placement.unplaced,
            vec![
                (1, "partition `gone` does not exist".to_string()),
                (
                    2,
                    "table db.t: partition key `region`: the value is NULL, and a partition key cannot be"
                        .to_string()
                ),
            ]
        );
    }
}
