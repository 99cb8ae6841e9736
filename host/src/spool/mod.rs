//! The durable local spool: batches that Fluss could not acknowledge within
//! their deadline, and the batches queued behind them, kept on local disk
//! until Fluss takes them, so that `consume` can return `0` (the runtime has
//! already committed their offsets) without losing them.
//!
//! - [`record`]: one batch's bytes, framed with its length and a checksum;
//! - [`journal`]: the folder (lock, durable writes, leftovers, damage).
//!
//! What goes to the spool and when, and the drainer that replays it, are the
//! pipeline's (`pipeline::spooled`).

pub(crate) mod journal;
pub(crate) mod record;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// When batches go to the spool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SpoolMode {
    /// Only a batch Fluss did not acknowledge within its deadline, and those
    /// after it until the spool has drained: no disk I/O while Fluss is healthy.
    #[default]
    OnFailure,
    /// Every batch, before it is written (released once acknowledged): a
    /// crash of the runtime mid-write loses nothing that reached the plugin.
    Always,
    /// No spool: a batch not acknowledged in time fails (`consume` returns 1).
    Off,
}

/// Where spools go when the config names no folder: under
/// `XDG_STATE_HOME` or `HOME`, one folder per sink table.
pub(crate) fn default_dir(table: &str) -> Option<PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|home| PathBuf::from(home).join(".local/state"))
        })?;
    Some(base.join("iggy-fluss-sink/spool").join(table))
}

/// Why the spool cannot be used, or a batch not made durable.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SpoolError {
    /// No folder was named and none can be derived.
    #[error(
        "the spool has no folder: spool.path is not set and neither XDG_STATE_HOME nor HOME is; \
         set spool.path, or spool.mode = \"off\""
    )]
    NoFolder,
    /// The folder cannot be created, read or listed.
    #[error("spool folder {dir}: {source}")]
    Folder {
        /// The folder (or file).
        dir: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Someone other than this user could change what gets replayed.
    #[error(
        "spool folder {dir} is not private: {reason}; make it a folder of this user with mode 0700 \
         (chmod 700), or set spool.path to another folder"
    )]
    NotPrivate {
        /// The folder.
        dir: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Another sink instance holds the folder.
    #[error(
        "spool folder {dir} is in use by another sink instance ({holder}); two instances never share \
         a spool: give each connector (and each runtime on this host) its own spool.path"
    )]
    Locked {
        /// The folder.
        dir: PathBuf,
        /// What the lock file says of its holder.
        holder: String,
    },
    /// A record could not be written durably (a full disk, an I/O error, a
    /// read-only folder): its batch is not in the spool.
    #[error("writing {path} failed: {source}; the batch is not durable")]
    Write {
        /// The record's file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `spool.max_size` left no room before the batch's deadline.
    #[error(
        "the spool is full ({bytes} bytes of spool.max_size {max}) and did not drain before the deadline; \
         Fluss has not taken the spooled batches yet"
    )]
    Full {
        /// Bytes the spool holds.
        bytes: u64,
        /// `spool.max_size`.
        max: u64,
    },
    /// A record no longer reads back.
    #[error("spool record {path} ({offsets}) is damaged: {reason}; it was set aside, not replayed")]
    Corrupt {
        /// The record's file.
        path: PathBuf,
        /// Its offsets.
        offsets: String,
        /// What is wrong.
        reason: String,
    },
}
