//! Without a transform: JSON object payloads mapped onto the sink's table by
//! column name, natively (the same code the `json-to-row` transform runs in
//! WebAssembly, read with sonic-rs instead of serde_json; coercion rules in
//! `fluss_row_codec::json`): to encoded rows ([`JsonMapping`]) or, on the
//! lean path, straight to Arrow columns ([`ColumnMapping`]).
#![cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]

use fluss_row_codec::json::{self, JsonMapper};
use fluss_row_codec::{DEFAULT_TABLE, RowKind, RowsBuilder};

use arrow::datatypes::SchemaRef;

use crate::batch::{Header, MessageBatch};
use crate::rows::columns::{ColumnOutput, ColumnsBuilder};
use crate::rows::metadata::is_metadata_column;
use crate::rows::{MessageOutcome, RowBatch, TransformOutput};
use crate::schema::Column;
use crate::schema::TableSchema;

/// Maps JSON payloads onto one table's columns.
#[derive(Debug, Clone)]
pub struct JsonMapping {
    mapper: JsonMapper,
    kind: RowKind,
    default_table: String,
    route_field: Option<String>,
    op_header: Option<String>,
}

impl JsonMapping {
    /// A mapping onto `table`, writing rows of `kind`.
    pub fn new(table: &TableSchema, kind: RowKind) -> Self {
        Self {
            mapper: JsonMapper::new(table.columns.clone()),
            kind,
            default_table: table.path.to_string(),
            route_field: None,
            op_header: None,
        }
    }

    /// With metadata columns on, a payload need not carry the metadata
    /// columns (see [`crate::rows::metadata`]); the writer fills them.
    pub fn with_metadata(self, include_metadata: bool) -> Self {
        if !include_metadata {
            return self;
        }
        let columns = self
            .mapper
            .columns()
            .iter()
            .map(|c| Column {
                nullable: c.nullable || is_metadata_column(&c.name),
                ..c.clone()
            })
            .collect();
        Self {
            mapper: JsonMapper::new(columns)
                .partial_update(self.mapper.is_partial_update())
                .with_parser(self.mapper.parser())
                .flat_first(self.mapper.is_flat_first())
                .unknown_fields(self.mapper.unknown_fields_mode())
                .nested_as_text(self.mapper.is_nested_as_text()),
            ..self
        }
    }

    /// Reads payloads with `parser` (the default natively is sonic-rs; the
    /// WebAssembly guests use serde_json, see [`json::JsonParser`]).
    pub fn with_parser(self, parser: json::JsonParser) -> Self {
        Self {
            mapper: self.mapper.with_parser(parser),
            ..self
        }
    }

    /// Whether flat objects are read by the quick reader before the parser
    /// (the default; see [`json::JsonMapper::flat_first`]). Off only to
    /// compare the two.
    pub fn with_flat_first(self, on: bool) -> Self {
        Self {
            mapper: self.mapper.flat_first(on),
            ..self
        }
    }

    /// With `refuse` (`evolve_schema`), a payload with a field the table
    /// lacks (its value not `null`) is refused with
    /// [`json::MapError::UnknownField`] (see [`new_field_of`]), for the
    /// sink to add the column and map it again; else such fields are
    /// ignored.
    /// Without `refuse`, such fields are skipped and noted (see
    /// [`JsonMapping::took_unknown_field`]).
    /// With `refuse`, an object or array is also written into a STRING
    /// column as its JSON text (the type such a field's column is made
    /// with), where it is refused otherwise.
    pub fn refusing_unknown_fields(self, refuse: bool) -> Self {
        let mode = if refuse {
            json::UnknownFields::Refuse
        } else {
            json::UnknownFields::Note
        };
        Self {
            mapper: self.mapper.unknown_fields(mode).nested_as_text(refuse),
            ..self
        }
    }

    /// Whether a payload named a field without a column since the last
    /// call (only noted after [`JsonMapping::refusing_unknown_fields`]).
    pub fn took_unknown_field(&self) -> bool {
        self.mapper.take_unknown_field_noted()
    }

    /// With `on` (`partial_update`), a field missing from a payload leaves
    /// its column as it is in the table instead of setting it NULL; NOT
    /// NULL columns, the keys among them, are still required.
    pub fn with_partial_update(self, on: bool) -> Self {
        Self {
            mapper: self.mapper.partial_update(on),
            ..self
        }
    }

    /// Routes each message to the table named ("database.table") by its JSON
    /// field `field`; a message without the field goes to the sink's table.
    /// Routed tables are expected to have the sink table's columns. The
    /// field is never taken for one the table lacks (see
    /// [`JsonMapping::refusing_unknown_fields`]).
    pub fn with_route_field(self, field: Option<String>) -> Self {
        let mapper = match &field {
            // Read as a hidden STRING column, unless the table has a column
            // of that name and another type (then it is known already).
            Some(name) => self.mapper.clone().reading_field(name).unwrap_or(self.mapper),
            None => self.mapper,
        };
        Self {
            mapper,
            route_field: field,
            ..self
        }
    }

    /// On a primary-key table, a message's header `header` (`upsert`,
    /// `insert`, `update` or `delete`, any case) overrides the default kind.
    pub fn with_op_header(self, header: Option<String>) -> Self {
        Self {
            op_header: header,
            ..self
        }
    }

    /// The row kind for a message with `headers`.
    fn kind(&self, headers: &[Header]) -> Result<RowKind, String> {
        let Some(name) = &self.op_header else {
            return Ok(self.kind);
        };
        let Some(header) = headers.iter().find(|h| &h.key == name) else {
            return Ok(self.kind);
        };
        let value = String::from_utf8_lossy(&header.value);
        match value.to_ascii_lowercase().as_str() {
            "upsert" | "insert" | "update" => Ok(RowKind::Upsert),
            "delete" => Ok(RowKind::Delete),
            _ => Err(format!(
                "header `{name}` = \"{value}\": expected upsert, insert, update or delete"
            )),
        }
    }

    /// The table index for a message: 0 for the sink's table, else 1-based
    /// into `tables`, which collects the routed names.
    fn route(&self, payload: &[u8], tables: &mut Vec<String>) -> Result<u16, String> {
        let Some(field) = &self.route_field else {
            return Ok(DEFAULT_TABLE);
        };
        match json::field_text(payload, field) {
            Ok(Some(name)) if name != self.default_table => {
                Ok(match tables.iter().position(|t| *t == name) {
                    Some(i) => i as u16 + 1,
                    None => {
                        tables.push(name);
                        tables.len() as u16
                    }
                })
            }
            Ok(_) => Ok(DEFAULT_TABLE),
            Err(e) => Err(format!("routing field `{field}`: {e}")),
        }
    }

    /// One row per JSON object; a payload that does not map is dead-lettered
    /// with the reason.
    pub fn map_batch(&self, batch: &MessageBatch) -> TransformOutput {
        let mut rows = RowsBuilder::with_capacity(batch.payloads.len() + batch.len() * 16);
        let mut outcomes = Vec::with_capacity(batch.len());
        let mut counts = Vec::with_capacity(batch.len());
        let mut tables: Vec<String> = Vec::new();
        for message in batch.iter() {
            let mapped = self.kind(message.headers).and_then(|kind| {
                let table = self.route(message.payload, &mut tables)?;
                self.mapper
                    .map_into(message.payload, kind, table, &mut rows)
                    .map_err(|e| e.to_string())
            });
            match mapped {
                Ok(()) => {
                    outcomes.push(MessageOutcome::Rows(1));
                    counts.push(1);
                }
                Err(reason) => {
                    outcomes.push(MessageOutcome::DeadLetter(reason));
                    counts.push(0);
                }
            }
        }
        let rows = RowBatch::from_encoded(rows.into_bytes(), tables, &counts)
            .expect("the mapper writes well-formed rows, one per mapped message");
        TransformOutput { outcomes, rows }
    }

    /// Whether fields missing from a payload are left out of its row (a
    /// partial update) rather than written as NULL.
    pub fn is_partial_update(&self) -> bool {
        self.mapper.is_partial_update()
    }

    /// Maps one message (its `headers` give the row kind with an op header)
    /// into `sink` as a row of table `table`; why not, if it does not map.
    pub(crate) fn map_message_into(
        &self,
        headers: &[Header],
        payload: &[u8],
        table: u16,
        sink: &mut impl fluss_row_codec::RowSink,
    ) -> Result<(), String> {
        let kind = self.kind(headers)?;
        self.mapper
            .map_into(payload, kind, table, sink)
            .map_err(|e| e.to_string())
    }

    /// Whether [`ColumnMapping`] can map for this mapping: every row goes
    /// to the sink's table (no routing field).
    pub fn maps_to_one_table(&self) -> bool {
        self.route_field.is_none()
    }
}

/// The field a message's outcome names when the mapping refused it for a
/// field the table lacks (see [`JsonMapping::refusing_unknown_fields`]).
pub(crate) fn new_field_of(outcome: &MessageOutcome) -> Option<&str> {
    match outcome {
        MessageOutcome::DeadLetter(reason) => json::MapError::unknown_field_of(reason),
        MessageOutcome::Rows(_) => None,
    }
}

/// The JSON mapping onto a log table's Arrow columns in one pass (see
/// [`crate::rows::columns`]): the same coercions and refusals as
/// [`JsonMapping::map_batch`], without encoded rows in between.
#[derive(Debug, Clone)]
pub struct ColumnMapping {
    mapping: JsonMapping,
    schema: TableSchema,
    arrow_schema: SchemaRef,
    include_metadata: bool,
}

impl ColumnMapping {
    /// `mapping` (which must map to one table, see
    /// [`JsonMapping::maps_to_one_table`]) onto `schema`'s columns, whose
    /// Arrow form is `arrow_schema`; with `include_metadata`, metadata
    /// columns are filled from each message.
    pub fn new(
        mapping: JsonMapping,
        schema: TableSchema,
        arrow_schema: SchemaRef,
        include_metadata: bool,
    ) -> Self {
        debug_assert!(mapping.maps_to_one_table());
        Self {
            mapping,
            schema,
            arrow_schema,
            include_metadata,
        }
    }

    /// The mapping it maps with (for encoded rows of the same messages).
    pub fn mapping(&self) -> &JsonMapping {
        &self.mapping
    }

    /// [`ColumnMapping::map_batch`] of `batch`'s messages `size` at a time,
    /// each chunk mapped when it is asked for.
    pub fn map_chunks<'a>(
        &'a self,
        batch: &'a MessageBatch,
        size: usize,
    ) -> impl Iterator<Item = ColumnOutput> + Send + 'a {
        let (count, size) = (batch.len(), size.max(1));
        (0..count).step_by(size).map(move |start| {
            if count <= size {
                self.map_batch(batch)
            } else {
                self.map_batch(&batch.slice(start..(start + size).min(count)))
            }
        })
    }

    /// One row per JSON object, as Arrow columns; a payload that does not
    /// map is dead-lettered with the reason.
    pub fn map_batch(&self, batch: &MessageBatch) -> ColumnOutput {
        let mut columns = match ColumnsBuilder::new(
            batch,
            batch.len(),
            &self.schema,
            self.arrow_schema.clone(),
            self.include_metadata,
        ) {
            Ok(columns) => columns,
            Err(reason) => return dead_letter_all(batch.len(), &reason),
        };
        let mut outcomes = Vec::with_capacity(batch.len());
        for (i, message) in batch.iter().enumerate() {
            columns.for_message(i as u32);
            let mapped =
                self.mapping
                    .map_message_into(message.headers, message.payload, DEFAULT_TABLE, &mut columns);
            outcomes.push(match mapped.map(|()| columns.take_refusal()) {
                Ok(None) => MessageOutcome::Rows(1),
                Ok(Some(reason)) => {
                    MessageOutcome::DeadLetter(format!("table {}: {reason}", self.schema.path))
                }
                Err(reason) => MessageOutcome::DeadLetter(reason),
            });
        }
        match columns.finish() {
            Ok(rows) => ColumnOutput {
                outcomes,
                rows,
                ..ColumnOutput::default()
            },
            Err(reason) => dead_letter_all(batch.len(), &format!("cannot build the Arrow batch: {reason}")),
        }
    }
}

fn dead_letter_all(count: usize, reason: &str) -> ColumnOutput {
    ColumnOutput {
        outcomes: vec![MessageOutcome::DeadLetter(reason.to_string()); count],
        ..ColumnOutput::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::Source;
    use crate::schema::{DataType, TablePath};

    /// Log table `db.t` with one column, `id BIGINT NOT NULL`.
    fn id_only_log_table() -> TableSchema {
        TableSchema {
            path: TablePath::new("db", "t"),
            columns: vec![Column::new("id", DataType::BigInt, false)],
            primary_key: vec![],
            partition_keys: vec![],
            added_columns: 0,
        }
    }

    #[test]
    fn routes_by_a_payload_field() {
        let table = id_only_log_table();
        let mut batch = MessageBatch::new(Source::default());
        for payload in [
            r#"{"id":1,"to":"db.a"}"#,
            r#"{"id":2}"#,
            r#"{"id":3,"to":"db.a"}"#,
            r#"{"id":4,"to":{}}"#,
        ] {
            batch.push(0, 0, 0, payload.as_bytes(), []).unwrap();
        }
        let out = JsonMapping::new(&table, RowKind::Append)
            .with_route_field(Some("to".into()))
            .map_batch(&batch);
        let routed: Vec<Option<&str>> = out
            .rows
            .iter()
            .map(|(e, _)| out.rows.table_name(e.table))
            .collect();
        assert_eq!(routed, vec![Some("db.a"), None, Some("db.a")]);
        assert!(
            matches!(&out.outcomes[3], MessageOutcome::DeadLetter(r) if r.starts_with("routing field `to`"))
        );
    }

    #[test]
    fn the_routing_field_is_never_a_field_the_table_lacks() {
        let table = id_only_log_table();
        let mut batch = MessageBatch::new(Source::default());
        for payload in [r#"{"id":1,"to":"db.a"}"#, r#"{"id":2,"to":"db.a","new":1}"#] {
            batch.push(0, 0, 0, payload.as_bytes(), []).unwrap();
        }
        let out = JsonMapping::new(&table, RowKind::Append)
            .refusing_unknown_fields(true)
            .with_route_field(Some("to".into()))
            .map_batch(&batch);
        assert_eq!(out.outcomes[0], MessageOutcome::Rows(1), "{:?}", out.outcomes);
        assert_eq!(new_field_of(&out.outcomes[1]), Some("new"), "{:?}", out.outcomes);
        let cells: Vec<u16> = out.rows.iter().map(|(_, row)| row.cell_count).collect();
        assert_eq!(cells, [1], "the routing field is read, not written");
    }

    #[test]
    fn an_op_header_sets_the_row_kind() {
        let table = TableSchema {
            path: TablePath::new("db", "t"),
            columns: vec![Column::new("id", DataType::BigInt, false)],
            primary_key: vec!["id".into()],
            partition_keys: vec![],
            added_columns: 0,
        };
        let op = |v: &str| {
            vec![Header {
                key: "op".into(),
                kind: crate::batch::HeaderKind::String,
                value: v.as_bytes().to_vec(),
            }]
        };
        let mut batch = MessageBatch::new(Source::default());
        for headers in [vec![], op("DELETE"), op("insert"), op("drop")] {
            batch.push(0, 0, 0, br#"{"id":1}"#, headers).unwrap();
        }
        let out = JsonMapping::new(&table, RowKind::Upsert)
            .with_op_header(Some("op".into()))
            .map_batch(&batch);
        let kinds: Vec<RowKind> = out.rows.iter().map(|(e, _)| e.kind).collect();
        assert_eq!(kinds, vec![RowKind::Upsert, RowKind::Delete, RowKind::Upsert]);
        assert_eq!(
            out.outcomes[3],
            MessageOutcome::DeadLetter(
                "header `op` = \"drop\": expected upsert, insert, update or delete".into()
            )
        );
    }

    #[test]
    fn maps_each_message_or_dead_letters_it() {
        let table = TableSchema {
            path: TablePath::new("db", "t"),
            columns: vec![
                Column::new("id", DataType::BigInt, false),
                Column::new("s", DataType::String, true),
            ],
            primary_key: vec![],
            partition_keys: vec![],
            added_columns: 0,
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
