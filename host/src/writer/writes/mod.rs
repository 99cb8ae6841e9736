//! One write of a batch's rows, from the chunks it takes to what became of
//! every message:
//!
//! - [`input`]: the forms a batch's rows come in, and the one entry,
//!   [`crate::writer::FlussWriter::write_within`];
//! - [`chunks`]: chunks of rows as the writer takes them, made or not yet;
//! - [`finished`]: a transform's chunk finished into the table's columns
//!   beside the transform call;
//! - [`transformed`]: a transform's rows, each chunk sent the way its
//!   tables take it;
//! - [`steps`]: encoded rows (routing, partial updates, bucketed tables)
//!   resolved, checked, placed, grouped and written.

pub(in crate::writer) mod chunks;
pub(in crate::writer) mod finished;
pub(in crate::writer) mod input;
pub(in crate::writer) mod steps;
pub(in crate::writer) mod transformed;
