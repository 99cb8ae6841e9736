//! Appends to log tables whose Arrow batches land whole (one bucket): rows
//! cut into message-aligned parts, every part sent before any
//! acknowledgement is awaited, a part refused for good bisected by message.
//! The rows come as encoded rows (made into Arrow part by part) or as the
//! Arrow columns of the lean row path ([`ColumnRows`], sliced; written by
//! `columns.rs`).

use std::ops::Range;
use std::time::Instant;

use arrow::record_batch::RecordBatch;
use fluss::client::{AppendWriter, WriteResultFuture};
use fluss_row_codec::RowView;

use crate::deadline::Deadline;
use crate::rows::columns::ColumnRows;
use crate::rows::to_fluss;
use crate::schema::{TablePath, TableSchema};
use crate::writer::delivery::failure::{Failure, undelivered};
use crate::writer::delivery::racing_flush;
use crate::writer::send::after_change::{part_messages, widened};
use crate::writer::tables::Table;
use crate::writer::{FlussWriter, PendingRow, WriteError};

/// Roughly how many bytes one Arrow append carries when a write is cut
/// into parts sent back to back.
pub(in crate::writer) const APPEND_BYTES: usize = 1 << 20;

/// Rows to append, in message order, that Arrow batches are made of.
pub(in crate::writer) trait AppendRows {
    /// The message of each row.
    fn messages(&self) -> &[u32];
    /// The rows `rows` cut into message-aligned parts of about `bytes` bytes each.
    fn parts(&self, rows: Range<usize>, bytes: usize) -> Vec<Range<usize>>;
    /// The rows `rows` (within one part) as one record batch.
    fn record(&self, rows: Range<usize>) -> Result<RecordBatch, String>;
}

/// Encoded rows for one table.
pub(in crate::writer) struct EncodedRows<'r, 'a> {
    rows: &'r [PendingRow<'a>],
    messages: Vec<u32>,
    schema: &'r TableSchema,
    arrow_schema: &'r arrow::datatypes::SchemaRef,
}

impl<'r, 'a> EncodedRows<'r, 'a> {
    /// `rows` (checked against `table`) to append to `table`.
    pub(in crate::writer) fn new(rows: &'r [PendingRow<'a>], table: &'r Table) -> Self {
        Self {
            rows,
            messages: rows.iter().map(|(m, _, _)| *m).collect(),
            schema: &table.schema,
            arrow_schema: &table.arrow_schema,
        }
    }
}

impl AppendRows for EncodedRows<'_, '_> {
    fn messages(&self) -> &[u32] {
        &self.messages
    }

    fn parts(&self, rows: Range<usize>, bytes: usize) -> Vec<Range<usize>> {
        append_parts(&self.messages, rows, |i| self.rows[i].2.encoded_len(), bytes)
    }

    fn record(&self, rows: Range<usize>) -> Result<RecordBatch, String> {
        let views: Vec<RowView<'_>> = self.rows[rows].iter().map(|(_, _, r)| *r).collect();
        to_fluss::record_batch(&views, self.schema, self.arrow_schema)
    }
}

impl AppendRows for ColumnRows {
    fn messages(&self) -> &[u32] {
        ColumnRows::messages(self)
    }

    fn parts(&self, rows: Range<usize>, bytes: usize) -> Vec<Range<usize>> {
        // Parts may span the chunks' segments; only the segments under
        // `rows` are looked at (a consume calls this once a chunk).
        let mut sizes = vec![0; rows.len()];
        for segment in self.segments() {
            let (start, end) = (segment.start.max(rows.start), segment.end.min(rows.end));
            if start < end {
                sizes[start - rows.start..end - rows.start].fill(self.row_bytes(&segment));
            }
        }
        append_parts(self.messages(), rows.clone(), |i| sizes[i - rows.start], bytes)
    }

    fn record(&self, rows: Range<usize>) -> Result<RecordBatch, String> {
        ColumnRows::record(self, rows)
    }
}

/// The rows `range` (messages in order, `messages[i]` row i's) cut into
/// parts of about `bytes` bytes (`size` gives a row's), never inside a message.
pub(in crate::writer) fn append_parts(
    messages: &[u32],
    range: Range<usize>,
    size: impl Fn(usize) -> usize,
    bytes: usize,
) -> Vec<Range<usize>> {
    let mut parts = Vec::new();
    let (mut start, mut total) = (range.start, 0);
    for i in range.clone() {
        if i > start && messages[i - 1] != messages[i] && total >= bytes {
            parts.push(start..i);
            (start, total) = (i, 0);
        }
        total += size(i);
    }
    if start < range.end {
        parts.push(start..range.end);
    }
    parts
}

/// Splits `rows` into two parts near the middle without cutting a message's
/// rows apart; `None` when they are one message's.
fn split_by_message(messages: &[u32], rows: Range<usize>) -> Option<(Range<usize>, Range<usize>)> {
    let of = &messages[rows.clone()];
    let first = *of.first()?;
    if of.iter().all(|m| *m == first) {
        return None;
    }
    let mut mid = of.len() / 2;
    // Move the cut to a message boundary: forward, or back when the second
    // half is one message.
    while mid < of.len() && of[mid] == of[mid - 1] {
        mid += 1;
    }
    if mid == of.len() {
        mid = of.len() / 2;
        while mid > 0 && of[mid] == of[mid - 1] {
            mid -= 1;
        }
    }
    Some((rows.start..rows.start + mid, rows.start + mid..rows.end))
}

/// Parts sent and not yet acknowledged: each part's rows, its batch, and
/// its acknowledgement (`None`: the deadline passed before it was sent).
pub(in crate::writer) struct Sent {
    parts: Vec<(
        Range<usize>,
        RecordBatch,
        Option<fluss::error::Result<WriteResultFuture>>,
    )>,
    /// When the first part was sent.
    at: Instant,
}

impl Default for Sent {
    fn default() -> Self {
        Self {
            parts: Vec::new(),
            at: Instant::now(),
        }
    }
}

/// Where and how an append goes.
#[derive(Clone, Copy)]
struct Append<'w> {
    path: &'w TablePath,
    writer: &'w AppendWriter,
    what: &'w str,
    deadline: Deadline,
}

impl FlussWriter {
    /// Appends `rows` to a log table whose Arrow batches land whole: cut
    /// into message-aligned parts of about [`APPEND_BYTES`], every part made
    /// and sent before any acknowledgement is awaited (the client sends
    /// part k while part k+1 is made); then [`FlussWriter::settle`]s them.
    pub(in crate::writer) async fn append_whole(
        &self,
        table: &Table,
        writer: &AppendWriter,
        rows: &impl AppendRows,
        what: &str,
        deadline: Deadline,
        failures: &mut Vec<(u32, String)>,
    ) -> Result<(), WriteError> {
        let mut sent = Sent::default();
        let all = 0..rows.messages().len();
        tokio::task::block_in_place(|| self.send_parts(table, writer, rows, all, deadline, &mut sent))?;
        self.settle(&table.schema.path, writer, rows, sent, what, deadline, failures)
            .await
    }

    /// Sends `range` of `rows` as message-aligned parts to `table` (through
    /// its `writer`), noting each in `sent`.
    pub(in crate::writer) fn send_parts(
        &self,
        table: &Table,
        writer: &AppendWriter,
        rows: &impl AppendRows,
        range: Range<usize>,
        deadline: Deadline,
        sent: &mut Sent,
    ) -> Result<(), WriteError> {
        for part in rows.parts(range, APPEND_BYTES) {
            let record = (rows.record(part.clone()))
                .and_then(|record| widened(record, table))
                .map_err(|reason| WriteError::Table {
                    table: table.schema.path.to_string(),
                    reason,
                })?;
            if sent.parts.is_empty() {
                sent.at = Instant::now();
            }
            let ack = (!deadline.expired()).then(|| writer.append_arrow_batch(record.clone()));
            sent.parts.push((part, record, ack));
        }
        Ok(())
    }

    /// Awaits the acknowledgements of the parts `sent`, all together with a
    /// flush. A part refused for good is bisected by message, so that only
    /// the refused messages fail (added to `failures`) and nothing is sent
    /// twice; one that failed transiently is sent again with retries.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::writer) async fn settle(
        &self,
        path: &TablePath,
        writer: &AppendWriter,
        rows: &impl AppendRows,
        sent: Sent,
        what: &str,
        deadline: Deadline,
        failures: &mut Vec<(u32, String)>,
    ) -> Result<(), WriteError> {
        let record_of = |part: Range<usize>| {
            rows.record(part).map_err(|reason| WriteError::Table {
                table: path.to_string(),
                reason,
            })
        };
        let acks = async {
            let mut results = Vec::with_capacity(sent.parts.len());
            for (part, record, ack) in sent.parts {
                let result = match ack {
                    None => {
                        return Err(undelivered(
                            what,
                            0,
                            "the deadline passed before every part was sent",
                        ));
                    }
                    Some(Err(e)) => Err(e),
                    Some(Ok(future)) => match self.acknowledgement(path, future, deadline, sent.at).await {
                        Some(result) => result,
                        None => return Err(undelivered(what, 0, "no acknowledgement before the deadline")),
                    },
                };
                results.push((part, record, result));
            }
            Ok(results)
        };
        for (part, record, result) in racing_flush(acks, writer.flush()).await? {
            let Err(error) = result else {
                continue;
            };
            let refused = match self.failure_of(path, &error, deadline).await {
                Failure::Permanent => Some(format!("Fluss refused the write: {error}")),
                Failure::SchemaChanged => {
                    // Refused before it was sent: it goes, with NULL in the
                    // added columns, through the table opened again. Should
                    // that refuse it too, its messages are dead-lettered
                    // whole (not bisected).
                    match self.append_after_change(path, record, what, deadline).await? {
                        Ok(()) => continue,
                        Err(reason) => {
                            failures
                                .extend(part_messages(rows.messages(), part).map(|m| (m, reason.clone())));
                            continue;
                        }
                    }
                }
                _ => {
                    let again = self.deliver(path, what, true, deadline, || {
                        writer.append_arrow_batch(record.clone())
                    });
                    match racing_flush(again, writer.flush()).await {
                        // The table changed while the part was sent again:
                        // as above.
                        Err(WriteError::SchemaChanged { .. }) => {
                            if let Err(reason) =
                                self.append_after_change(path, record, what, deadline).await?
                            {
                                failures.extend(
                                    part_messages(rows.messages(), part).map(|m| (m, reason.clone())),
                                );
                            }
                            continue;
                        }
                        again => again?.err(),
                    }
                }
            };
            if let Some(reason) = refused {
                let append = Append {
                    path,
                    writer,
                    what,
                    deadline,
                };
                self.bisect_refused(&append, rows, part, reason, &record_of, failures)
                    .await?;
            }
        }
        Ok(())
    }

    /// Finds the messages of `part` (refused for good with `reason`) that
    /// Fluss refuses, by halves that never cut a message apart.
    async fn bisect_refused(
        &self,
        append: &Append<'_>,
        rows: &impl AppendRows,
        part: Range<usize>,
        reason: String,
        record_of: &impl Fn(Range<usize>) -> Result<RecordBatch, WriteError>,
        failures: &mut Vec<(u32, String)>,
    ) -> Result<(), WriteError> {
        let Append {
            path,
            writer,
            what,
            deadline,
        } = *append;
        let messages = rows.messages();
        let mut pending: Vec<(Range<usize>, Option<String>)> = vec![(part, Some(reason))];
        while let Some((range, known)) = pending.pop() {
            let outcome = match known {
                Some(reason) => Err(reason),
                None => {
                    let record = record_of(range.clone())?;
                    let ack = self.deliver(path, what, true, deadline, || {
                        writer.append_arrow_batch(record.clone())
                    });
                    racing_flush(ack, writer.flush()).await?
                }
            };
            let Err(reason) = outcome else {
                continue;
            };
            match split_by_message(messages, range.clone()) {
                Some((left, right)) => {
                    pending.push((right, None));
                    pending.push((left, None));
                }
                None => failures.extend(messages[range].iter().map(|m| (*m, reason.clone()))),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_never_cut_a_message_apart() {
        let messages = [0, 0, 0, 1, 2, 2];
        let (left, right) = split_by_message(&messages, 0..6).unwrap();
        assert_eq!((left.clone(), right.clone()), (0..3, 3..6));
        let (left, right) = split_by_message(&messages, right).unwrap();
        assert_eq!((left, right.clone()), (3..4, 4..6));
        assert!(
            split_by_message(&messages, right).is_none(),
            "one message's rows are not split"
        );
        let tail = [0, 1, 1, 1];
        assert_eq!(split_by_message(&tail, 0..4), Some((0..1, 1..4)));
    }

    #[test]
    fn append_parts_are_message_aligned_and_cover_every_row() {
        let messages = [0, 1, 1, 1, 2, 3];
        let parts = append_parts(&messages, 0..6, |_| 10, 20);
        assert_eq!(parts, vec![0..4, 4..6]);
        assert_eq!(append_parts(&messages, 0..6, |_| 10, usize::MAX), vec![0..6]);
        assert_eq!(
            append_parts(&messages, 0..6, |_| 10, 1).len(),
            4,
            "one part per message at most"
        );
        assert!(append_parts(&[], 0..0, |_| 1, 1).is_empty());
        assert_eq!(append_parts(&messages, 2..5, |_| 10, 1), vec![2..4, 4..5]);
    }
}
