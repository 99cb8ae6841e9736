//! Getting a write acknowledged: acknowledgement waits that refresh the
//! client's view of a table when they are slow, what an error means, and
//! one send retried with backoff, all bounded by the call's [`Deadline`]
//! (rows sent one by one: [`crate::writer::send::rows`]; appends of whole Arrow
//! batches: [`crate::writer::send::append`]). The client's flush only hurries rows out;
//! it races the acknowledgements and is never waited for on its own. A
//! write that follows one Fluss did not acknowledge in time first fetches
//! its table's metadata again (`guard_staleness`), and its appends leave
//! the runtime's worker while they may wait for room (`append_may_wait`).

pub(in crate::writer) mod dead_letter;
pub(in crate::writer) mod failure;

use std::time::{Duration, Instant};

use fluss::client::WriteResultFuture;

use crate::deadline::Deadline;
use crate::retry::{Loudness, Retries};
use crate::schema::TablePath;
use crate::writer::delivery::failure::{
    Failure, classify, undelivered, undelivered_after, undelivered_on_renewal,
};
use crate::writer::tables::fluss_path;
use crate::writer::{FlussWriter, MAX_BUFFER_WAIT, WriteError, client_panics};

/// How long an acknowledgement may take before the writer refreshes the
/// table's metadata in the client (see `FlussWriter::refresh_table_metadata`).
const METADATA_NUDGE: Duration = Duration::from_secs(2);

/// The shortest wait before such a refresh.
const MIN_METADATA_NUDGE: Duration = Duration::from_millis(100);

/// How long an acknowledgement may take before the writer looks for client
/// connections still without `TCP_NODELAY` (a connection opened for this
/// very request; see [`crate::writer::nodelay`]).
const NODELAY_NUDGE: Duration = Duration::from_millis(10);

/// Waits for `acks`, running `flush` beside it until `acks` is done: the
/// flush only makes rows leave without waiting for the client's batch
/// timeout, and one stuck table or bucket must not hold a write that is
/// otherwise acknowledged.
pub(in crate::writer) async fn racing_flush<T>(
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

impl FlussWriter {
    /// What to do about `error` from a write to `table`.
    pub(in crate::writer) async fn failure_of(
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
    /// `deadline`. `Ok(Err(reason))` is a permanent refusal;
    /// [`WriteError::SchemaChanged`], a writer older than the table. Retries are
    /// logged at warn level when `warn_on_retry`, at debug level otherwise.
    pub(in crate::writer) async fn deliver(
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
            match self.failure_of(table, &error, deadline).await {
                Failure::Permanent => return Ok(Err(format!("Fluss refused the write: {error}"))),
                // Sending it again through this writer cannot succeed.
                Failure::SchemaChanged => {
                    return Err(WriteError::SchemaChanged {
                        table: table.to_string(),
                    });
                }
                Failure::ClientRenewed => return Err(undelivered_on_renewal(what, retries.made(), error)),
                _ => {}
            }
            if !retries.wait_after(1, &error).await {
                return Err(undelivered_after(what, retries.made(), error));
            }
        }
    }

    /// Waits for `ack` until `deadline` (`None` when it passes), refreshing
    /// the client's metadata of `table` whenever an acknowledgement is slow
    /// to come, looking once for connections without `TCP_NODELAY`, and
    /// replacing the client's connections once it has waited
    /// `request_timeout` (see `writer::unanswered`).
    pub(in crate::writer) async fn acknowledgement(
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
                    if self.lost_to_client_panic(sent).await {
                        return Some(Err(client_panics::writer_renewed()));
                    }
                    // Only a write without a deadline (the spool's) asks:
                    // a bounded one ends at its deadline anyway.
                    if !deadline.is_bounded()
                        && let Some(gone) = self.gone(table, deadline).await
                    {
                        return Some(Err(gone));
                    }
                    self.refresh_table_metadata(table, deadline).await;
                    self.replace_unanswering_connections(table, sent).await;
                }
            }
        }
    }

    /// Runs `write` (to `path`): when the last write was not acknowledged in
    /// time, first fetches the table's metadata again (see
    /// `refresh_table_metadata`); when this one is not, marks the next.
    pub(in crate::writer) async fn guard_staleness<T>(
        &self,
        path: &TablePath,
        deadline: Deadline,
        write: impl Future<Output = Result<T, WriteError>>,
    ) -> Result<T, WriteError> {
        use std::sync::atomic::Ordering;
        self.renew_after_client_panic().await;
        if self.stale.swap(false, Ordering::Relaxed) {
            self.refresh_table_metadata(path, deadline.at_most(MAX_BUFFER_WAIT))
                .await;
        }
        let written = write.await;
        let troubled = matches!(
            written,
            Err(WriteError::Undelivered { .. } | WriteError::DeadlinePassed { .. })
        );
        if troubled {
            self.stale.store(true, Ordering::Relaxed);
        }
        self.troubled.store(troubled, Ordering::Relaxed);
        written
    }

    /// Whether an append may wait long for room in the client's buffer
    /// (up to `buffer_wait_timeout`), so that it should leave the runtime's
    /// worker to the other tasks meanwhile (`block_in_place`): while Fluss
    /// is in trouble (the last write was not acknowledged in time) the
    /// buffer fills with batches that do not leave. A healthy cluster
    /// drains it within milliseconds, and handing the worker off costs a
    /// thread wake-up a send, which the `consume` bench sees on the lean
    /// path (`docs/benchmarks.md`).
    pub(in crate::writer) fn append_may_wait(&self) -> bool {
        self.troubled.load(std::sync::atomic::Ordering::Relaxed)
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
    pub(crate) async fn refresh_table_metadata(&self, table: &TablePath, deadline: Deadline) {
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
