//! What a failed write means: sorted into transient (send again),
//! permanent (dead-letter) or an unknown table (look again), and the error a
//! write that was never acknowledged ends with.

use crate::writer::WriteError;

/// What to do about a failed write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::writer) enum Failure {
    /// Send it again (after a backoff).
    Transient,
    /// Sending it again cannot succeed: dead-letter it.
    Permanent,
    /// The server does not know the table: permanent if the table is truly
    /// gone, transient if it exists (a restarted tablet server answers this
    /// until it has loaded its replicas).
    TableUnknown,
    /// The table's schema changed under the writer: fluss-rs makes a
    /// primary-key table's new batches with the schema its metadata has now
    /// and refuses rows of a writer made before (sending them again through
    /// it cannot succeed; a writer of the new schema can).
    SchemaChanged,
    /// The writer client the write went through was given up after a
    /// panic in fluss-rs (see [`crate::writer::client_panics`]): sending it
    /// again through the same table cannot succeed; the whole write goes
    /// again, through the table opened again.
    ClientRenewed,
}

/// What fluss-rs 1.0 says when a row's writer was made for another schema
/// than its metadata has now (`client/write/batch.rs`).
const SCHEMA_CHANGED: &str = "of the write record to append is not the same as the current schema id";

/// Whether `message` is fluss-rs 1.0's refusal of a row narrower than the
/// schema its metadata has now (`position 2 out of bounds (row has 2
/// fields)`), which a row appended one by one through a writer made before
/// columns were added gets once the client's metadata has them.
fn is_narrower_row(message: &str) -> bool {
    let Some((_, rest)) = message.split_once(" out of bounds (row has ") else {
        return false;
    };
    message.starts_with("position ") && rest.trim_end_matches('.').ends_with(" fields)")
}

/// Whether `message` is fluss-rs 1.0's refusal of an Arrow batch narrower
/// than the table (`RecordBatch has 2 columns but the table has 3`), which
/// an append writer made before columns were added gives once the client's
/// metadata has them.
fn is_narrower_batch(message: &str) -> bool {
    let Some(rest) = message.strip_prefix("RecordBatch has ") else {
        return false;
    };
    let Some((made, table)) = rest.split_once(" columns but the table has ") else {
        return false;
    };
    matches!((made.parse::<usize>(), table.parse::<usize>()), (Ok(made), Ok(table)) if made < table)
}

/// Sorts a write error. Transient errors are an explicit list (the network,
/// timeouts, leaders and replicas not available, a full buffer, no server
/// known to the client); everything else is permanent and dead-letters the
/// message with the server's own message.
pub(in crate::writer) fn classify(error: &fluss::error::Error) -> Failure {
    use fluss::error::Error as E;
    use fluss::rpc::FlussError as F;
    match error {
        E::FlussAPIError { .. } => match error.api_error() {
            Some(F::TableNotExist | F::UnknownTableOrBucketException | F::PartitionNotExists) => {
                Failure::TableUnknown
            }
            Some(
                F::NetworkException
                | F::CorruptMessage
                | F::CorruptRecordException
                | F::SchemaNotExist
                | F::LogStorageException
                | F::KvStorageException
                | F::StorageException
                | F::NotLeaderOrFollower
                | F::LeaderNotAvailableException
                | F::FencedLeaderEpochException
                | F::InvalidCoordinatorException
                | F::RequestTimeOut
                | F::NotEnoughReplicasException
                | F::NotEnoughReplicasAfterAppendException
                | F::OperationNotAttemptedException
                | F::OutOfOrderSequenceException
                | F::UnknownWriterIdException
                | F::RetriableAuthenticateException
                | F::StorageBackpressureException,
            ) => Failure::Transient,
            _ => Failure::Permanent,
        },
        // The connection failed, the buffer was full, or the client had no
        // server to send to (fluss-rs reports "no tablet server available"
        // and a dropped result channel as unexpected errors).
        E::UnexpectedError { message, .. } if message.contains(SCHEMA_CHANGED) => Failure::SchemaChanged,
        E::IllegalArgument { message } if is_narrower_batch(message) || is_narrower_row(message) => {
            Failure::SchemaChanged
        }
        E::WriterClosed { .. } => Failure::ClientRenewed,
        E::RpcError { .. }
        | E::IoUnexpectedError { .. }
        | E::BufferExhausted { .. }
        | E::UnexpectedError { .. } => Failure::Transient,
        _ => Failure::Permanent,
    }
}

/// Not acknowledged, for `reason` (no error of the client's to keep).
pub(in crate::writer) fn undelivered(what: &str, retries: u32, reason: &str) -> WriteError {
    WriteError::Undelivered {
        what: what.into(),
        retries,
        reason: reason.into(),
        last_error: None,
    }
}

/// Not acknowledged: the writer client the write went through was given
/// up after a panic in fluss-rs (`error` is what it last said).
pub(in crate::writer) fn undelivered_on_renewal(
    what: &str,
    retries: u32,
    error: fluss::error::Error,
) -> WriteError {
    let reason = format!(
        "its writer client was given up after fluss-rs panicked ({error}); \
         the write goes again through a new one"
    );
    undelivered_with(what, retries, reason, error)
}

/// Not acknowledged: the retries ran out on `error`.
pub(in crate::writer) fn undelivered_after(
    what: &str,
    retries: u32,
    error: fluss::error::Error,
) -> WriteError {
    undelivered_with(what, retries, error.to_string(), error)
}

/// Not acknowledged, for `reason`, with the client's last `error` kept.
fn undelivered_with(what: &str, retries: u32, reason: String, error: fluss::error::Error) -> WriteError {
    WriteError::Undelivered {
        what: what.into(),
        retries,
        reason,
        last_error: Some(Box::new(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_listed_errors_are_transient() {
        use fluss::error::Error as E;
        let api = |code: fluss::rpc::FlussError, message: &str| E::FlussAPIError {
            api_error: fluss::rpc::ApiError {
                code: code as i32,
                message: message.into(),
            },
        };
        use fluss::rpc::FlussError as F;
        assert_eq!(
            classify(&api(F::LeaderNotAvailableException, "")),
            Failure::Transient
        );
        assert_eq!(classify(&api(F::RequestTimeOut, "")), Failure::Transient);
        assert_eq!(classify(&api(F::TableNotExist, "")), Failure::TableUnknown);
        assert_eq!(
            classify(&api(F::UnknownServerError, "delete refused")),
            Failure::Permanent
        );
        assert_eq!(classify(&api(F::InvalidTableException, "")), Failure::Permanent);
        assert_eq!(
            classify(&E::UnexpectedError {
                message: "schema id 1 of the write record to append is not the same as the current \
                          schema id 2 in the batch."
                    .into(),
                source: None,
            }),
            Failure::SchemaChanged
        );
        let arrow = |message: &str| E::IllegalArgument {
            message: message.into(),
        };
        assert_eq!(
            classify(&arrow("RecordBatch has 2 columns but the table has 3")),
            Failure::SchemaChanged
        );
        assert_eq!(
            classify(&arrow("RecordBatch has 3 columns but the table has 2")),
            Failure::Permanent
        );
        assert_eq!(
            classify(&arrow("position 2 out of bounds (row has 2 fields)")),
            Failure::SchemaChanged
        );
        assert_eq!(
            classify(&arrow("position 2 of the key out of range")),
            Failure::Permanent
        );
        assert_eq!(
            classify(&E::BufferExhausted {
                message: "full".into()
            }),
            Failure::Transient
        );
        assert_eq!(
            classify(&E::IllegalArgument {
                message: "bad".into()
            }),
            Failure::Permanent
        );
    }
}
