//! `fluss-sink check`: validates a connector file as the runtime and the
//! plugin's `open` would see it, without writing anything.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use iggy_connector_fluss_sink::TableSchema;
use iggy_connector_fluss_sink::Transform;
use iggy_connector_fluss_sink::{FlussWriter, WriterSettings};
use iggy_connector_fluss_sink::{SinkConfig, TableType};

use crate::input;

/// How long `check` waits for Fluss.
const FLUSS_TIMEOUT: Duration = Duration::from_secs(15);

/// Findings, printed as they come.
#[derive(Default)]
struct Findings {
    errors: usize,
}

impl Findings {
    fn ok(&self, what: impl AsRef<str>) {
        println!("ok     {}", what.as_ref());
    }
    fn note(&self, what: impl AsRef<str>) {
        println!("note   {}", what.as_ref());
    }
    fn error(&mut self, what: impl AsRef<str>) {
        self.errors += 1;
        println!("error  {}", what.as_ref());
    }
}

/// The library file the runtime would load for `path` (".so" appended when missing).
fn library_file(path: &str) -> PathBuf {
    if path.ends_with(".so") {
        PathBuf::from(path)
    } else {
        PathBuf::from(format!("{path}.so"))
    }
}

/// What [`schema_differences`] says of a declared column the table lacks.
fn not_in_the_table(column: &str) -> String {
    format!("column `{column}` is declared but not in the table")
}

/// Differences between the declared schema and the one in Fluss.
fn schema_differences(declared: &TableSchema, actual: &TableSchema) -> Vec<String> {
    let mut out = Vec::new();
    for column in &declared.columns {
        match actual.columns.iter().find(|c| c.name == column.name) {
            None => out.push(not_in_the_table(&column.name)),
            Some(c) if c.data_type != column.data_type => out.push(format!(
                "column `{}` is declared {} but is {} in the table",
                column.name, column.data_type, c.data_type
            )),
            Some(_) => {}
        }
    }
    for column in &actual.columns {
        if !declared.columns.iter().any(|c| c.name == column.name) {
            out.push(format!(
                "the table has column `{}`, which is not declared",
                column.name
            ));
        }
    }
    if declared.primary_key != actual.primary_key {
        out.push(format!(
            "primary key declared {:?}, the table has {:?}",
            declared.primary_key, actual.primary_key
        ));
    }
    if declared.partition_keys != actual.partition_keys {
        out.push(format!(
            "partition keys declared {:?}, the table has {:?}",
            declared.partition_keys, actual.partition_keys
        ));
    }
    out
}

/// The table's schema as Fluss has it, `Ok(None)` when the table is absent.
fn fluss_schema(config: &SinkConfig, findings: &mut Findings) -> Option<Option<TableSchema>> {
    let settings = WriterSettings {
        dead_letter_table: None,
        ..config.writer_settings()
    };
    let path = config.table_path().ok()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        let writer = match tokio::time::timeout(FLUSS_TIMEOUT, FlussWriter::connect(settings)).await {
            Ok(Ok(w)) => w,
            Ok(Err(e)) => {
                findings.note(format!("Fluss not reachable, table not checked: {e}"));
                return None;
            }
            Err(_) => {
                findings.note(format!(
                    "Fluss at {} did not answer within {FLUSS_TIMEOUT:?}; table not checked",
                    config.bootstrap_servers
                ));
                return None;
            }
        };
        findings.ok(format!("Fluss reachable at {}", config.bootstrap_servers));
        let schema = writer.table_schema(&path).await;
        writer.close(Duration::from_secs(1)).await;
        Some(schema.ok())
    })
}

/// Runs every check and prints the findings; exit status 1 when any failed.
pub(crate) fn run(path: &Path, offline: bool) -> ExitCode {
    let mut findings = Findings::default();
    let file = match input::connector_file(path) {
        Ok(f) => f,
        Err(e) => {
            findings.error(e.to_string());
            return ExitCode::from(1);
        }
    };
    findings.ok("plugin_config options are valid");
    let config = &file.config;
    match file.kind.as_deref() {
        Some("sink") => findings.ok("type = \"sink\""),
        other => findings.error(format!("type is {other:?}; this plugin is a \"sink\"")),
    }
    match file.plugin_path.as_deref() {
        Some(p) if library_file(p).exists() => {
            findings.ok(format!("plugin library {}", library_file(p).display()))
        }
        Some(p) => findings.error(format!(
            "plugin library {} does not exist (relative paths are from the runtime's working directory)",
            library_file(p).display()
        )),
        None => findings.error("no `path` to the plugin library"),
    }

    let declared = config.declared_schema().ok().flatten();
    let in_fluss = if offline {
        None
    } else {
        fluss_schema(config, &mut findings)
    };
    let table = config.table_path().map(|p| p.to_string()).unwrap_or_default();
    let schema = match (in_fluss, declared) {
        (Some(Some(actual)), declared) => {
            let mut differences = declared
                .as_ref()
                .map(|d| schema_differences(d, &actual))
                .unwrap_or_default();
            if config.evolve_schema
                && let Some(declared) = &declared
            {
                // Declared columns the table lacks are added at open.
                for column in declared
                    .columns
                    .iter()
                    .filter(|d| !actual.columns.iter().any(|c| c.name == d.name))
                {
                    differences.retain(|d| *d != not_in_the_table(&column.name));
                    findings.note(format!(
                        "table {table}: column `{}` is declared but not in the table; open adds it (evolve_schema)",
                        column.name
                    ));
                }
            }
            if differences.is_empty() {
                findings.ok(format!(
                    "table {table} exists with {} columns",
                    actual.columns.len()
                ));
            }
            for d in differences {
                findings.error(format!("table {table}: {d}"));
            }
            match (config.table_type, actual.has_primary_key()) {
                (TableType::Log, true) => findings.error(format!(
                    "table {table} has a primary key; set table_type = \"primary_key\""
                )),
                (TableType::PrimaryKey, false) => {
                    findings.error(format!("table {table} is a log table; set table_type = \"log\""))
                }
                _ => {}
            }
            Some(actual)
        }
        (Some(None), Some(declared)) => {
            findings.note(format!("table {table} does not exist yet; open will create it"));
            Some(declared)
        }
        (Some(None), None) if config.evolve_schema => {
            findings.note(format!(
                "table {table} does not exist yet; the first batch's fields will create it (evolve_schema)"
            ));
            None
        }
        (Some(None), None) => {
            findings.error(format!(
                "table {table} does not exist and no columns are declared to create it"
            ));
            None
        }
        (None, declared) => declared,
    };

    if let Some(spec) = config.transform_spec() {
        match &schema {
            None => findings
                .note("transform not loaded: no table schema (declare columns or make Fluss reachable)"),
            Some(schema) => match Transform::load(&spec, std::slice::from_ref(schema)) {
                Ok(t) => {
                    let info = t.load_info();
                    findings.ok(format!(
                        "transform {} loads and accepts its config ({:?}, {:?})",
                        spec.path.display(),
                        info.source,
                        info.compile_time
                    ));
                }
                Err(e) => findings.error(format!("transform: {e}")),
            },
        }
    }
    if findings.errors == 0 {
        println!("{} is ready", path.display());
        ExitCode::SUCCESS
    } else {
        println!("{} has {} problem(s)", path.display(), findings.errors);
        ExitCode::from(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iggy_connector_fluss_sink::{Column, DataType, TablePath};

    fn schema(primary_key: &[&str], partition_keys: &[&str]) -> TableSchema {
        TableSchema {
            path: TablePath::new("d", "t"),
            columns: vec![
                Column::new("id", DataType::BigInt, false),
                Column::new("day", DataType::String, false),
            ],
            primary_key: primary_key.iter().map(|k| k.to_string()).collect(),
            partition_keys: partition_keys.iter().map(|k| k.to_string()).collect(),
            added_columns: 0,
        }
    }

    #[test]
    fn keys_and_partitioning_that_differ_are_named() {
        assert!(schema_differences(&schema(&[], &["day"]), &schema(&[], &["day"])).is_empty());
        let found = schema_differences(&schema(&["id", "day"], &["day"]), &schema(&["id"], &[]));
        assert_eq!(
            found,
            vec![
                r#"primary key declared ["id", "day"], the table has ["id"]"#.to_string(),
                r#"partition keys declared ["day"], the table has []"#.to_string(),
            ]
        );
    }
}
