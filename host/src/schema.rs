//! Table paths and schemas as the sink sees them.

use std::fmt;
use std::str::FromStr;

pub use fluss_row_codec::{Column, DataType};

/// A Fluss table's "database.table" name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TablePath {
    /// The database.
    pub database: String,
    /// The table in it.
    pub table: String,
}

/// A table name that is not "database.table".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("table name `{0}` is not of the form \"database.table\"")]
pub struct BadTablePath(pub String);

impl TablePath {
    /// A path from its parts.
    pub fn new(database: impl Into<String>, table: impl Into<String>) -> Self {
        Self {
            database: database.into(),
            table: table.into(),
        }
    }
}

impl FromStr for TablePath {
    type Err = BadTablePath;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('.') {
            Some((db, t)) if !db.is_empty() && !t.is_empty() && !t.contains('.') => Ok(Self::new(db, t)),
            _ => Err(BadTablePath(s.to_string())),
        }
    }
}

impl fmt::Display for TablePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.database, self.table)
    }
}

/// A table's columns and primary key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSchema {
    /// Which table.
    pub path: TablePath,
    /// Columns in table order.
    pub columns: Vec<Column>,
    /// Primary-key column names; empty for a log table.
    pub primary_key: Vec<String>,
    /// Partition-key column names, in order; empty for an unpartitioned table.
    pub partition_keys: Vec<String>,
    /// How many of the last columns were added to the table in Fluss while
    /// the sink had it open (Fluss adds columns only at the end, nullable):
    /// a row made against the columns it had before (a transform's, made
    /// before it was initialised again; a spooled one) may stop short of
    /// them, and gets NULL there.
    pub added_columns: usize,
}

impl TableSchema {
    /// True for a primary-key table.
    pub fn has_primary_key(&self) -> bool {
        !self.primary_key.is_empty()
    }

    /// True for a partitioned table.
    pub fn is_partitioned(&self) -> bool {
        !self.partition_keys.is_empty()
    }

    /// Whether the table has a column named `name`.
    pub fn has_column(&self, name: &str) -> bool {
        self.columns.iter().any(|c| c.name == name)
    }

    /// Whether a row of `cells` cells can be written: one a column, or one
    /// a column it had before the [`TableSchema::added_columns`] (those it
    /// stops short of get NULL).
    pub fn takes_cell_count(&self, cells: usize) -> bool {
        let columns = self.columns.len();
        (columns.saturating_sub(self.added_columns)..=columns).contains(&cells)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse_and_print() {
        let p: TablePath = "db.events".parse().unwrap();
        assert_eq!(p, TablePath::new("db", "events"));
        assert_eq!(p.to_string(), "db.events");
        for bad in ["events", ".t", "db.", "a.b.c"] {
            assert_eq!(bad.parse::<TablePath>().unwrap_err(), BadTablePath(bad.into()));
        }
    }
}
