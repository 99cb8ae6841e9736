//! Getting rows acknowledged: sends, acknowledgement waits, retries with
//! backoff (appends of whole Arrow batches: [`super::append`]), all bounded by the call's
//! [`Deadline`]. The client's flush only hurries rows out; it races the
//! acknowledgements and is never waited for on its own.

use std::time::{Duration, Instant};

use fluss::client::WriteResultFuture;
use fluss::row::GenericRow;
use fluss_row_codec::RowKind;

use super::append::EncodedRows;
use super::failure::{Failure, classify, undelivered, undelivered_after};
use super::tables::{Sink, Table, fluss_path};
use super::{FlussWriter, PendingRow, WriteError, partial};
use crate::deadline::Deadline;
use crate::retry::{Loudness, Retries};
use crate::rows::keyed::KeyedRow;
use crate::rows::to_fluss;
use crate::schema::TablePath;

/// How long an acknowledgement may take before the writer refreshes the
/// table's metadata in the client (see `FlussWriter::refresh_table_metadata`).
const METADATA_NUDGE: Duration = Duration::from_secs(2);

/// The shortest wait before such a refresh.
const MIN_METADATA_NUDGE: Duration = Duration::from_millis(100);

/// How long an acknowledgement may take before the writer looks for client
/// connections still without `TCP_NODELAY` (a connection opened for this
/// very request; see [`super::nodelay`]).
const NODELAY_NUDGE: Duration = Duration::from_millis(10);

/// Waits for `acks`, running `flush` beside it until `acks` is done: the
/// flush only makes rows leave without waiting for the client's batch
/// timeout, and one stuck table or bucket must not hold a write that is
/// otherwise acknowledged.
pub(super) async fn racing_flush<T>(
    acks: impl Future<Output = T>,
    flush: impl Future<Output = fluss::error::Result<()>>,
) -> T {
    tokio::pin!(acks, flush);
    tokio::select! {
        biased;
        done = &mut acks => done,
        _ = &mut flush => acks.await,
    }
}

/// One row's acknowledgement, once awaited.
enum Acked {
    Done,
    Failed(fluss::error::Error),
}

impl FlussWriter {
    /// Writes one table's rows; messages whose rows Fluss refuses for good
    /// are added to `failures`.
    pub(super) async fn write_group(
        &self,
        table: &Table,
        rows: &[PendingRow<'_>],
        deadline: Deadline,
        failures: &mut Vec<(u32, String)>,
    ) -> Result<(), WriteError> {
        let what = format!("{} rows for {}", rows.len(), table.schema.path);
        match &table.sink {
            Sink::Log(writer) if table.whole_batches => {
                let rows = EncodedRows::new(rows, table);
                self.append_whole(&table.schema.path, writer, &rows, &what, deadline, failures)
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
    pub(super) async fn send_rows<F: Future<Output = fluss::error::Result<()>>>(
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
                            _ => {
                                transient.push(i);
                                last_error = Some(error);
                            }
                        }
                    }
                }
                Ok((transient, refused_now, last_error))
            };
            let (transient, refused_now, last_error) = racing_flush(acks, flush()).await?;
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

    /// What to do about `error` from a write to `table`.
    pub(super) async fn failure_of(
        &self,
        table: &TablePath,
        error: &fluss::error::Error,
        deadline: Deadline,
    ) -> Failure {
        match classify(error) {
            Failure::TableUnknown => match deadline
                .at_most(METADATA_NUDGE)
                .run(self.admin.table_exists(&fluss_path(table)))
                .await
            {
                Ok(Ok(false)) => Failure::Permanent,
                _ => {
                    // The client forgot the table (see `refresh_table_metadata`).
                    self.refresh_table_metadata(table, deadline).await;
                    Failure::Transient
                }
            },
            other => other,
        }
    }

    /// Sends with `send` until acknowledged: transient errors are retried
    /// with exponential backoff and jitter, bounded by `max_retries` and
    /// `deadline`. `Ok(Err(reason))` is a permanent refusal. Retries are
    /// logged at warn level when `warn_on_retry`, at debug level otherwise.
    pub(super) async fn deliver(
        &self,
        table: &TablePath,
        what: &str,
        warn_on_retry: bool,
        deadline: Deadline,
        mut send: impl FnMut() -> fluss::error::Result<WriteResultFuture>,
    ) -> Result<Result<(), String>, WriteError> {
        let loudness = if warn_on_retry {
            Loudness::Warn
        } else {
            Loudness::Debug
        };
        let mut retries = Retries::new(self.settings.retry_policy(), what, deadline)
            .counted_in(self.metrics.as_deref())
            .logged(loudness);
        loop {
            if deadline.expired() {
                return Err(undelivered(
                    what,
                    retries.made(),
                    "the deadline passed before it was sent",
                ));
            }
            let sent = Instant::now();
            let result = match tokio::task::block_in_place(&mut send) {
                Ok(future) => match self.acknowledgement(table, future, deadline, sent).await {
                    Some(result) => result,
                    None => {
                        return Err(undelivered(
                            what,
                            retries.made(),
                            "no acknowledgement before the deadline",
                        ));
                    }
                },
                Err(e) => Err(e),
            };
            let error = match result {
                Ok(()) => return Ok(Ok(())),
                Err(e) => e,
            };
            if self.failure_of(table, &error, deadline).await == Failure::Permanent {
                return Ok(Err(format!("Fluss refused the write: {error}")));
            }
            if !retries.wait_after(1, &error).await {
                return Err(undelivered_after(what, retries.made(), error));
            }
        }
    }

    /// Waits for `ack` until `deadline` (`None` when it passes), refreshing
    /// the client's metadata of `table` whenever an acknowledgement is slow
    /// to come, and looking once for connections without `TCP_NODELAY`.
    pub(super) async fn acknowledgement(
        &self,
        table: &TablePath,
        ack: WriteResultFuture,
        deadline: Deadline,
        sent: Instant,
    ) -> Option<fluss::error::Result<()>> {
        let acknowledged = |result: fluss::error::Result<()>| {
            if let (Ok(()), Some(metrics)) = (&result, &self.metrics) {
                metrics.acknowledged(sent.elapsed());
            }
            Some(result)
        };
        tokio::pin!(ack);
        let first = deadline.at_most(NODELAY_NUDGE).instant();
        tokio::select! {
            result = &mut ack => return acknowledged(result),
            () = tokio::time::sleep_until(first) => self.sweeper.sweep_soon().await,
        }
        loop {
            // Refresh after METADATA_NUDGE, or half way to the deadline when
            // that comes sooner (a short delivery_timeout must still get one).
            let wait = METADATA_NUDGE.min((deadline.remaining() / 2).max(MIN_METADATA_NUDGE));
            let nudge = deadline.at_most(wait).instant();
            tokio::select! {
                result = &mut ack => return acknowledged(result),
                () = tokio::time::sleep_until(nudge) => {
                    if deadline.expired() {
                        return None;
                    }
                    // Only a write without a deadline (the spool's) asks:
                    // a bounded one ends at its deadline anyway.
                    if !deadline.is_bounded()
                        && let Some(gone) = self.gone(table, deadline).await
                    {
                        return Some(Err(gone));
                    }
                    self.refresh_table_metadata(table, deadline).await;
                }
            }
        }
    }

    /// A "table does not exist" error when the catalog says `table` is gone:
    /// fluss-rs 1.0 may never acknowledge (nor fail) an append to a table
    /// dropped under it, so a slow acknowledgement is checked this way.
    async fn gone(&self, table: &TablePath, deadline: Deadline) -> Option<fluss::error::Error> {
        let exists = deadline
            .at_most(METADATA_NUDGE)
            .run(self.admin.table_exists(&fluss_path(table)))
            .await;
        matches!(exists, Ok(Ok(false))).then(|| fluss::error::Error::FlussAPIError {
            api_error: fluss::rpc::ApiError {
                code: fluss::rpc::FlussError::TableNotExist as i32,
                message: format!("table {table} no longer exists (dropped while its rows were in flight)"),
            },
        })
    }

    /// Fetches `table`'s metadata into the client again. fluss-rs 1.0 rebuilds
    /// its cluster view from the bootstrap servers when no tablet server
    /// answers (a restart of the only one), and that view holds no tables: until
    /// something fetches the table again, new writes fail with "table not
    /// found" and batches already queued are never sent.
    pub(super) async fn refresh_table_metadata(&self, table: &TablePath, deadline: Deadline) {
        let metadata = self.connection.get_metadata();
        match deadline
            .at_most(METADATA_NUDGE)
            .run(metadata.update_table_metadata(&fluss_path(table)))
            .await
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!(%table, "refreshing the table's metadata: {e}"),
            Err(_) => {
                tracing::debug!(%table, "refreshing the table's metadata: no answer before the deadline")
            }
        }
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

pub(super) fn send_keyed(
    writer: &fluss::client::UpsertWriter,
    kind: RowKind,
    row: &GenericRow<'static>,
) -> fluss::error::Result<WriteResultFuture> {
    match kind {
        RowKind::Delete => writer.delete(row),
        _ => writer.upsert(row),
    }
}
