//! Rows sent one by one, each with its own acknowledgement: a log table
//! whose batches could be split across buckets, and primary-key tables
//! (upserts and deletes, partial updates run by run of the same columns).
//! Transient failures are sent again after a backoff, in an order that
//! keeps each key's last write the last; all bounded by the call's
//! [`Deadline`].

use std::time::Instant;

use fluss::client::WriteResultFuture;
use fluss::row::GenericRow;
use fluss_row_codec::RowKind;

use crate::deadline::Deadline;
use crate::retry::Retries;
use crate::rows::keyed::KeyedRow;
use crate::rows::to_fluss;
use crate::writer::delivery::failure::{Failure, undelivered, undelivered_after, undelivered_on_renewal};
use crate::writer::delivery::racing_flush;
use crate::writer::send::append::EncodedRows;
use crate::writer::send::partial;
use crate::writer::tables::{Sink, Table};
use crate::writer::{FlussWriter, PendingRow, WriteError};

/// One row's acknowledgement, once awaited.
enum Acked {
    Done,
    Failed(fluss::error::Error),
}

impl FlussWriter {
    /// Writes one table's rows; messages whose rows Fluss refuses for good
    /// are added to `failures`.
    pub(in crate::writer) async fn write_group(
        &self,
        table: &Table,
        rows: &[PendingRow<'_>],
        deadline: Deadline,
        failures: &mut Vec<(u32, String)>,
    ) -> Result<(), WriteError> {
        let what = format!("{} rows for {}", rows.len(), table.schema.path);
        match &table.sink {
            Sink::Log(writer) if table.takes_columns() => {
                let rows = EncodedRows::new(rows, table);
                self.append_whole(table, writer, &rows, &what, deadline, failures)
                    .await?;
            }
            // A batch split across buckets could be refused in some and taken
            // in others: append row by row, each with its own acknowledgement.
            Sink::Log(writer) => {
                let send = |_: RowKind, row: &GenericRow<'static>| writer.append(row);
                let converted = converted(rows, table, failures);
                self.send_rows(
                    table,
                    &converted,
                    &what,
                    send,
                    || writer.flush(),
                    deadline,
                    failures,
                )
                .await?;
            }
            Sink::Keyed(sink) => {
                for (columns, run) in partial::runs(rows) {
                    let writer = match sink.writer(&columns) {
                        Ok(w) => w,
                        Err(reason) => {
                            failures.extend(run.iter().map(|(m, _, _)| (*m, reason.clone())));
                            continue;
                        }
                    };
                    let Ok(_pass) = deadline.run(sink.gate.enter(&columns)).await else {
                        return Err(undelivered(
                            &what,
                            0,
                            "writes of other columns held the table until the deadline",
                        ));
                    };
                    let send = |kind, row: &GenericRow<'static>| send_keyed(&writer, kind, row);
                    let converted = converted(run, table, failures);
                    self.send_rows(
                        table,
                        &converted,
                        &what,
                        send,
                        || sink.full().flush(),
                        deadline,
                        failures,
                    )
                    .await?;
                }
            }
        }
        Ok(())
    }

    /// Sends `converted` (rows in fluss-rs's form) one by one with `send`,
    /// then awaits each row's acknowledgement; messages whose rows are
    /// refused for good are added
    /// to `failures`. Rows that failed transiently are sent again after a
    /// backoff: on a primary-key table every row from the first
    /// of them on is sent again in order, so that the last write of a key
    /// stays the last (upserts and deletes may be repeated, the final state
    /// is the same); on a log table only the failed rows are, so that no
    /// row is appended twice.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::writer) async fn send_rows<F: Future<Output = fluss::error::Result<()>>>(
        &self,
        table: &Table,
        converted: &[KeyedRow],
        what: &str,
        send: impl Fn(RowKind, &GenericRow<'static>) -> fluss::error::Result<WriteResultFuture>,
        flush: impl Fn() -> F,
        deadline: Deadline,
        failures: &mut Vec<(u32, String)>,
    ) -> Result<(), WriteError> {
        let path = &table.schema.path;
        let keyed = matches!(table.sink, Sink::Keyed(_));
        let mut refused = vec![false; converted.len()];
        // Indexes of `converted` to send this round.
        let mut round: Vec<usize> = (0..converted.len()).collect();
        let mut retries =
            Retries::new(self.settings.retry_policy(), what, deadline).counted_in(self.metrics.as_deref());
        while !round.is_empty() {
            // A send blocks the thread while the client's buffer is full:
            // let the runtime move its other tasks off this worker meanwhile.
            let sent_at = Instant::now();
            let sent: Vec<(usize, fluss::error::Result<WriteResultFuture>)> =
                tokio::task::block_in_place(|| {
                    round
                        .iter()
                        .map_while(|&i| {
                            (!deadline.expired()).then(|| {
                                let (_, kind, row) = &converted[i];
                                (i, send(*kind, row))
                            })
                        })
                        .collect()
                });
            let unsent = round.len() - sent.len();
            let acks = async {
                let mut transient = Vec::new();
                let mut refused_now = Vec::new();
                let mut last_error = None;
                let mut schema_changed = false;
                let mut behind_the_table = Vec::new();
                for (i, result) in sent {
                    let acked = match result {
                        Ok(future) => match self.acknowledgement(path, future, deadline, sent_at).await {
                            Some(Ok(())) => Acked::Done,
                            Some(Err(e)) => Acked::Failed(e),
                            None => {
                                return Err(undelivered(
                                    what,
                                    retries.made(),
                                    "no acknowledgement before the deadline",
                                ));
                            }
                        },
                        Err(e) => Acked::Failed(e),
                    };
                    if let Acked::Failed(error) = acked {
                        match self.failure_of(path, &error, deadline).await {
                            Failure::Permanent => {
                                refused_now.push((i, format!("Fluss refused the write: {error}")));
                            }
                            // Upserts may be written again whole; appends
                            // of rows already taken may not (they would
                            // repeat): the refused ones alone go again.
                            Failure::SchemaChanged if keyed => schema_changed = true,
                            Failure::SchemaChanged => behind_the_table.push((i, error)),
                            Failure::ClientRenewed => {
                                return Err(undelivered_on_renewal(what, retries.made(), error));
                            }
                            _ => {
                                transient.push(i);
                                last_error = Some(error);
                            }
                        }
                    }
                }
                Ok((
                    transient,
                    refused_now,
                    last_error,
                    schema_changed,
                    behind_the_table,
                ))
            };
            let (mut transient, refused_now, mut last_error, schema_changed, behind_the_table) =
                racing_flush(acks, flush()).await?;
            if schema_changed {
                return Err(WriteError::SchemaChanged {
                    table: path.to_string(),
                });
            }
            if !behind_the_table.is_empty() {
                let (indexes, errors): (Vec<usize>, Vec<_>) = behind_the_table.into_iter().unzip();
                if !Box::pin(
                    self.append_rows_after_change(table, converted, &indexes, what, deadline, failures),
                )
                .await?
                {
                    // Fluss's metadata does not show the change yet: they
                    // wait, as a transient failure's.
                    transient.extend(indexes);
                    transient.sort_unstable();
                    last_error = errors.into_iter().next().or(last_error);
                }
            }
            for (i, reason) in refused_now {
                refused[i] = true;
                failures.push((converted[i].0, reason));
            }
            if unsent > 0 {
                return Err(undelivered(
                    what,
                    retries.made(),
                    "the deadline passed before every row was sent",
                ));
            }
            let Some(error) = last_error else {
                break;
            };
            if !retries.wait_after(transient.len(), &error).await {
                return Err(undelivered_after(what, retries.made(), error));
            }
            round = if keyed {
                (transient[0]..converted.len()).filter(|&i| !refused[i]).collect()
            } else {
                transient
            };
        }
        Ok(())
    }
}

/// `rows` (checked against `table`) in fluss-rs's form; a row that cannot
/// be converted fails its message (added to `failures`).
fn converted(rows: &[PendingRow<'_>], table: &Table, failures: &mut Vec<(u32, String)>) -> Vec<KeyedRow> {
    let mut converted = Vec::with_capacity(rows.len());
    for (message, kind, row) in rows {
        match to_fluss::generic_row(row, &table.schema) {
            Ok(g) => converted.push((*message, *kind, g)),
            Err(reason) => failures.push((*message, reason)),
        }
    }
    converted
}

pub(in crate::writer) fn send_keyed(
    writer: &fluss::client::UpsertWriter,
    kind: RowKind,
    row: &GenericRow<'static>,
) -> fluss::error::Result<WriteResultFuture> {
    match kind {
        RowKind::Delete => writer.delete(row),
        _ => writer.upsert(row),
    }
}
