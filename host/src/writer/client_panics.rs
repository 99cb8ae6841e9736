//! Writes a panic in fluss-rs left unanswered. fluss-rs 1.0 sends every
//! write of a connection from one task of its own (the writer client's
//! sender). When that task panics, nothing fails the writes queued in the
//! client: their acknowledgements never come, and every later write of the
//! connection joins them. One such panic is seen after a restart of a
//! cluster's only tablet server while a write to a partitioned table waits:
//! the client rebuilds its view of the cluster from the coordinator, a view
//! without tables, then unwraps the table of the partition it asks about
//! (`Cluster::from_metadata_response`, `cluster.rs:314`).
//!
//! The task's end cannot be seen through the client's API, so the process's
//! panic hook (this library's own: a `cdylib` carries its own copy of the
//! standard library) notes when a writer's sender panicked: each sender
//! runs on a thread of its writer's own ([`super::sender_thread`]), named
//! after it. A writer waiting for an acknowledgement after its sender
//! panicked renews the connection's writer client: the old one is closed
//! (its sender is gone, so that returns at once, and later sends through
//! it fail at once), the open tables are forgotten, so that the next write
//! opens them again on a new client, and every write sent before the
//! renewal gives up its wait and is sent again by its caller (the spool, or
//! the runtime). A write that had reached Fluss before the panic may so be
//! written twice.
//!
//! A panic of another writer's sender, or of fluss-rs code on any other
//! thread, renews nothing: closing a healthy client can leave its sender
//! spinning (see [`super::sender_thread`]).

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::sender_thread::current_sender;
use crate::writer::FlussWriter;

/// When each writer's sender last panicked, by the writer's sender id.
static LAST_PANICS: Mutex<BTreeMap<u64, Instant>> = Mutex::new(BTreeMap::new());

/// Installs the panic hook (once per process). A panic in fluss-rs is
/// noted (when on a writer's sender thread) and logged at error level, in
/// one line; every other panic goes to
/// the hook in force before. fluss-rs's panics skip that hook: with
/// `RUST_BACKTRACE` set, it resolves a backtrace on the runtime's worker
/// thread that panicked (the first took 190 ms in a test build), while the
/// plugin's calls wait on their deadlines.
pub(crate) fn watch() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| match info.location() {
            Some(location) if is_fluss_rs(location.file()) => {
                let sender = current_sender();
                if let Some(sender) = sender {
                    note(sender);
                }
                let message = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                match sender {
                    Some(sender) => tracing::error!(
                        "fluss-rs panicked at {location}, in the sender of writer {sender}: {message}"
                    ),
                    None => tracing::error!("fluss-rs panicked at {location}: {message}"),
                }
            }
            _ => previous(info),
        }));
    });
}

/// Whether `file`, a panic's location, is in fluss-rs's source (as a
/// registry crate, `fluss-rs-1.0.0/src/…`, or a checkout of fluss-rust,
/// `crates/fluss/src/…`).
fn is_fluss_rs(file: &str) -> bool {
    let file = file.replace('\\', "/");
    file.contains("/fluss-rs-") || file.contains("crates/fluss/src/")
}

/// Notes that the sender of writer `sender` panicked now.
fn note(sender: u64) {
    let mut panics = LAST_PANICS.lock().unwrap_or_else(|e| e.into_inner());
    panics.insert(sender, Instant::now());
}

/// Forgets the panics of writer `sender`'s sender (the writer is gone: ids
/// are never given again), so that the map holds live writers only.
pub(in crate::writer) fn forget(sender: u64) {
    let mut panics = LAST_PANICS.lock().unwrap_or_else(|e| e.into_inner());
    panics.remove(&sender);
}

/// When the sender of writer `sender` last panicked.
fn last_panic(sender: u64) -> Option<Instant> {
    let panics = LAST_PANICS.lock().unwrap_or_else(|e| e.into_inner());
    panics.get(&sender).copied()
}

/// The error a write given up this way ends its wait with.
pub(in crate::writer) fn writer_renewed() -> fluss::error::Error {
    fluss::error::Error::WriterClosed {
        message: "fluss-rs panicked while the write waited; its writer client was renewed".into(),
    }
}

impl FlussWriter {
    /// Renews the writer client when its sender panicked since it was made.
    pub(in crate::writer) async fn renew_after_client_panic(&self) {
        self.client_renewed_since_panic().await;
    }

    /// Whether the write sent at `sent` went through a writer client given
    /// up after its sender panicked (renewing the client first, when no
    /// renewal followed the last panic yet).
    pub(in crate::writer) async fn lost_to_client_panic(&self, sent: Instant) -> bool {
        match self.client_renewed_since_panic().await {
            Some(renewed) => sent < renewed,
            None => false,
        }
    }

    /// When the writer client was last renewed after a panic, renewing it
    /// now when its sender panicked since it was made; `None` while this
    /// writer's sender never panicked.
    async fn client_renewed_since_panic(&self) -> Option<Instant> {
        let panicked = last_panic(self.sender.id())?;
        let mut made = self.client_made.lock().await;
        if panicked >= *made {
            // Take the client out: the next table opened makes a new one.
            // Closing the old one makes sends through tables still holding
            // it fail at once; its sender task is gone, so it does not wait.
            if let Err(e) = self.connection.close(Duration::ZERO).await {
                tracing::debug!("closing the writer client fluss-rs panicked in: {e}");
            }
            if let Err(e) = self.make_writer_client() {
                tracing::warn!("making a new writer client (the next table opened makes one): {e}");
            }
            let forgotten = {
                let mut tables = self.tables.lock().await;
                let count = tables.len();
                tables.clear();
                count
            };
            *made = Instant::now();
            if let Some(metrics) = &self.metrics {
                metrics.client_renewed();
            }
            tracing::error!(
                "fluss-rs panicked while writes waited (logged above): its writer client \
                 was renewed, {forgotten} table(s) will be opened again, and the writes waiting \
                 are sent again"
            );
        }
        Some(*made)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_panics_in_fluss_rs_are_noted() {
        for file in [
            "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/fluss-rs-1.0.0/src/cluster/cluster.rs",
            "/home/u/fluss-rust/crates/fluss/src/client/write/sender.rs",
        ] {
            assert!(is_fluss_rs(file), "{file}");
        }
        for file in [
            "host/src/writer/mod.rs",
            "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/tokio-1.54.1/src/runtime/park.rs",
            "/work/main/host/src/writer/client_panics.rs",
        ] {
            assert!(!is_fluss_rs(file), "{file}");
        }
    }

    #[test]
    fn a_gone_writer_s_panics_are_forgotten_and_no_other_s() {
        // Ids no writer of this test process has (they count up from 1).
        let (gone, live) = (u64::MAX - 1, u64::MAX);
        note(gone);
        note(live);
        forget(gone);
        assert_eq!(last_panic(gone), None, "the gone writer's panic is kept");
        assert!(
            last_panic(live).is_some(),
            "another writer's panic was forgotten too"
        );
        forget(live);
    }
}
