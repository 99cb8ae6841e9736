//! The plugin's configuration: the connector file's `[plugin_config]` table,
//! which the runtime hands over as JSON.
//!
//! Unknown keys are refused by name. Where a string is expected a number or a
//! boolean is accepted too (the runtime's environment overrides turn strings
//! that look numeric into numbers); durations are humantime strings ("5s",
//! "250ms"), memory sizes are byte-size strings ("256 MiB") or plain bytes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use fluss_row_codec::RowKind;
use serde::{Deserialize, Serialize};

use crate::schema::TablePath;
use crate::spool::SpoolMode;

mod check;
pub(crate) mod defaults;
mod lenient;
mod overrides;
mod parts;
mod table;

pub(crate) use lenient::Secret;
use lenient::{
    duration, lenient_string, lenient_string_map, opt_batch_size, opt_byte_size, opt_duration,
    opt_lenient_string, opt_lenient_u32, opt_secret,
};
pub(crate) use table::AutoPartitionUnit;

/// Why a config was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The runtime passed `null`: the connector file has no `[plugin_config]`.
    #[error(
        "the connector has no [plugin_config]; at least bootstrap_servers, database and table are required"
    )]
    Missing,
    /// The runtime's config is not JSON.
    #[error("invalid plugin_config: not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    /// The JSON does not fit the options (an unknown option, a wrong type).
    #[error("invalid plugin_config: {0}")]
    Invalid(#[source] serde_json::Error),
    /// The options parse but contradict each other.
    #[error("invalid plugin_config: {0}")]
    Inconsistent(String),
}

/// The kind of the sink's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TableType {
    /// An append-only log table.
    #[default]
    Log,
    /// A table with a primary key: upserts and deletes.
    PrimaryKey,
}

/// What a row does when its input does not say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    /// Append (log tables).
    Append,
    /// Insert or replace by primary key.
    Upsert,
    /// Delete by primary key.
    Delete,
}

impl WriteMode {
    /// The row kind this mode writes.
    pub fn row_kind(self) -> RowKind {
        match self {
            Self::Append => RowKind::Append,
            Self::Upsert => RowKind::Upsert,
            Self::Delete => RowKind::Delete,
        }
    }
}

/// How payloads become rows when there is no transform.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PayloadFormat {
    /// JSON objects, fields matched to columns by name.
    #[default]
    Json,
    /// Arrow IPC streams appended as record batches.
    ArrowIpc,
}

/// One declared column of the sink's table.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnConfig {
    /// Column name.
    #[serde(deserialize_with = "lenient_string")]
    pub name: String,
    /// Fluss type, e.g. "BIGINT", "DECIMAL(10, 2)", "TIMESTAMP(3)".
    #[serde(rename = "type", deserialize_with = "lenient_string")]
    pub data_type: String,
    /// Whether the column takes nulls (primary-key columns never do).
    #[serde(default = "yes")]
    pub nullable: bool,
}

/// The WebAssembly transform and its limits.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TransformConfig {
    /// The component file (`.wasm`).
    pub path: PathBuf,
    /// Key/value pairs handed to the transform's `init`.
    #[serde(default, deserialize_with = "lenient_string_map")]
    pub config: BTreeMap<String, String>,
    /// Folder for compiled components; defaults to the user's cache folder.
    #[serde(default)]
    pub cache_dir: Option<PathBuf>,
    /// CPU time one call may take.
    #[serde(default, with = "opt_duration")]
    pub call_timeout: Option<Duration>,
    /// Linear memory one instance may hold ("256 MiB" or bytes).
    #[serde(default, deserialize_with = "opt_byte_size")]
    pub max_memory: Option<u64>,
    /// Rows one batch may return.
    #[serde(default)]
    pub max_rows_per_batch: Option<usize>,
    /// Swap in a new version of the file at `path` without a restart.
    #[serde(default = "yes")]
    pub reload: bool,
    /// How often the file is checked for a new version.
    #[serde(default = "default_reload_check_interval", with = "duration")]
    pub reload_check_interval: Duration,
    /// Encoded row bytes one batch may return ("128 MiB" or bytes).
    #[serde(default, deserialize_with = "opt_byte_size")]
    pub max_output_bytes: Option<u64>,
    /// Failed calls allowed while isolating bad messages in one batch.
    #[serde(default)]
    pub max_faults_per_batch: Option<u32>,
}

/// The durable local spool (`[plugin_config.spool]`, or top-level
/// `spool_mode`, `spool_path`, `spool_max_size`, which the runtime's
/// environment overrides can reach).
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SpoolConfig {
    /// `on_failure` (the default), `always` or `off`.
    #[serde(default)]
    pub mode: SpoolMode,
    /// The folder; defaults to one per table under `XDG_STATE_HOME` or `~/.local/state`.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// The most the spool may hold on disk ("1 GiB" or bytes; default 1 GiB).
    #[serde(default, deserialize_with = "opt_byte_size")]
    pub max_size: Option<u64>,
}

impl SpoolConfig {
    /// The folder of the spool of `table`, if one can be had.
    pub fn dir(&self, table: &TablePath) -> Option<PathBuf> {
        self.path
            .clone()
            .or_else(|| crate::spool::default_dir(&table.to_string()))
    }

    /// `max_size`, or its default.
    pub fn max_bytes(&self) -> u64 {
        self.max_size.unwrap_or(defaults::SPOOL_MAX_SIZE)
    }
}

/// Every option of `[plugin_config]`; see the README's table for each.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SinkConfig {
    /// `host:port` of the Fluss coordinator(s), comma-separated.
    #[serde(deserialize_with = "lenient_string")]
    pub bootstrap_servers: String,
    /// SASL/PLAIN user name.
    #[serde(default, deserialize_with = "opt_lenient_string")]
    pub sasl_username: Option<String>,
    /// SASL/PLAIN password (never logged, redacted in `Debug`).
    #[serde(default, deserialize_with = "opt_secret", skip_serializing)]
    pub sasl_password: Option<Secret>,
    /// The sink table's database.
    #[serde(deserialize_with = "lenient_string")]
    pub database: String,
    /// The sink table.
    #[serde(deserialize_with = "lenient_string")]
    pub table: String,
    /// `log` or `primary_key`.
    #[serde(default)]
    pub table_type: TableType,
    /// Row kind where the input gives none: `append` (log), `upsert` or `delete` (primary key).
    #[serde(default)]
    pub write_mode: Option<WriteMode>,
    /// `json` or `arrow_ipc`, used when there is no transform.
    #[serde(default)]
    pub payload_format: PayloadFormat,
    /// Messages per transform call and per Fluss write; `None` (left out,
    /// or `"auto"`): 500, or more for a large batch of small messages.
    #[serde(default, deserialize_with = "opt_batch_size")]
    pub batch_size: Option<usize>,
    /// The longest rows wait in the client's buffer before being sent.
    #[serde(default = "default_flush_interval", with = "duration")]
    pub flush_interval: Duration,
    /// Primary-key columns, for a table the sink creates (and checked against an existing one).
    #[serde(default)]
    pub primary_key_columns: Vec<String>,
    /// Columns of a table the sink creates when absent; without them the table must exist.
    #[serde(default)]
    pub columns: Vec<ColumnConfig>,
    /// Buckets of tables the sink creates.
    #[serde(default)]
    pub bucket_count: Option<u32>,
    /// Partition-key columns of a table the sink creates.
    #[serde(default)]
    pub partition_keys: Vec<String>,
    /// Turns Fluss's auto-partitioning on for a table the sink creates: one
    /// partition per `year`, `quarter`, `month`, `day` or `hour`.
    #[serde(default)]
    pub auto_partition_time_unit: Option<AutoPartitionUnit>,
    /// Partitions Fluss creates ahead of time (its default: 2).
    #[serde(default, deserialize_with = "opt_lenient_u32")]
    pub auto_partition_num_precreate: Option<u32>,
    /// Partitions Fluss keeps before dropping the oldest (its default: 7).
    #[serde(default, deserialize_with = "opt_lenient_u32")]
    pub auto_partition_num_retention: Option<u32>,
    /// The partition key Fluss partitions by time, when there are several.
    #[serde(default, deserialize_with = "opt_lenient_string")]
    pub auto_partition_key: Option<String>,
    /// The time zone of auto-partitioning (its default: the server's).
    #[serde(default, deserialize_with = "opt_lenient_string")]
    pub auto_partition_time_zone: Option<String>,
    /// Create a partition rows need when it does not exist; left out: on
    /// unless the table has Fluss's auto-partitioning.
    #[serde(default)]
    pub auto_create_partitions: Option<bool>,
    /// Fluss table properties (`table.*`) of the tables the sink creates.
    #[serde(default, deserialize_with = "lenient_string_map")]
    pub table_properties: BTreeMap<String, String>,
    /// Route each JSON message by its field `dynamic_route_field`.
    #[serde(default)]
    pub dynamic_routing: bool,
    /// The field holding "database.table" (default `fluss_table`).
    #[serde(default, deserialize_with = "opt_lenient_string")]
    pub dynamic_route_field: Option<String>,
    /// Create routed tables that do not exist, with the sink table's schema.
    #[serde(default)]
    pub auto_create_table: bool,
    /// Header whose value (`upsert`, `insert`, `update`, `delete`) overrides `write_mode` per JSON message.
    #[serde(default = "default_op_header", deserialize_with = "lenient_string")]
    pub op_header: String,
    /// On a primary-key table without a transform: a JSON field missing
    /// from a payload leaves its column as it is (a partial update) instead
    /// of setting it NULL.
    #[serde(default)]
    pub partial_update: bool,
    /// Fill the `iggy_*` metadata columns the table has.
    #[serde(default)]
    pub include_metadata: bool,
    /// "database.table" of the dead-letter log table (created when absent).
    #[serde(default, deserialize_with = "opt_lenient_string")]
    pub dead_letter_table: Option<String>,
    /// `database.table` patterns (`*` for any characters) of the tables rows
    /// may be routed to besides the sink's own.
    #[serde(default)]
    pub allowed_tables: Vec<String>,
    /// `host:port` to serve Prometheus metrics on (`GET /metrics`), shared
    /// by every instance in the process that names it.
    #[serde(default, deserialize_with = "opt_lenient_string")]
    pub metrics_address: Option<String>,
    /// The longest a batch may take to be acknowledged, retries included.
    #[serde(default = "default_delivery_timeout", with = "duration")]
    pub delivery_timeout: Duration,
    /// How long a write may wait for Fluss's answer before the client's
    /// connections to the tablet servers are replaced and its requests sent
    /// again (fluss-rs's idempotent writer keeps that from duplicating rows).
    #[serde(default = "default_request_timeout", with = "duration")]
    pub request_timeout: Duration,
    /// Retries of a write that failed transiently.
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// First backoff between retries (doubles, with jitter, up to 5 s).
    #[serde(default = "default_retry_backoff", with = "duration")]
    pub retry_backoff: Duration,
    /// The longest a write waits for room in the client's buffer.
    #[serde(default = "default_buffer_wait_timeout", with = "duration")]
    pub buffer_wait_timeout: Duration,
    /// The longest `open` may take: connecting, tables, the dead-letter table.
    #[serde(default = "default_open_timeout", with = "duration")]
    pub open_timeout: Duration,
    /// The longest `close` waits for running consumes and unsent rows.
    #[serde(default = "default_close_timeout", with = "duration")]
    pub close_timeout: Duration,
    /// How often the tables' schemas are looked at in Fluss: a column added
    /// to a table is written from the batch after the look that finds it.
    #[serde(default = "default_schema_refresh_interval", with = "duration")]
    pub schema_refresh_interval: Duration,
    /// Whether the sink adds columns to its table: for a JSON field the
    /// table lacks (without a transform), and for the `columns` an existing
    /// table lacks (at `open`). Off by default.
    #[serde(default)]
    pub evolve_schema: bool,
    /// The most columns `evolve_schema` lets the sink's table have.
    #[serde(default = "default_max_table_columns")]
    pub max_table_columns: usize,
    /// The WebAssembly transform, if any.
    #[serde(default)]
    pub transform: Option<TransformConfig>,
    /// The durable local spool for batches Fluss does not take in time.
    #[serde(default)]
    pub spool: SpoolConfig,
}

fn yes() -> bool {
    true
}
fn default_flush_interval() -> Duration {
    defaults::FLUSH_INTERVAL
}
fn default_op_header() -> String {
    defaults::OP_HEADER.into()
}
fn default_delivery_timeout() -> Duration {
    defaults::DELIVERY_TIMEOUT
}
fn default_request_timeout() -> Duration {
    defaults::REQUEST_TIMEOUT
}
fn default_max_retries() -> u32 {
    defaults::MAX_RETRIES
}
fn default_retry_backoff() -> Duration {
    defaults::RETRY_BACKOFF
}
fn default_buffer_wait_timeout() -> Duration {
    defaults::BUFFER_WAIT_TIMEOUT
}
fn default_open_timeout() -> Duration {
    defaults::OPEN_TIMEOUT
}
fn default_reload_check_interval() -> Duration {
    defaults::RELOAD_CHECK_INTERVAL
}
fn default_close_timeout() -> Duration {
    defaults::CLOSE_TIMEOUT
}
fn default_schema_refresh_interval() -> Duration {
    defaults::SCHEMA_REFRESH_INTERVAL
}
fn default_max_table_columns() -> usize {
    defaults::MAX_TABLE_COLUMNS
}

impl SinkConfig {
    /// Parses and checks the JSON the runtime passes to `open`.
    pub fn from_json(text: &str) -> Result<Self, ConfigError> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(ConfigError::NotJson)?;
        Self::from_value(value)
    }

    /// Checks a config parsed from a JSON value (e.g. a TOML table converted).
    pub fn from_value(mut value: serde_json::Value) -> Result<Self, ConfigError> {
        if value.is_null() {
            return Err(ConfigError::Missing);
        }
        overrides::fold_transform_keys(&mut value);
        overrides::fold_prefixed_keys(&mut value, "spool");
        let config: Self = serde_json::from_value(value).map_err(ConfigError::Invalid)?;
        config.check()?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_config_keeps_the_parsers_error_as_its_source() {
        use std::error::Error as _;
        let not_json = SinkConfig::from_json("{not json").unwrap_err();
        assert!(
            not_json
                .to_string()
                .starts_with("invalid plugin_config: not JSON: "),
            "{not_json}"
        );
        let source = not_json.source().expect("the parser's error is kept");
        assert!(source.downcast_ref::<serde_json::Error>().is_some(), "{source:?}");
        let unknown =
            SinkConfig::from_json(r#"{"bootstrap_servers":"x:1","database":"d","table":"t","tabel":1}"#)
                .unwrap_err();
        assert!(unknown.to_string().contains("unknown field `tabel`"), "{unknown}");
        assert!(unknown.source().is_some(), "{unknown:?}");
    }
    use crate::schema::{Column, DataType};

    pub(super) fn parse(json: &str) -> Result<SinkConfig, ConfigError> {
        SinkConfig::from_json(json)
    }

    pub(super) const MINIMAL: &str =
        r#"{"bootstrap_servers":"localhost:9123","database":"mydb","table":"events"}"#;

    #[test]
    fn the_seed_example_parses_with_its_values() {
        let c = parse(
            r#"{"bootstrap_servers":"localhost:9123","database":"mydb","table":"events",
                "table_type":"log","write_mode":"append","payload_format":"json",
                "batch_size":500,"flush_interval":"1s"}"#,
        )
        .unwrap();
        assert_eq!(c.table_path().unwrap(), TablePath::new("mydb", "events"));
        assert_eq!(c.write_mode(), WriteMode::Append);
        assert_eq!(c.batch_size, Some(500));
        assert_eq!(c.flush_interval, Duration::from_secs(1));
        assert_eq!(c.writer_settings().batch_timeout, Duration::from_secs(1));
    }

    #[test]
    fn defaults_fill_what_is_left_out() {
        let c = parse(MINIMAL).unwrap();
        assert_eq!(c.table_type, TableType::Log);
        assert_eq!(c.write_mode(), WriteMode::Append);
        assert_eq!(c.payload_format, PayloadFormat::Json);
        assert_eq!(c.delivery_timeout, Duration::from_secs(120));
        assert_eq!(c.op_header, "op");
        assert!(c.transform_spec().is_none());
        assert!(c.declared_schema().unwrap().is_none());
        assert_eq!(c.batch_size, None, "chunks sized by the batch");
    }

    #[test]
    fn batch_size_is_a_whole_number_or_auto() {
        let with = |value: &str| {
            parse(&format!(
                r#"{{"bootstrap_servers":"x:1","database":"d","table":"t","batch_size":{value}}}"#
            ))
        };
        assert_eq!(with(r#""auto""#).unwrap().batch_size, None);
        assert_eq!(with(r#"" Auto ""#).unwrap().batch_size, None);
        assert_eq!(with("2500").unwrap().batch_size, Some(2500));
        for bad in [r#""five hundred""#, "-1", "1.5", "true"] {
            let e = with(bad).unwrap_err().to_string();
            assert!(
                e.contains("batch_size: expected a whole number or \"auto\", got"),
                "{bad}: {e}"
            );
        }
        let zero = with("0").unwrap_err().to_string();
        assert!(zero.contains("batch_size must be at least 1"), "{zero}");
    }

    #[test]
    fn null_config_says_what_is_missing() {
        let e = parse("null").unwrap_err();
        assert!(matches!(e, ConfigError::Missing));
        assert!(e.to_string().contains("bootstrap_servers"), "{e}");
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = parse(r#"{"bootstrap_servers":"x:1","database":"d","table":"t","tabel_type":"log"}"#)
            .unwrap_err();
        assert!(e.to_string().contains("unknown field `tabel_type`"), "{e}");
        let e = parse(r#"{"bootstrap_servers":"x:1","database":"d","table":"t","transform":{"path":"a.wasm","cfg":{}}}"#)
            .unwrap_err();
        assert!(e.to_string().contains("unknown field `cfg`"), "{e}");
    }

    #[test]
    fn missing_required_keys_are_named() {
        let e = parse(r#"{"bootstrap_servers":"x:1","database":"d"}"#).unwrap_err();
        assert!(e.to_string().contains("missing field `table`"), "{e}");
    }

    #[test]
    fn numbers_are_accepted_where_strings_are_expected() {
        let c = parse(
            r#"{"bootstrap_servers":"x:1","database":2024,"table":"t","sasl_username":"u","sasl_password":12345,
                "batch_size":"250","transform":{"path":"t.wasm","config":{"limit":10,"strict":true}}}"#,
        )
        .unwrap();
        assert_eq!(c.database, "2024");
        assert_eq!(c.sasl_password.as_ref().map(Secret::expose), Some("12345"));
        assert_eq!(c.batch_size, Some(250));
        let spec = c.transform_spec().unwrap();
        assert_eq!(
            spec.config,
            vec![
                ("limit".to_string(), "10".to_string()),
                ("strict".to_string(), "true".to_string())
            ]
        );
    }

    #[test]
    fn durations_and_sizes_are_read_with_units() {
        let c = parse(
            r#"{"bootstrap_servers":"x:1","database":"d","table":"t","delivery_timeout":"2m 30s",
                "transform":{"path":"t.wasm","call_timeout":"250ms","max_memory":"64 MiB"}}"#,
        )
        .unwrap();
        assert_eq!(c.delivery_timeout, Duration::from_secs(150));
        let limits = c.transform_spec().unwrap().limits;
        assert_eq!(limits.call_timeout, Duration::from_millis(250));
        assert_eq!(limits.max_memory, 64 << 20);
        let e = parse(r#"{"bootstrap_servers":"x:1","database":"d","table":"t","flush_interval":"5"}"#)
            .unwrap_err();
        assert!(e.to_string().contains("duration \"5\""), "{e}");
    }

    #[test]
    fn debug_never_shows_the_password() {
        let c = parse(
            r#"{"bootstrap_servers":"x:1","database":"d","table":"t","sasl_username":"u","sasl_password":"hunter2-pw"}"#,
        )
        .unwrap();
        let text = format!("{c:?}");
        assert!(!text.contains("hunter2-pw"), "{text}");
        assert!(text.contains("<redacted>"), "{text}");
    }

    #[test]
    fn declared_columns_make_a_schema_with_non_null_keys() {
        let c = parse(
            r#"{"bootstrap_servers":"x:1","database":"d","table":"t","table_type":"primary_key",
                "primary_key_columns":["id"],
                "columns":[{"name":"id","type":"BIGINT"},{"name":"v","type":"DECIMAL(10, 2)","nullable":false}]}"#,
        )
        .unwrap();
        let schema = c.declared_schema().unwrap().unwrap();
        assert_eq!(
            schema.columns,
            vec![
                Column::new("id", DataType::BigInt, false),
                Column::new("v", DataType::Decimal(10, 2), false)
            ]
        );
        assert_eq!(c.write_mode(), WriteMode::Upsert);
    }

    #[test]
    fn dynamic_routing_defaults_its_field() {
        let c = parse(r#"{"bootstrap_servers":"x:1","database":"d","table":"t","dynamic_routing":true}"#)
            .unwrap();
        assert_eq!(c.route_field().as_deref(), Some("fluss_table"));
    }
}
