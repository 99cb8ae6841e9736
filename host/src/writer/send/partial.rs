//! Partial updates on primary-key tables: an upsert whose row leaves
//! columns out (absent cells) updates only the columns it gives.
//!
//! fluss-rs writes a partial update through an upsert writer made for its
//! set of target columns, and refuses to put writes of two different sets
//! in one batch or one request (the send fails). So the writer cuts a
//! table's rows into runs of one column set, in order, and a table's
//! [`ColumnSetGate`] lets writes of only one set be in flight at a time
//! (several groups or calls writing the same set share it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fluss::client::{TableUpsert, UpsertWriter};
use fluss_row_codec::{Cell, RowKind, RowView};

use crate::writer::PendingRow;

/// The columns a write gives: `None` for all of them (a full upsert, or a
/// delete), else the indexes of the present ones, in column order.
pub(in crate::writer) type ColumnSet = Option<Arc<[usize]>>;

/// The most partial writers one table keeps (one per column set seen).
const MAX_COLUMN_SETS: usize = 64;

/// The upsert writers of a primary-key table: the full one and one per
/// column set of the partial updates seen.
pub(in crate::writer) struct KeyedSink {
    full: Arc<UpsertWriter>,
    upsert: TableUpsert,
    partial: Mutex<HashMap<Arc<[usize]>, Arc<UpsertWriter>>>,
    /// Lets one column set at a time be in flight.
    pub gate: ColumnSetGate,
}

impl KeyedSink {
    /// The sink of a table opened for upserts.
    pub(in crate::writer) fn new(upsert: TableUpsert) -> fluss::error::Result<Self> {
        Ok(Self {
            full: Arc::new(upsert.create_writer()?),
            upsert,
            partial: Mutex::new(HashMap::new()),
            gate: ColumnSetGate::default(),
        })
    }

    /// The writer for rows that give `columns`.
    pub(in crate::writer) fn writer(&self, columns: &ColumnSet) -> Result<Arc<UpsertWriter>, String> {
        let Some(columns) = columns else {
            return Ok(self.full.clone());
        };
        let mut partial = self.partial.lock().expect("partial writers poisoned");
        if let Some(w) = partial.get(columns) {
            return Ok(w.clone());
        }
        let writer = self
            .upsert
            .partial_update(Some(columns.to_vec()))
            .and_then(|u| u.create_writer())
            .map(Arc::new)
            .map_err(|e| format!("cannot write a partial update of columns {columns:?}: {e}"))?;
        if partial.len() >= MAX_COLUMN_SETS {
            partial.clear();
        }
        partial.insert(columns.clone(), writer.clone());
        Ok(writer)
    }

    /// The full writer (its flush flushes every writer of the connection).
    pub(in crate::writer) fn full(&self) -> &UpsertWriter {
        &self.full
    }
}

/// The columns `row` gives: `None` when it gives all, or is a delete.
pub(in crate::writer) fn column_set(kind: RowKind, row: &RowView<'_>) -> ColumnSet {
    if kind == RowKind::Delete || !row.cells().any(|c| matches!(c, Cell::Absent)) {
        return None;
    }
    let present: Vec<usize> = row
        .cells()
        .enumerate()
        .filter(|(_, c)| !matches!(c, Cell::Absent))
        .map(|(i, _)| i)
        .collect();
    Some(present.into())
}

/// `rows` cut into runs of one column set, in order.
pub(in crate::writer) fn runs<'r, 'a>(rows: &'r [PendingRow<'a>]) -> Vec<(ColumnSet, &'r [PendingRow<'a>])> {
    let mut out: Vec<(ColumnSet, &'r [PendingRow<'a>])> = Vec::new();
    let mut start = 0;
    let mut current: ColumnSet = None;
    for (i, (_, kind, row)) in rows.iter().enumerate() {
        let set = column_set(*kind, row);
        if i > start && set != current {
            out.push((current.clone(), &rows[start..i]));
            start = i;
        }
        current = set;
    }
    if start < rows.len() {
        out.push((current, &rows[start..]));
    }
    out
}

/// Lets writes of one column set at a time be in flight on a table.
#[derive(Default)]
pub(in crate::writer) struct ColumnSetGate {
    state: Mutex<(ColumnSet, usize)>,
    opened: tokio::sync::Notify,
}

/// Held while writes of one column set are in flight.
pub(in crate::writer) struct GatePass<'g> {
    gate: &'g ColumnSetGate,
}

impl ColumnSetGate {
    /// Waits until writes of `set` may go (none of another set in flight).
    pub(in crate::writer) async fn enter(&self, set: &ColumnSet) -> GatePass<'_> {
        loop {
            let opened = self.opened.notified();
            tokio::pin!(opened);
            opened.as_mut().enable();
            {
                let mut state = self.state.lock().expect("gate poisoned");
                if state.1 == 0 || state.0 == *set {
                    state.0 = set.clone();
                    state.1 += 1;
                    return GatePass { gate: self };
                }
            }
            opened.await;
        }
    }
}

impl Drop for GatePass<'_> {
    fn drop(&mut self) {
        let mut state = self.gate.state.lock().expect("gate poisoned");
        state.1 -= 1;
        if state.1 == 0 {
            self.gate.opened.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fluss_row_codec::{Rows, RowsBuilder};
    use std::time::Duration;

    fn rows(spec: &[(RowKind, [bool; 3])]) -> Vec<u8> {
        let mut b = RowsBuilder::new();
        for (kind, cells) in spec {
            b.begin_row(*kind, 0);
            for present in cells {
                if *present { b.int(1) } else { b.absent() }
            }
            b.end_row();
        }
        b.into_bytes()
    }

    #[test]
    fn rows_are_cut_into_runs_of_one_column_set_in_order() {
        use RowKind::{Delete as D, Upsert as U};
        let bytes = rows(&[
            (U, [true, true, true]),
            (U, [true, false, true]),
            (U, [true, false, true]),
            (D, [true, false, false]),
            (U, [true, true, true]),
            (U, [true, true, false]),
        ]);
        let pending: Vec<PendingRow<'_>> = Rows::new(&bytes)
            .enumerate()
            .map(|(i, r)| {
                let r = r.unwrap();
                (i as u32, r.kind, r)
            })
            .collect();
        let cut: Vec<(ColumnSet, Vec<u32>)> = runs(&pending)
            .into_iter()
            .map(|(set, rows)| (set, rows.iter().map(|r| r.0).collect()))
            .collect();
        let set = |s: &[usize]| Some(Arc::<[usize]>::from(s));
        assert_eq!(
            cut,
            vec![
                (None, vec![0]),
                (set(&[0, 2]), vec![1, 2]),
                (None, vec![3, 4]),
                (set(&[0, 1]), vec![5]),
            ]
        );
    }

    // Paused time: a sleep lets every other task run until it waits, and
    // the clock moves only then, so what is still waiting is waiting.
    #[tokio::test(start_paused = true)]
    async fn the_gate_holds_another_set_until_the_first_is_done() {
        let gate = Arc::new(ColumnSetGate::default());
        let a: ColumnSet = Some(Arc::from(&[0usize, 1][..]));
        let first = gate.enter(&None).await;
        let same = gate.enter(&None).await;
        let waiting = {
            let gate = gate.clone();
            tokio::spawn(async move {
                let _pass = gate.enter(&a).await;
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "another set waits while one is in flight");
        drop(first);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !waiting.is_finished(),
            "still one write of the first set in flight"
        );
        drop(same);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("the other set goes once the first is done")
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_set_held_past_the_deadline_fails_the_wait_at_the_deadline() {
        let gate = ColumnSetGate::default();
        let _held = gate.enter(&None).await;
        let other: ColumnSet = Some(Arc::from(&[0usize][..]));
        let deadline = crate::deadline::Deadline::after(Duration::from_millis(100));
        let started = tokio::time::Instant::now();
        assert!(deadline.run(gate.enter(&other)).await.is_err(), "it never got in");
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(100),
            "cut off at the deadline"
        );
    }
}
