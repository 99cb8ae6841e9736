//! Without a transform: JSON object payloads mapped onto the sink's table by
//! column name, natively (the same code the `json-to-row` transform runs in
//! WebAssembly; coercion rules in `fluss_row_codec::json`).

use fluss_row_codec::json::JsonMapper;
use fluss_row_codec::{DEFAULT_TABLE, RowKind, RowsBuilder};

use crate::batch::MessageBatch;
use crate::rows::{MessageOutcome, RowBatch, TransformOutput};
use crate::schema::TableSchema;

/// Maps JSON payloads onto one table's columns.
#[derive(Debug, Clone)]
pub struct JsonMapping {
    mapper: JsonMapper,
    kind: RowKind,
}

impl JsonMapping {
    /// A mapping onto `table`, writing rows of `kind`.
    pub fn new(table: &TableSchema, kind: RowKind) -> Self {
        Self {
            mapper: JsonMapper::new(table.columns.clone()),
            kind,
        }
    }

    /// One row per JSON object; a payload that does not map is dead-lettered
    /// with the reason.
    pub fn map_batch(&self, batch: &MessageBatch) -> TransformOutput {
        let mut rows = RowsBuilder::with_capacity(batch.payloads.len() + batch.len() * 16);
        let mut outcomes = Vec::with_capacity(batch.len());
        let mut counts = Vec::with_capacity(batch.len());
        for message in batch.iter() {
            match self
                .mapper
                .map_into(message.payload, self.kind, DEFAULT_TABLE, &mut rows)
            {
                Ok(()) => {
                    outcomes.push(MessageOutcome::Rows(1));
                    counts.push(1);
                }
                Err(e) => {
                    outcomes.push(MessageOutcome::DeadLetter(e.to_string()));
                    counts.push(0);
                }
            }
        }
        let rows = RowBatch::from_encoded(rows.into_bytes(), Vec::new(), &counts)
            .expect("the mapper writes well-formed rows, one per mapped message");
        TransformOutput { outcomes, rows }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::Source;
    use crate::schema::{Column, DataType, TablePath};

    #[test]
    fn maps_each_message_or_dead_letters_it() {
        let table = TableSchema {
            path: TablePath::new("db", "t"),
            columns: vec![
                Column::new("id", DataType::BigInt, false),
                Column::new("s", DataType::String, true),
            ],
            primary_key: vec![],
        };
        let mut batch = MessageBatch::new(Source::default());
        for payload in [r#"{"id":1,"s":"x"}"#, r#"{"s":"y"}"#, r#"{"id":3}"#] {
            batch.push(0, 0, 0, payload.as_bytes(), []).unwrap();
        }
        let out = JsonMapping::new(&table, RowKind::Append).map_batch(&batch);
        assert_eq!(out.counts(), (2, 0, 1));
        let owners: Vec<u32> = out.rows.iter().map(|(e, _)| e.message).collect();
        assert_eq!(owners, vec![0, 2]);
        assert_eq!(
            out.outcomes[1],
            MessageOutcome::DeadLetter("column `id` is NOT NULL but the payload has no value for it".into())
        );
    }
}
