//! Rows as a dry run shows them: cells as JSON a reader expects, absent
//! cells apart from NULL, each message's rows together.

use base64::Engine as _;
use fluss_row_codec::Cell;
use iggy_connector_fluss_sink::{TableSchema, TransformOutput};
use serde_json::{Value, json};

/// A cell as JSON: numbers and text as they are, bytes in base64, dates
/// and times in ISO-8601, decimals as their text; `None` for an absent cell
/// (a column a partial update leaves out, which is not NULL).
fn cell_json(cell: Cell<'_>) -> Option<Value> {
    Some(match cell {
        Cell::Absent => return None,
        Cell::Null => Value::Null,
        Cell::Boolean(b) => b.into(),
        Cell::TinyInt(n) => n.into(),
        Cell::SmallInt(n) => n.into(),
        Cell::Int(n) => n.into(),
        Cell::BigInt(n) => n.into(),
        Cell::Float(n) => n.into(),
        Cell::Double(n) => n.into(),
        Cell::String(s) | Cell::Decimal(s) => s.into(),
        Cell::Bytes(b) => base64::engine::general_purpose::STANDARD.encode(b).into(),
        Cell::Date(days) => chrono::DateTime::from_timestamp(i64::from(days) * 86_400, 0)
            .map_or(Value::from(days), |t| t.date_naive().to_string().into()),
        Cell::Time(ms) => chrono::NaiveTime::from_num_seconds_from_midnight_opt(
            (ms / 1000) as u32,
            (ms % 1000) as u32 * 1_000_000,
        )
        .map_or(Value::from(ms), |t| t.to_string().into()),
        Cell::Timestamp(us) => chrono::DateTime::from_timestamp_micros(us)
            .map_or(Value::from(us), |t| t.naive_utc().to_string().into()),
        Cell::TimestampLtz(us) => {
            chrono::DateTime::from_timestamp_micros(us).map_or(Value::from(us), |t| t.to_rfc3339().into())
        }
    })
}

/// How an absent cell shows where cells are listed by position.
const ABSENT: &str = "<absent>";

/// One row as shown: its table, kind, cells, and the columns it leaves out.
#[derive(Clone)]
pub(crate) struct ShownRow {
    /// The row's table.
    pub(crate) table: String,
    /// Its kind: append, upsert or delete.
    pub(crate) kind: &'static str,
    /// By column name when the sink table's columns fit (absent cells left
    /// out), else by position (absent cells as [`ABSENT`]).
    cells: Value,
    /// Columns (or positions) a partial update leaves out.
    absent: Vec<String>,
}

fn shown_row(
    table: String,
    kind: &'static str,
    row: &fluss_row_codec::RowView<'_>,
    schema: &TableSchema,
) -> ShownRow {
    let cells: Vec<Option<Value>> = row.cells().map(cell_json).collect();
    let by_name = cells.len() == schema.columns.len();
    let name_of = |i: usize| {
        if by_name {
            schema.columns[i].name.clone()
        } else {
            i.to_string()
        }
    };
    let absent = (0..cells.len())
        .filter(|&i| cells[i].is_none())
        .map(name_of)
        .collect();
    let cells = if by_name {
        Value::Object(
            schema
                .columns
                .iter()
                .zip(cells)
                .filter_map(|(c, v)| Some((c.name.clone(), v?)))
                .collect(),
        )
    } else {
        Value::Array(
            cells
                .into_iter()
                .map(|v| v.unwrap_or_else(|| ABSENT.into()))
                .collect(),
        )
    };
    ShownRow {
        table,
        kind,
        cells,
        absent,
    }
}

impl ShownRow {
    pub(crate) fn to_json(&self) -> Value {
        let mut value = json!({"table": self.table, "kind": self.kind, "cells": self.cells});
        if !self.absent.is_empty() {
            value["absent"] = json!(self.absent);
        }
        value
    }

    pub(crate) fn to_text(&self) -> String {
        if self.absent.is_empty() {
            self.cells.to_string()
        } else {
            format!("{} (absent: {})", self.cells, self.absent.join(", "))
        }
    }
}

/// Each message's rows.
pub(crate) fn rows_by_message(output: &TransformOutput, schema: &TableSchema) -> Vec<Vec<ShownRow>> {
    let mut by_message = vec![Vec::new(); output.outcomes.len()];
    for (entry, row) in output.rows.iter() {
        let table = output
            .rows
            .table_name(entry.table)
            .map_or_else(|| schema.path.to_string(), str::to_string);
        by_message[entry.message as usize].push(shown_row(table, entry.kind.name(), &row, schema));
    }
    by_message
}

#[cfg(test)]
mod tests {
    use super::*;
    use fluss_row_codec::RowKind;

    #[test]
    fn cells_render_as_json_a_reader_expects() {
        let shown = |cell| cell_json(cell).unwrap();
        assert_eq!(shown(Cell::Date(19_723)), json!("2024-01-01"));
        assert_eq!(shown(Cell::Date(-1)), json!("1969-12-31"), "days before 1970 too");
        assert_eq!(shown(Cell::Time(3_723_004)), json!("01:02:03.004"));
        assert_eq!(
            shown(Cell::Timestamp(1_704_067_200_000_001)),
            json!("2024-01-01 00:00:00.000001")
        );
        assert_eq!(shown(Cell::TimestampLtz(0)), json!("1970-01-01T00:00:00+00:00"));
        assert_eq!(shown(Cell::Bytes(b"hi")), json!("aGk="));
        assert_eq!(shown(Cell::Decimal("1.50")), json!("1.50"));
        assert_eq!(cell_json(Cell::Absent), None);
    }

    #[test]
    fn absent_cells_show_apart_from_null() {
        use iggy_connector_fluss_sink::{Column, DataType, TablePath};
        let schema = TableSchema {
            path: TablePath::new("d", "t"),
            columns: vec![
                Column::new("id", DataType::BigInt, false),
                Column::new("name", DataType::String, true),
                Column::new("score", DataType::Int, true),
            ],
            primary_key: vec!["id".into()],
            partition_keys: vec![],
            added_columns: 0,
        };
        let mut b = fluss_row_codec::RowsBuilder::new();
        b.begin_row(RowKind::Upsert, 0);
        b.bigint(1);
        b.null();
        b.absent();
        b.end_row();
        let bytes = b.into_bytes();
        let row = fluss_row_codec::Rows::new(&bytes).next().unwrap().unwrap();
        let shown = shown_row("d.t".into(), "upsert", &row, &schema);
        assert_eq!(
            shown.to_json(),
            json!({"table": "d.t", "kind": "upsert", "cells": {"id": 1, "name": null}, "absent": ["score"]})
        );
        assert_eq!(shown.to_text(), r#"{"id":1,"name":null} (absent: score)"#);
    }
}
