//! Optional metadata columns (`include_metadata`): a table column with one
//! of these names is filled from the Iggy message, whatever the row holds.
//!
//! | column | type | value |
//! |---|---|---|
//! | `iggy_stream` | STRING | stream name |
//! | `iggy_topic` | STRING | topic name |
//! | `iggy_partition` | INT | partition id |
//! | `iggy_offset` | BIGINT | offset in the partition |
//! | `iggy_timestamp` | TIMESTAMP_LTZ(6) | the server's timestamp |
//! | `iggy_message_id` | STRING | the u128 message id in decimal |

use fluss_row_codec::{Cell, RowsBuilder};

use crate::batch::MessageBatch;
use crate::rows::{RowBatch, TransformOutput};
use crate::schema::TableSchema;

/// The metadata column names, in the order of the table above.
pub(crate) const METADATA_COLUMNS: [&str; 6] = [
    "iggy_stream",
    "iggy_topic",
    "iggy_partition",
    "iggy_offset",
    "iggy_timestamp",
    "iggy_message_id",
];

/// Whether `name` is a metadata column.
pub(crate) fn is_metadata_column(name: &str) -> bool {
    METADATA_COLUMNS.contains(&name)
}

/// One of the metadata columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MetadataColumn {
    /// `iggy_stream`.
    Stream,
    /// `iggy_topic`.
    Topic,
    /// `iggy_partition`.
    Partition,
    /// `iggy_offset`.
    Offset,
    /// `iggy_timestamp`.
    Timestamp,
    /// `iggy_message_id`.
    MessageId,
}

impl MetadataColumn {
    /// The metadata column called `name`, if it is one.
    pub(crate) fn of(name: &str) -> Option<Self> {
        Some(match name {
            "iggy_stream" => Self::Stream,
            "iggy_topic" => Self::Topic,
            "iggy_partition" => Self::Partition,
            "iggy_offset" => Self::Offset,
            "iggy_timestamp" => Self::Timestamp,
            "iggy_message_id" => Self::MessageId,
            _ => return None,
        })
    }

    /// The column's type, as the table above gives it.
    pub(crate) fn data_type(self) -> crate::schema::DataType {
        use crate::schema::DataType;
        match self {
            Self::Stream | Self::Topic | Self::MessageId => DataType::String,
            Self::Partition => DataType::Int,
            Self::Offset => DataType::BigInt,
            Self::Timestamp => DataType::TimestampLtz(6),
        }
    }

    /// Per column of `schema`, the metadata it is filled with: empty (none
    /// are) without `include_metadata`.
    pub(crate) fn columns_of(schema: &TableSchema, include_metadata: bool) -> Vec<Option<Self>> {
        if !include_metadata {
            return Vec::new();
        }
        schema.columns.iter().map(|c| Self::of(&c.name)).collect()
    }

    /// Hands `put` this column's cell for message `index` of `batch`.
    pub(crate) fn with_cell<R>(
        self,
        batch: &MessageBatch,
        index: usize,
        put: impl FnOnce(Cell<'_>) -> R,
    ) -> R {
        let message = || batch.get(index);
        match self {
            Self::Stream => put(Cell::String(&batch.source.stream)),
            Self::Topic => put(Cell::String(&batch.source.topic)),
            Self::Partition => put(Cell::Int(batch.source.partition as i32)),
            Self::Offset => put(Cell::BigInt(message().offset as i64)),
            Self::Timestamp => put(Cell::TimestampLtz(message().timestamp as i64)),
            Self::MessageId => put(Cell::String(&message().id.to_string())),
        }
    }
}

/// Rewrites every row whose table has metadata columns, putting the
/// message's metadata in them. `schema_of` gives a row's table (by index).
pub(crate) fn fill<'s>(
    output: &mut TransformOutput,
    batch: &MessageBatch,
    schema_of: impl Fn(u16) -> Option<&'s TableSchema>,
) {
    let has_any =
        |t: u16| schema_of(t).is_some_and(|s| s.columns.iter().any(|c| is_metadata_column(&c.name)));
    if !output.rows.iter().any(|(e, _)| has_any(e.table)) {
        return;
    }
    let mut out = RowsBuilder::with_capacity(output.rows.encoded_bytes() + output.rows.len() * 64);
    let mut counts = vec![0u32; output.outcomes.len()];
    for (entry, row) in output.rows.iter() {
        counts[entry.message as usize] += 1;
        out.begin_row(entry.kind, entry.table);
        let schema = schema_of(entry.table).filter(|s| s.columns.len() == row.cell_count as usize);
        for (i, cell) in row.cells().enumerate() {
            match schema.and_then(|s| MetadataColumn::of(&s.columns[i].name)) {
                Some(column) => column.with_cell(batch, entry.message as usize, |c| out.cell(c)),
                None => out.cell(cell),
            }
        }
        out.end_row();
    }
    output.rows = RowBatch::from_encoded(out.into_bytes(), output.rows.tables().to_vec(), &counts)
        .expect("re-encoded rows keep their count per message");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::Source;
    use crate::rows::json::JsonMapping;
    use crate::schema::{Column, DataType, TablePath};
    use fluss_row_codec::RowKind;

    #[test]
    fn metadata_columns_take_the_message_metadata() {
        let table = TableSchema {
            path: TablePath::new("db", "t"),
            columns: vec![
                Column::new("v", DataType::Int, true),
                Column::new("iggy_offset", DataType::BigInt, false),
                Column::new("iggy_message_id", DataType::String, true),
                Column::new("iggy_topic", DataType::String, true),
            ],
            primary_key: vec![],
            partition_keys: vec![],
            added_columns: 0,
        };
        let mut batch = MessageBatch::new(Source {
            stream: "s".into(),
            topic: "t".into(),
            partition: 2,
        });
        batch.push(41, 7, 0, br#"{"v":1,"iggy_offset":999}"#, []).unwrap();
        batch.push(42, 8, 0, br#"{"v":2}"#, []).unwrap();
        let mut out = JsonMapping::new(&table, RowKind::Append)
            .with_metadata(true)
            .map_batch(&batch);
        assert_eq!(out.counts(), (2, 0, 0), "metadata columns need no payload field");
        fill(&mut out, &batch, |_| Some(&table));
        let cells: Vec<Vec<String>> = out
            .rows
            .iter()
            .map(|(_, r)| r.cells().map(|c| format!("{c:?}")).collect())
            .collect();
        assert_eq!(
            cells[0],
            vec!["Int(1)", "BigInt(41)", "String(\"7\")", "String(\"t\")"]
        );
        assert_eq!(
            cells[1],
            vec!["Int(2)", "BigInt(42)", "String(\"8\")", "String(\"t\")"]
        );
    }
}
