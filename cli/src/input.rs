//! Inputs of the tool: connector files, schema files and JSON-lines messages.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use iggy_connector_fluss_sink::{Column, DataType, TablePath, TableSchema};
use iggy_connector_fluss_sink::{ColumnConfig, SinkConfig};
use iggy_connector_fluss_sink::{Header, HeaderKind, MessageBatch, Source};
use serde::Deserialize;

/// Why an input could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InputError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file does not parse.
    #[error("{path}: {reason}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, with its place.
        reason: String,
    },
}

fn read(path: &Path) -> Result<String, InputError> {
    std::fs::read_to_string(path).map_err(|source| InputError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn parse_error(path: &Path, reason: impl ToString) -> InputError {
    InputError::Parse {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

/// A connector file: the runtime's keys and the plugin's `[plugin_config]`.
#[derive(Debug)]
pub(crate) struct ConnectorFile {
    /// `type` (must be "sink").
    pub kind: Option<String>,
    /// `path` of the plugin library, as written.
    pub plugin_path: Option<String>,
    /// The plugin's options.
    pub config: SinkConfig,
}

/// `message` with the value of every `…password = …` line of `text` replaced
/// by `<redacted>`: TOML's errors quote the source line they point at.
fn redact_passwords(text: &str, message: &str) -> String {
    let mut redacted = message.to_string();
    for line in text.lines() {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if !key.trim().trim_matches('"').ends_with("password") {
            continue;
        }
        let value = value.trim().trim_matches(|c| c == '"' || c == '\'');
        if !value.is_empty() {
            redacted = redacted.replace(value, "<redacted>");
        }
    }
    redacted
}

/// Reads a connector file and checks its `[plugin_config]` as the plugin's `open` would.
pub(crate) fn connector_file(path: &Path) -> Result<ConnectorFile, InputError> {
    let text = read(path)?;
    let secret_safe = |e: &dyn std::fmt::Display| parse_error(path, redact_passwords(&text, &e.to_string()));
    let table: toml::Table = toml::from_str(&text).map_err(|e| secret_safe(&e))?;
    let text_of = |key: &str| table.get(key).and_then(|v| v.as_str()).map(str::to_string);
    let plugin = table
        .get("plugin_config")
        .map(|v| serde_json::to_value(v).map_err(|e| secret_safe(&e)))
        .transpose()?
        .unwrap_or(serde_json::Value::Null);
    let config = SinkConfig::from_value(plugin).map_err(|e| secret_safe(&e))?;
    Ok(ConnectorFile {
        kind: text_of("type"),
        plugin_path: text_of("path"),
        config,
    })
}

/// A schema file: `table = "db.t"`, `primary_key = [..]`, `columns = [{ name, type, nullable }]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SchemaFile {
    table: String,
    #[serde(default)]
    primary_key: Vec<String>,
    columns: Vec<ColumnConfig>,
}

/// Reads a schema file.
pub(crate) fn schema_file(path: &Path) -> Result<TableSchema, InputError> {
    let file: SchemaFile = toml::from_str(&read(path)?).map_err(|e| parse_error(path, e))?;
    let table: TablePath = file.table.parse().map_err(|e| parse_error(path, e))?;
    let mut columns = Vec::new();
    for c in file.columns {
        let data_type: DataType = c
            .data_type
            .parse()
            .map_err(|e| parse_error(path, format!("column `{}`: {e}", c.name)))?;
        let nullable = c.nullable && !file.primary_key.contains(&c.name);
        columns.push(Column::new(c.name, data_type, nullable));
    }
    for key in &file.primary_key {
        if !columns.iter().any(|c| &c.name == key) {
            return Err(parse_error(path, format!("primary key `{key}` is not a column")));
        }
    }
    Ok(TableSchema {
        path: table,
        columns,
        primary_key: file.primary_key,
        partition_keys: vec![],
        added_columns: 0,
    })
}

/// One line of an input in envelope form.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope {
    payload: serde_json::Value,
    #[serde(default)]
    headers: serde_json::Map<String, serde_json::Value>,
}

/// Reads messages, one per non-empty line, at offsets 0, 1, …: each line is
/// the payload itself, or with `envelope` an object `{"payload": …,
/// "headers": {"k": "v"}}` (a string payload is taken as its text).
pub(crate) fn messages(path: &Path, envelope: bool) -> Result<MessageBatch, InputError> {
    let file = std::fs::File::open(path).map_err(|source| InputError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut batch = MessageBatch::new(Source {
        stream: "dry-run".into(),
        topic: path
            .file_stem()
            .map_or("input".into(), |s| s.to_string_lossy().into_owned()),
        partition: 0,
    });
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|source| InputError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let offset = batch.len() as u64;
        let (payload, headers) = if envelope {
            let e: Envelope =
                serde_json::from_str(&line).map_err(|e| parse_error(path, format!("line {}: {e}", n + 1)))?;
            let payload = match e.payload {
                serde_json::Value::String(s) => s.into_bytes(),
                other => other.to_string().into_bytes(),
            };
            let headers = e
                .headers
                .into_iter()
                .map(|(key, value)| Header {
                    key,
                    kind: HeaderKind::String,
                    value: match value {
                        serde_json::Value::String(s) => s.into_bytes(),
                        other => other.to_string().into_bytes(),
                    },
                })
                .collect();
            (payload, headers)
        } else {
            (line.into_bytes(), Vec::new())
        };
        batch
            .push(offset, offset as u128, 0, &payload, headers)
            .map_err(|_| parse_error(path, "the input is larger than 4 GiB"))?;
    }
    Ok(batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_errors_never_quote_the_password() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sink.toml");
        std::fs::write(
            &path,
            "type = \"sink\"\n[plugin_config]\nsasl_password = \"hunter2-pw\" oops\n",
        )
        .unwrap();
        let error = connector_file(&path).unwrap_err().to_string();
        assert!(!error.contains("hunter2-pw"), "{error}");
        assert!(
            error.contains("<redacted>"),
            "the error still points at the line: {error}"
        );
    }

    #[test]
    fn envelope_lines_carry_headers_and_text_payloads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.jsonl");
        std::fs::write(
            &path,
            "{\"payload\":{\"id\":1},\"headers\":{\"op\":\"d\"}}\n\n{\"payload\":\"raw text\"}\n",
        )
        .unwrap();
        let batch = messages(&path, true).unwrap();
        assert_eq!(batch.len(), 2);
        assert_eq!(batch.get(0).payload, br#"{"id":1}"#);
        assert_eq!(batch.get(0).headers[0].key, "op");
        assert_eq!(batch.get(0).headers[0].value, b"d");
        assert_eq!(batch.get(1).payload, b"raw text");
        let err = messages(&path, false).map(|b| b.len()).unwrap();
        assert_eq!(err, 2, "without envelope each line is a payload");
    }

    #[test]
    fn a_schema_file_reads_and_names_its_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.toml");
        std::fs::write(
            &path,
            "table = \"db.t\"\nprimary_key = [\"id\"]\ncolumns = [{ name = \"id\", type = \"BIGINT\" }, { name = \"v\", type = \"STRING\" }]\n",
        )
        .unwrap();
        let schema = schema_file(&path).unwrap();
        assert_eq!(schema.columns[0], Column::new("id", DataType::BigInt, false));
        assert_eq!(schema.primary_key, vec!["id".to_string()]);
        std::fs::write(
            &path,
            "table = \"db.t\"\ncolumns = [{ name = \"id\", type = \"NUMBER\" }]\n",
        )
        .unwrap();
        let e = schema_file(&path).unwrap_err().to_string();
        assert!(e.contains("column `id`"), "{e}");
    }

    #[test]
    fn the_example_connector_file_is_valid() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/runtime/connectors/fluss_sink.toml");
        let file = connector_file(&path).unwrap();
        assert_eq!(file.kind.as_deref(), Some("sink"));
        assert_eq!(
            file.config.table_path().unwrap(),
            TablePath::new("shop", "orders")
        );
        assert!(file.config.transform_spec().is_some());
    }

    #[test]
    fn a_connector_file_with_a_bad_key_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "type = \"sink\"\n[plugin_config]\nbootstrap_servers = \"x:1\"\ndatabase = \"d\"\ntable = \"t\"\nbatchsize = 5\n",
        )
        .unwrap();
        let e = connector_file(&path).unwrap_err().to_string();
        assert!(e.contains("unknown field `batchsize`"), "{e}");
    }
}
