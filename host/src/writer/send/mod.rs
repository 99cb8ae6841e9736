//! Sending rows as each table takes them, every send's acknowledgement kept
//! to be awaited (see [`super::delivery`]):
//!
//! - [`append`]: whole Arrow batches appended to a log table, cut into
//!   message-aligned parts, a refused part bisected;
//! - [`after_change`]: a part refused for columns added since its table
//!   was opened, sent through the table opened again;
//! - [`log_columns`]: the lean path's Arrow columns, sent chunk by chunk as
//!   they are made, cut by partition on a partitioned table;
//! - [`upserts`]: a primary-key table's rows made straight into the upsert
//!   writer's rows;
//! - [`rows`]: rows sent one by one (bucketed log tables, primary-key
//!   tables), retried in an order that keeps each key's last write last;
//! - [`partial`]: partial updates, one column set in flight at a time;
//! - [`arrow_ipc`]: Arrow IPC payloads matched to the table and appended.

pub(in crate::writer) mod after_change;
pub(in crate::writer) mod append;
pub(in crate::writer) mod arrow_ipc;
pub(in crate::writer) mod log_columns;
pub(in crate::writer) mod partial;
pub(in crate::writer) mod rows;
pub(in crate::writer) mod upserts;
