//! The lean path's writes: Arrow columns made chunk by chunk (by the JSON
//! mapping or from a transform's rows) appended to a log table whose
//! batches land whole. Made rows are sent once they hold [`SEND_AT_LEAST`]
//! bytes, or at once when the next chunk is not made yet (rows are never
//! held while the writer waits: see [`crate::writer::writes::chunks`]), and the last ones at
//! the end. On a partitioned table each chunk is cut by partition first
//! (fluss-rs takes an Arrow batch's partition from its first row), the
//! partitions its rows need are made sure of, and each partition's rows go
//! as a batch of their own, in message order.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;

use fluss::client::AppendWriter;

use arrow::record_batch::RecordBatch;

use crate::batch::MessageBatch;
use crate::deadline::Deadline;
use crate::rows::MessageOutcome;
use crate::rows::columns::{ColumnOutput, ColumnRows};
use crate::schema::TablePath;
use crate::writer::partitions::Partitioning;
use crate::writer::partitions::placement::place;
use crate::writer::send::append::{APPEND_BYTES, AppendRows, Sent, append_parts};
use crate::writer::tables::{Sink, Table};
use crate::writer::writes::chunks::{MadeChunks, MapMade};
use crate::writer::{DeadLetterKind, FlussWriter, LeanWritten, WriteError, WriteReport};

/// The fewest bytes of made rows a lane sends at once (but the last ones).
/// fluss-rs compresses each appended Arrow batch on its own (the tables'
/// default is ZSTD), each buffer of each batch with its own tables, so
/// small batches cost more: ten 500-row chunks of ~110 B messages cost
/// ~1.6× one batch of their rows to compress. A quarter of the largest
/// part still leaves several sends in flight while a large consume's later
/// chunks are made.
const SEND_AT_LEAST: usize = APPEND_BYTES / 4;

/// One partition's rows of some chunks, taken out of their columns.
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

/// One table's side of a lean write: where its rows go and what was sent.
struct Lane {
    table: Arc<Table>,
    /// Unpartitioned: the parts sent of all the rows.
    sent: Sent,
    /// Partitioned: each partition's rows of each send, and their parts sent.
    by_partition: Vec<(PartitionRows, Sent)>,
    /// The first of the table's rows not sent yet.
    unsent: usize,
}

impl Lane {
    /// The lane of `table`, a log table whose Arrow batches land whole.
    fn of(table: Arc<Table>) -> Result<Self, WriteError> {
        if !table.takes_columns() {
            return Err(WriteError::Table {
                table: table.schema.path.to_string(),
                reason: "Arrow columns go to log tables whose batches land whole".into(),
            });
        }
        Ok(Self {
            table,
            sent: Sent::default(),
            by_partition: Vec::new(),
            unsent: 0,
        })
    }
}

/// The append writer of a table that takes columns.
fn log_writer(table: &Table) -> &AppendWriter {
    match &table.sink {
        Sink::Log(writer) => writer,
        Sink::Keyed(_) => unreachable!("a lane's table takes columns: checked in Lane::of"),
    }
}

/// One chunk of a lean write, in message order after the chunks before it.
pub(in crate::writer) struct LeanChunk {
    /// The chunk's messages: their outcomes and their rows' columns.
    pub columns: ColumnOutput,
    /// The kind of each of the chunk's dead letters so far.
    pub kinds: Vec<DeadLetterKind>,
    /// Every table the chunks name so far, by index (see
    /// [`ColumnOutput::table_rows`]; `None` for one that takes no rows).
    pub tables: Vec<Option<Arc<Table>>>,
}

impl FlussWriter {
    /// Writes the lean path's rows of `batch` to `path` (a table of
    /// [`TableKind::Columns`](crate::writer::TableKind::Columns)): `chunks` makes them,
    /// chunk after chunk in message order, and rows are sent as they are
    /// made (small ones together while the next are made already), so that
    /// the client sends chunk i while chunk i+1 is made; then every acknowledgement is awaited together and what
    /// cannot be written is dead-lettered (earlier dead letters are the
    /// mapping's), all before `deadline`. An error means some messages may
    /// not be in Fluss.
    pub(in crate::writer) async fn write_columns_within(
        &self,
        batch: &MessageBatch,
        chunks: impl MadeChunks<Chunk = ColumnOutput>,
        path: &TablePath,
        deadline: Deadline,
    ) -> Result<WriteReport, WriteError> {
        let table = self.table(path, deadline).await?;
        let chunks = MapMade {
            chunks,
            f: |columns: ColumnOutput| {
                Ok(LeanChunk {
                    kinds: vec![DeadLetterKind::Mapping; columns.outcomes.len()],
                    tables: vec![Some(table.clone())],
                    columns,
                })
            },
        };
        self.guard_staleness(path, deadline, self.write_column_chunks(batch, chunks, deadline))
            .await
    }

    /// [`FlussWriter::write_columns_within`] for chunks of columns of any
    /// log tables whose batches land whole, each chunk naming the tables so
    /// far; a chunk that is an error ends the write with it once what was
    /// sent is settled or forgotten.
    pub(in crate::writer) async fn write_column_chunks(
        &self,
        batch: &MessageBatch,
        mut chunks: impl MadeChunks<Chunk = Result<LeanChunk, WriteError>>,
        deadline: Deadline,
    ) -> Result<WriteReport, WriteError> {
        let mut output = ColumnOutput::default();
        let mut kinds = Vec::new();
        let mut tables: Vec<Option<Arc<Table>>> = Vec::new();
        let mut unplaced = Vec::new();
        let written = async {
            let mut lanes: Vec<Option<Lane>> = Vec::new();
            while let Some(chunk) = chunks.next_chunk().await {
                let chunk = chunk?;
                for table in &chunk.tables[lanes.len().min(chunk.tables.len())..] {
                    lanes.push(table.clone().map(Lane::of).transpose()?);
                }
                tables = chunk.tables;
                output.append(chunk.columns);
                kinds.extend(chunk.kinds);
                // Rows are held for the next chunk only when it is made.
                let least = if chunks.next_is_made() { SEND_AT_LEAST } else { 0 };
                self.send_lanes(&mut lanes, &output, least, &mut unplaced, deadline)
                    .await?;
            }
            // The last rows, however few.
            self.send_lanes(&mut lanes, &output, 0, &mut unplaced, deadline)
                .await?;
            let mut failures = Vec::new();
            for (i, lane) in lanes.into_iter().enumerate() {
                let (Some(lane), Some(rows)) = (lane, output.table_rows(i as u16)) else {
                    continue;
                };
                self.settle_lane(lane, rows, deadline, &mut failures).await?;
            }
            Ok(failures)
        }
        .await;
        if written.is_err() {
            // A partition may have gone (dropped, or expired by Fluss).
            for table in tables.iter().flatten() {
                if let Some(partitioning) = &table.partitioning {
                    partitioning.forget();
                }
            }
        }
        let written = written?;
        for &message in &output.misfits {
            kinds[message as usize] = DeadLetterKind::Schema;
        }
        for (message, reason) in unplaced {
            output.outcomes[message as usize] = MessageOutcome::DeadLetter(reason);
            kinds[message as usize] = DeadLetterKind::Partition;
        }
        let outcomes = std::mem::take(&mut output.outcomes);
        let rows = tables
            .iter()
            .enumerate()
            .filter_map(|(i, table)| {
                let (table, rows) = (table.as_ref()?, output.table_rows(i as u16)?);
                Some((&table.schema.path, rows.messages()))
            })
            .collect();
        let lean = LeanWritten {
            outcomes,
            kinds,
            rows,
        };
        self.finish_lean_write(batch, lean, written, deadline).await
    }

    /// Sends each lane's rows of `output` not sent yet, when they hold at
    /// least `bytes` bytes.
    async fn send_lanes(
        &self,
        lanes: &mut [Option<Lane>],
        output: &ColumnOutput,
        bytes: usize,
        unplaced: &mut Vec<(u32, String)>,
        deadline: Deadline,
    ) -> Result<(), WriteError> {
        for (i, lane) in lanes.iter_mut().enumerate() {
            let (Some(lane), Some(rows)) = (lane, output.table_rows(i as u16)) else {
                continue;
            };
            let made = lane.unsent..rows.len();
            if made.is_empty() || rows.bytes(made.clone()) < bytes {
                continue;
            }
            lane.unsent = made.end;
            self.send_lane(lane, rows, made, unplaced, deadline).await?;
        }
        Ok(())
    }

    /// Sends the rows `made` of `rows`, a lane's: as they are on an
    /// unpartitioned table, cut by partition on a partitioned one (messages
    /// that cannot be placed are added to `unplaced`).
    async fn send_lane(
        &self,
        lane: &mut Lane,
        rows: &ColumnRows,
        made: Range<usize>,
        unplaced: &mut Vec<(u32, String)>,
        deadline: Deadline,
    ) -> Result<(), WriteError> {
        let table = lane.table.clone();
        let writer = log_writer(&table);
        let Some(partitioning) = &table.partitioning else {
            let send = || self.send_parts(&table, writer, rows, made, deadline, &mut lane.sent);
            return self.sending(send);
        };
        if made.is_empty() {
            return Ok(());
        }
        let parts = self
            .split_by_partition(&table, partitioning, rows, made, unplaced, deadline)
            .await?;
        self.sending(|| {
            for part in parts {
                let mut sent = Sent::default();
                let all = 0..part.messages.len();
                self.send_parts(&table, writer, &part, all, deadline, &mut sent)?;
                lane.by_partition.push((part, sent));
            }
            Ok(())
        })
    }

    /// Runs `send` (appends), off the runtime's worker when an append may
    /// wait for room in the client's buffer (see
    /// [`FlussWriter::append_may_wait`]).
    fn sending<T>(&self, send: impl FnOnce() -> T) -> T {
        if self.append_may_wait() {
            tokio::task::block_in_place(send)
        } else {
            send()
        }
    }

    /// Awaits the acknowledgements of what `lane` sent of `rows`, adding the
    /// messages Fluss refused for good to `failures`.
    async fn settle_lane(
        &self,
        lane: Lane,
        rows: &ColumnRows,
        deadline: Deadline,
        failures: &mut Vec<(u32, String)>,
    ) -> Result<(), WriteError> {
        let Lane {
            table,
            sent,
            by_partition,
            ..
        } = lane;
        let (path, writer) = (&table.schema.path, log_writer(&table));
        let what = format!("{} rows for {path}", rows.len());
        if table.partitioning.is_none() {
            self.settle(path, writer, rows, sent, &what, deadline, failures)
                .await?;
        }
        for (part, sent) in by_partition {
            self.settle(path, writer, &part, sent, &what, deadline, failures)
                .await?;
        }
        Ok(())
    }

    /// The rows `made` of `rows` cut by partition, once the
    /// partitions they need exist. Messages whose rows cannot be placed are
    /// added to `unplaced`, and none of their rows are returned.
    async fn split_by_partition(
        &self,
        table: &Table,
        partitioning: &Partitioning,
        rows: &ColumnRows,
        made: Range<usize>,
        unplaced: &mut Vec<(u32, String)>,
        deadline: Deadline,
    ) -> Result<Vec<PartitionRows>, WriteError> {
        let path = &table.schema.path;
        let record = rows.record(made.clone()).map_err(|reason| WriteError::Table {
            table: path.to_string(),
            reason,
        })?;
        let partitions = partitioning.partitions(&record);
        let messages = &rows.messages()[made];
        let wanted: HashSet<String> = partitions
            .names
            .iter()
            .filter_map(|n| n.as_ref().ok().cloned())
            .collect();
        let refused = self.ensure_partitions(table, &wanted, deadline).await?;
        let placement = place(&partitions, messages, &refused, path);
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
