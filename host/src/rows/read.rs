//! A transform's rows read from the buffer it returned: every row checked
//! to decode, given to its message, and, for a reader that wants them (a
//! [`RowVisitor`], such as the lean path's Arrow columns), each cell handed
//! on as it is decoded, so that rows used at once are decoded once.

use fluss_row_codec::{RowCells, RowHead, Rows};

use super::{RowBatch, RowEntry};

/// Takes each row of a buffer as it is read (see [`RowBatch::read`]).
pub(crate) trait RowVisitor {
    /// The tables the output names besides the sink's own (index `i + 1`
    /// is `names[i]`), before any row.
    fn tables(&mut self, names: &[String]);

    /// Row `head` of message `message`; `cells` yields its cells as they
    /// decode, and may be left unfinished. A buffer that turns out not to
    /// decode fails the read, and the visitor's rows are to be thrown away.
    fn row(&mut self, message: u32, head: &RowHead, cells: &mut RowCells<'_, '_>);
}

impl RowBatch {
    /// Reads `bytes` (rows in the compact encoding) and gives each row to its
    /// message: message `i` owns the next `counts[i]` rows. Fails when the
    /// buffer does not decode, names a table index out of range, or holds
    /// more or fewer rows than the counts add up to.
    pub fn from_encoded(bytes: Vec<u8>, tables: Vec<String>, counts: &[u32]) -> Result<Self, String> {
        Self::read(bytes, tables, counts, None)
    }

    /// [`RowBatch::from_encoded`], handing each row that belongs to a
    /// message and a table to `visitor` as it is read.
    pub(crate) fn read(
        bytes: Vec<u8>,
        tables: Vec<String>,
        counts: &[u32],
        mut visitor: Option<&mut dyn RowVisitor>,
    ) -> Result<Self, String> {
        let expected: u64 = counts.iter().map(|&c| c as u64).sum();
        let mut entries = Vec::with_capacity(expected as usize);
        let mut owners = counts
            .iter()
            .enumerate()
            .flat_map(|(i, &c)| std::iter::repeat_n(i as u32, c as usize));
        if let Some(visitor) = visitor.as_deref_mut() {
            visitor.tables(&tables);
        }
        let mut rows = Rows::new(&bytes);
        while let Some(head) = rows.next_head() {
            let head = head.map_err(|e| e.to_string())?;
            let owner = owners.next();
            let known_table = head.table as usize <= tables.len();
            let mut cells = rows.cells(&head);
            if let (Some(visitor), Some(message), true) = (visitor.as_deref_mut(), owner, known_table) {
                visitor.row(message, &head, &mut cells);
            }
            // A row that does not decode is named before one that does not
            // belong, as when rows were decoded whole first.
            cells.finish().map_err(|e| e.to_string())?;
            if !known_table {
                return Err(format!(
                    "row at byte {} names table index {} but the output lists {} tables",
                    head.offset,
                    head.table,
                    tables.len()
                ));
            }
            let message = owner.ok_or_else(|| {
                format!("the outcomes account for {expected} rows but the row buffer holds more")
            })?;
            entries.push(RowEntry {
                message,
                kind: head.kind,
                table: head.table,
                cell_count: head.cell_count,
                start: head.offset as u32,
                end: rows.position() as u32,
            });
        }
        if (entries.len() as u64) < expected {
            return Err(format!(
                "the outcomes account for {expected} rows but the row buffer holds {}",
                entries.len()
            ));
        }
        Ok(Self {
            bytes,
            tables,
            entries,
        })
    }
}
