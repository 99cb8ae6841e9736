//! Write a Fluss sink transform in Rust as one function per message.
//!
//! ```ignore
//! use fluss_transform_sdk::{export_transform, InitContext, Message, Output, RowKind, Transform};
//!
//! struct Uppercase;
//!
//! impl Transform for Uppercase {
//!     fn init(_ctx: &InitContext) -> Result<Self, String> {
//!         Ok(Uppercase)
//!     }
//!     fn process(&mut self, msg: &Message<'_>, out: &mut Output<'_>) -> Result<(), String> {
//!         let text = std::str::from_utf8(msg.payload).map_err(|e| e.to_string())?;
//!         out.row(RowKind::Append)
//!             .set("id", msg.offset as i64)
//!             .set("text", text.to_uppercase())
//!             .finish()
//!     }
//! }
//!
//! export_transform!(Uppercase);
//! ```
//!
//! `process` returning `Err(reason)` dead-letters the message with that reason
//! (and drops any rows it added); returning `Ok(())` with no rows filters it out.

#![allow(missing_docs)] // the generated bindings carry the WIT's own docs

use std::cell::RefCell;
use std::collections::BTreeMap;

use fluss_row_codec::DEFAULT_TABLE;
use fluss_row_codec::json::JsonMapper;

mod routed;
pub use fluss_row_codec::json::{JsonField, field_text as json_field_text, same_bytes};
pub use fluss_row_codec::{Column, DataType, RowKind, RowsBuilder};

/// Bindings generated from the project's WIT world.
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "transform",
        pub_export_macro: true,
        export_macro_name: "export_bindings",
        default_bindings_module: "fluss_transform_sdk::bindings",
    });
}

use bindings::iggy::fluss_sink::host::{self as host, Level};
use bindings::iggy::fluss_sink::types::{Batch, BatchOutput, Header, Outcome, TableSchema};

/// Writes a line to the sink's log.
pub fn log(level: Level, message: &str) {
    host::log(level, message);
}

pub use bindings::iggy::fluss_sink::host::Level as LogLevel;
pub use bindings::iggy::fluss_sink::types::HeaderKind;

/// Sends a panic's message to the sink's log before the instance traps, so
/// the host can name it in the dead letter. `export_transform!` does this.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        host::log(Level::Error, &format!("transform panicked: {info}"));
    }));
}

/// A target table as the transform sees it.
#[derive(Debug, Clone)]
pub struct Table {
    /// "database.table"
    pub path: String,
    /// Columns in row order.
    pub columns: Vec<Column>,
    /// Primary-key column names; empty for a log table.
    pub primary_key: Vec<String>,
}

/// What `init` is given: the transform's config and the known tables.
#[derive(Debug, Clone)]
pub struct InitContext {
    /// The `[plugin_config.transform.config]` table, as text.
    pub config: BTreeMap<String, String>,
    /// The sink's own table first, then any others it knows.
    pub tables: Vec<Table>,
}

impl InitContext {
    /// A config value, or a clear error naming the missing key.
    pub fn require(&self, key: &str) -> Result<&str, String> {
        self.config
            .get(key)
            .map(String::as_str)
            .ok_or_else(|| format!("transform config needs `{key}`"))
    }

    /// A config value or a default.
    pub fn get_or<'a>(&'a self, key: &str, default: &'a str) -> &'a str {
        self.config.get(key).map(String::as_str).unwrap_or(default)
    }

    /// A `true`/`false` config value, `default` when absent; anything else
    /// is an error naming the key and the value.
    pub fn flag(&self, key: &str, default: bool) -> Result<bool, String> {
        match self.config.get(key).map(String::as_str) {
            None => Ok(default),
            Some("true") => Ok(true),
            Some("false") => Ok(false),
            Some(other) => Err(format!("config `{key}` must be true or false, not `{other}`")),
        }
    }

    /// The sink's configured table.
    pub fn default_table(&self) -> &Table {
        &self.tables[0]
    }
}

/// One input message.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    /// Stream name.
    pub stream: &'a str,
    /// Topic name.
    pub topic: &'a str,
    /// Partition id.
    pub partition: u32,
    /// Offset in the partition.
    pub offset: u64,
    /// Iggy message id.
    pub id: u128,
    /// Microseconds since the epoch.
    pub timestamp: u64,
    /// The payload bytes.
    pub payload: &'a [u8],
    /// The message's headers.
    pub headers: &'a [Header],
}

impl<'a> Message<'a> {
    /// The header named `key`, if any.
    pub fn header(&self, key: &str) -> Option<&'a Header> {
        self.headers.iter().find(|h| h.key == key)
    }

    /// The header named `key` as text, if it is a string header.
    pub fn header_str(&self, key: &str) -> Option<&'a str> {
        self.header(key)
            .filter(|h| h.kind == HeaderKind::String)
            .and_then(|h| std::str::from_utf8(&h.value).ok())
    }
}

/// A cell value for [`RowBuilder::set`].
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// NULL
    Null,
    /// BOOLEAN
    Boolean(bool),
    /// INT
    Int(i32),
    /// BIGINT
    BigInt(i64),
    /// DOUBLE
    Double(f64),
    /// STRING
    String(String),
    /// BYTES
    Bytes(Vec<u8>),
    /// DECIMAL as text
    Decimal(String),
    /// DATE as days since the epoch
    Date(i32),
    /// TIMESTAMP as microseconds since the epoch
    Timestamp(i64),
    /// TIMESTAMP_LTZ as microseconds since the epoch UTC
    TimestampLtz(i64),
    /// Left out of a partial update: the column keeps its value (not NULL).
    Absent,
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Boolean(v)
    }
}
impl From<i32> for Value {
    fn from(v: i32) -> Self {
        Value::Int(v)
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::BigInt(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Double(v)
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::String(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::String(v.to_string())
    }
}
impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Value::Bytes(v)
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

/// The rows a batch produces, and the tables they name.
pub struct Output<'a> {
    rows: &'a mut RowsBuilder,
    state: &'a mut SdkState,
}

struct SdkState {
    tables: Vec<Table>,
    /// Table names the output refers to (index + 1 in rows).
    named: Vec<String>,
    /// JSON mappers per table index (0 = default), whole rows then partial.
    mappers: [Vec<Option<JsonMapper>>; 2],
    /// The field rows are routed by, and the sink table's mapper that
    /// reads it besides the row (`None`: a column of another type has the
    /// field's name): see `routed`.
    routed: Option<(String, Option<JsonMapper>)>,
}

impl SdkState {
    fn table_index(&mut self, path: Option<&str>) -> u16 {
        table_index(&self.tables, &mut self.named, path)
    }
    /// Columns of the table at `index`: its known schema, or the default
    /// table's for a table the host did not describe (the host checks).
    fn columns(&self, index: u16) -> &[Column] {
        columns_of(&self.tables, &self.named, index)
    }

    /// The mapper of the table at `index`, made (with a copy of its
    /// columns) the first time a row is mapped onto it.
    fn mapper(&mut self, index: u16, partial: bool) -> &JsonMapper {
        let i = index as usize;
        let made = self.mappers[usize::from(partial)]
            .get(i)
            .is_some_and(Option::is_some);
        if !made {
            let mapper = JsonMapper::new(self.columns(index).to_vec()).partial_update(partial);
            let mappers = &mut self.mappers[usize::from(partial)];
            if mappers.len() <= i {
                mappers.resize_with(i + 1, || None);
            }
            mappers[i] = Some(mapper);
        }
        self.mappers[usize::from(partial)][i]
            .as_ref()
            .expect("made above")
    }
}

/// Columns of the table at `index` among `tables` and the names met,
/// `named`: its known schema, or the default table's for a table the host
/// did not describe (the host checks).
fn columns_of<'t>(tables: &'t [Table], named: &[String], index: u16) -> &'t [Column] {
    if index != DEFAULT_TABLE {
        let path = &named[index as usize - 1];
        if let Some(t) = tables.iter().find(|t| &t.path == path) {
            return &t.columns;
        }
    }
    &tables[0].columns
}

/// The index rows give table `path` (`None`: the sink's table): 0 for the
/// sink's own, else 1 + its place among the names met, `named`, where a
/// new name is added.
fn table_index(tables: &[Table], named: &mut Vec<String>, path: Option<&str>) -> u16 {
    let Some(path) = path else {
        return DEFAULT_TABLE;
    };
    // Names of one database share a long prefix: `==` would compare
    // them a byte at a time (memcmp in WebAssembly), on every row.
    let same = |name: &str| same_bytes(name.as_bytes(), path.as_bytes());
    if same(&tables[0].path) {
        return DEFAULT_TABLE;
    }
    match named.iter().position(|p| same(p)) {
        Some(i) => (i + 1) as u16,
        None => {
            named.push(path.to_string());
            named.len() as u16
        }
    }
}

impl<'a> Output<'a> {
    /// Maps a JSON object onto one row of the sink's table by column name.
    pub fn json_row(&mut self, kind: RowKind, payload: &[u8]) -> Result<(), String> {
        self.json_row_to(None, kind, payload)
    }

    /// Maps a JSON object onto one row of `table` ("database.table"; `None`
    /// for the sink's table).
    pub fn json_row_to(&mut self, table: Option<&str>, kind: RowKind, payload: &[u8]) -> Result<(), String> {
        let index = self.state.table_index(table);
        self.json_row_at(index, kind, payload)
    }

    /// [`Output::json_row_to`] for the table of index `index`.
    fn json_row_at(&mut self, index: u16, kind: RowKind, payload: &[u8]) -> Result<(), String> {
        let mapper = self.state.mapper(index, false);
        mapper
            .map_into(payload, kind, index, self.rows)
            .map_err(|e| e.to_string())
    }

    /// Like [`json_row_to`](Self::json_row_to), but a field missing from
    /// the payload leaves its (nullable) column out of the row: a partial
    /// update of a primary-key table. An explicit `null` is still NULL.
    pub fn json_partial_row_to(
        &mut self,
        table: Option<&str>,
        kind: RowKind,
        payload: &[u8],
    ) -> Result<(), String> {
        let index = self.state.table_index(table);
        let mapper = self.state.mapper(index, true);
        mapper
            .map_into(payload, kind, index, self.rows)
            .map_err(|e| e.to_string())
    }

    /// Starts a row of the sink's table, built by column name.
    pub fn row(&mut self, kind: RowKind) -> RowBuilder<'_, 'a> {
        self.row_to(None, kind)
    }

    /// Starts a row of `table`, built by column name; unset columns are NULL.
    pub fn row_to(&mut self, table: Option<&str>, kind: RowKind) -> RowBuilder<'_, 'a> {
        self.start_row(table, kind, Value::Null)
    }

    /// Starts a partial update of `table`: unset columns are absent (they
    /// keep their value in the table).
    pub fn partial_row_to(&mut self, table: Option<&str>, kind: RowKind) -> RowBuilder<'_, 'a> {
        self.start_row(table, kind, Value::Absent)
    }

    fn start_row(&mut self, table: Option<&str>, kind: RowKind, unset: Value) -> RowBuilder<'_, 'a> {
        let index = self.state.table_index(table);
        let width = self.state.columns(index).len();
        RowBuilder {
            out: self,
            table: index,
            kind,
            values: vec![unset; width],
            error: None,
        }
    }
}

/// A row being built by column name; unset columns are NULL (absent in a
/// partial update).
pub struct RowBuilder<'o, 'a> {
    out: &'o mut Output<'a>,
    table: u16,
    kind: RowKind,
    values: Vec<Value>,
    error: Option<String>,
}

impl RowBuilder<'_, '_> {
    /// Sets column `name`. An unknown name is reported by [`finish`](Self::finish).
    pub fn set(mut self, name: &str, value: impl Into<Value>) -> Self {
        match self
            .out
            .state
            .columns(self.table)
            .iter()
            .position(|c| c.name == name)
        {
            Some(i) => self.values[i] = value.into(),
            None => {
                self.error
                    .get_or_insert_with(|| format!("the table has no column `{name}`"));
            }
        }
        self
    }

    /// Writes the row.
    pub fn finish(self) -> Result<(), String> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let rows = &mut *self.out.rows;
        rows.begin_row(self.kind, self.table);
        for v in &self.values {
            match v {
                Value::Null => rows.null(),
                Value::Boolean(b) => rows.boolean(*b),
                Value::Int(i) => rows.int(*i),
                Value::BigInt(i) => rows.bigint(*i),
                Value::Double(d) => rows.double(*d),
                Value::String(s) => rows.string(s),
                Value::Bytes(b) => rows.bytes(b),
                Value::Decimal(d) => rows.decimal(d),
                Value::Date(d) => rows.date(*d),
                Value::Timestamp(t) => rows.timestamp(*t),
                Value::TimestampLtz(t) => rows.timestamp_ltz(*t),
                Value::Absent => rows.absent(),
            }
        }
        rows.end_row();
        Ok(())
    }
}

/// A transform: one instance per component instance, `process` once per message.
pub trait Transform: Sized + 'static {
    /// Builds the transform from its config; an error fails the sink's open.
    fn init(ctx: &InitContext) -> Result<Self, String>;

    /// Turns one message into rows in `out`; `Err` dead-letters it.
    fn process(&mut self, message: &Message<'_>, out: &mut Output<'_>) -> Result<(), String>;
}

struct Instance<T> {
    transform: T,
    state: SdkState,
}

thread_local! {
    static INSTANCE: RefCell<Option<Box<dyn std::any::Any>>> = const { RefCell::new(None) };
}

/// Glue called by [`export_transform!`]; not for direct use.
#[doc(hidden)]
pub mod runtime {
    use super::*;

    fn parse_table(t: TableSchema) -> Result<Table, String> {
        let columns = t
            .columns
            .into_iter()
            .map(|c| {
                let data_type = c
                    .data_type
                    .parse::<DataType>()
                    .map_err(|e| format!("table {} column `{}`: {e}", t.path, c.name))?;
                Ok(Column::new(c.name, data_type, c.nullable))
            })
            .collect::<Result<_, String>>()?;
        Ok(Table {
            path: t.path,
            columns,
            primary_key: t.primary_key,
        })
    }

    pub fn init<T: Transform>(config: Vec<(String, String)>, tables: Vec<TableSchema>) -> Result<(), String> {
        install_panic_hook();
        let tables = tables
            .into_iter()
            .map(parse_table)
            .collect::<Result<Vec<_>, _>>()?;
        if tables.is_empty() {
            return Err("the host gave no tables; the sink's own table must come first".into());
        }
        let ctx = InitContext {
            config: config.into_iter().collect(),
            tables,
        };
        let transform = T::init(&ctx)?;
        let state = SdkState {
            tables: ctx.tables,
            named: Vec::new(),
            mappers: [Vec::new(), Vec::new()],
            routed: None,
        };
        INSTANCE.with(|i| *i.borrow_mut() = Some(Box::new(Instance { transform, state })));
        Ok(())
    }

    pub fn process<T: Transform>(batch: Batch) -> BatchOutput {
        INSTANCE.with(|cell| {
            let mut guard = cell.borrow_mut();
            let instance = guard
                .as_mut()
                .and_then(|b| b.downcast_mut::<Instance<T>>())
                .expect("process called before a successful init");
            run_batch(instance, &batch)
        })
    }

    fn run_batch<T: Transform>(instance: &mut Instance<T>, batch: &Batch) -> BatchOutput {
        let count = batch.offsets.len();
        let mut outcomes = Vec::with_capacity(count);
        let mut rows = RowsBuilder::with_capacity(batch.payloads.len() + count * 16);
        let mut payload_start = 0usize;
        let mut header_start = 0usize;
        for i in 0..count {
            let payload_end = batch.payload_ends[i] as usize;
            let header_end = batch.header_ends[i] as usize;
            let (high, low) = batch.ids[i];
            let message = Message {
                stream: &batch.stream,
                topic: &batch.topic,
                partition: batch.partition,
                offset: batch.offsets[i],
                id: ((high as u128) << 64) | low as u128,
                timestamp: batch.timestamps[i],
                payload: &batch.payloads[payload_start..payload_end],
                headers: &batch.headers[header_start..header_end],
            };
            payload_start = payload_end;
            header_start = header_end;
            let mark = rows.mark();
            let mut out = Output {
                rows: &mut rows,
                state: &mut instance.state,
            };
            match instance.transform.process(&message, &mut out) {
                Ok(()) => outcomes.push(Outcome::Rows(rows.rows_since(mark) as u32)),
                Err(reason) => {
                    rows.rollback(mark);
                    outcomes.push(Outcome::DeadLetter(reason));
                }
            }
        }
        BatchOutput {
            outcomes,
            // Table indexes stay stable for the instance's life, so the
            // whole list goes out with every batch.
            tables: instance.state.named.clone(),
            rows: rows.into_bytes(),
        }
    }
}

/// Exports a [`Transform`] type as the component's `init` and `process`.
#[macro_export]
macro_rules! export_transform {
    ($transform:ty) => {
        struct __FlussTransformExports;
        impl $crate::bindings::Guest for __FlussTransformExports {
            fn init(
                config: ::std::vec::Vec<(::std::string::String, ::std::string::String)>,
                tables: ::std::vec::Vec<$crate::bindings::iggy::fluss_sink::types::TableSchema>,
            ) -> ::std::result::Result<(), ::std::string::String> {
                $crate::runtime::init::<$transform>(config, tables)
            }
            fn process(
                batch: $crate::bindings::iggy::fluss_sink::types::Batch,
            ) -> $crate::bindings::iggy::fluss_sink::types::BatchOutput {
                $crate::runtime::process::<$transform>(batch)
            }
        }
        $crate::bindings::export_bindings!(__FlussTransformExports with_types_in $crate::bindings);
    };
}
