//! Which tables a batch writes, so that one table's trouble does not stall
//! the others: while the spool holds batches, a new batch whose rows all
//! go to tables none of the queued batches writes is written at once
//! instead of queuing behind them. Every table's batches, and so every
//! key's, keep their order: a batch that shares a table with a queued one
//! queues behind it. A batch whose tables are not known (the sink's table
//! when the stage does not route, a queued record left by an earlier
//! process) is taken to write them all.

use std::collections::{BTreeSet, VecDeque};

use super::Entry;
use crate::pipeline::{Held, HeldRows, Pipeline};

/// Tables by name, the sink's own as its path.
pub(in crate::pipeline) type Tables = BTreeSet<String>;

impl Pipeline {
    /// The tables `held`'s rows go to: from its rows when they are made
    /// (with `wait`, waiting for a transform's chunks to be made), or the
    /// sink's table when the stage routes no row elsewhere; `None` when
    /// that is not known.
    pub(in crate::pipeline) async fn tables_of(&self, held: &Held, wait: bool) -> Option<Tables> {
        let sink = self.table.to_string();
        match &held.rows {
            Some((HeldRows::Made(output), _)) => Some(output.table_names(&sink)),
            Some((HeldRows::Making(making), _)) => match making.table_names_if_made(&sink) {
                Some(names) => Some(names),
                None if wait => making.whole().await.ok().map(|o| o.table_names(&sink)),
                None => None,
            },
            None => self.stage().maps_to_one_table().then(|| Tables::from([sink])),
        }
    }
}

/// Whether every batch in `queue` is known to write none of `tables`.
pub(super) fn apart_from(queue: &VecDeque<Entry>, tables: Option<&Tables>) -> bool {
    let Some(tables) = tables else {
        return false;
    };
    queue.iter().all(|entry| {
        entry
            .tables
            .as_ref()
            .is_some_and(|queued| queued.is_disjoint(tables))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(tables: Option<&[&str]>) -> Entry {
        Entry {
            file: None,
            attempt: None,
            held: None,
            oldest: std::time::SystemTime::now(),
            tables: tables.map(|t| t.iter().map(|s| s.to_string()).collect()),
        }
    }

    fn tables(names: &[&str]) -> Tables {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_batch_for_other_tables_is_apart_from_the_queue() {
        let queue = VecDeque::from([entry(Some(&["db.a"])), entry(Some(&["db.a", "db.b"]))]);
        assert!(apart_from(&queue, Some(&tables(&["db.c"]))));
        assert!(
            !apart_from(&queue, Some(&tables(&["db.b"]))),
            "db.b is queued behind db.a"
        );
        assert!(!apart_from(&queue, Some(&tables(&["db.c", "db.a"]))));
    }

    #[test]
    fn tables_not_known_on_either_side_queue() {
        let queue = VecDeque::from([entry(Some(&["db.a"])), entry(None)]);
        assert!(
            !apart_from(&queue, Some(&tables(&["db.c"]))),
            "a queued batch of unknown tables"
        );
        let queue = VecDeque::from([entry(Some(&["db.a"]))]);
        assert!(!apart_from(&queue, None), "a new batch of unknown tables");
        assert!(apart_from(&VecDeque::new(), Some(&tables(&["db.a"]))));
    }
}
