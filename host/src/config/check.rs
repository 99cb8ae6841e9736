//! The checks a config passes before the sink opens: options that parse
//! but contradict each other are refused with the fix.

use super::{ConfigError, PayloadFormat, SinkConfig, TableType, WriteMode};

impl SinkConfig {
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Inconsistent(m));
        if self.bootstrap_servers.trim().is_empty() {
            return bad("bootstrap_servers is empty".into());
        }
        self.table_path()?;
        self.dead_letter_path()?;
        if self.batch_size == Some(0) {
            return bad("batch_size must be at least 1".into());
        }
        for (name, value) in [
            ("delivery_timeout", self.delivery_timeout),
            ("request_timeout", self.request_timeout),
            ("open_timeout", self.open_timeout),
            ("close_timeout", self.close_timeout),
        ] {
            if value.is_zero() {
                return bad(format!(
                    "{name} must be more than 0 (it bounds the call it names), for example \"30s\""
                ));
            }
        }
        if self.schema_refresh_interval.is_zero() {
            return bad(
                "schema_refresh_interval must be more than 0 (how often the tables' schemas are looked at), \
                 for example \"10s\""
                    .into(),
            );
        }
        if self.max_table_columns == 0 {
            return bad(
                "max_table_columns must be at least 1 (the most columns evolve_schema lets the table have)"
                    .into(),
            );
        }
        if self.evolve_schema && self.payload_format == PayloadFormat::ArrowIpc {
            return bad(
                "evolve_schema adds columns for JSON fields or declared columns; Arrow IPC payloads \
                 are written as they are (set payload_format = \"json\", or leave evolve_schema off)"
                    .into(),
            );
        }
        if let Some(t) = &self.transform
            && t.reload
            && t.reload_check_interval.is_zero()
        {
            return bad("transform.reload_check_interval must be more than 0, for example \"2s\"".into());
        }
        self.allowed_table_patterns()?;
        if self.bucket_count == Some(0) {
            return bad("bucket_count must be at least 1 (or left out for the cluster's default)".into());
        }
        if self.dead_letter_path()? == Some(self.table_path()?) {
            return bad(
                "dead_letter_table is the sink's own table; name another table for dead letters".into(),
            );
        }
        self.check_table_options()?;
        if self.sasl_username.is_some() != self.sasl_password.is_some() {
            return bad("sasl_username and sasl_password go together".into());
        }
        let mode = self.write_mode();
        match (self.table_type, mode) {
            (TableType::Log, WriteMode::Upsert | WriteMode::Delete) => {
                return bad(format!(
                    "write_mode = \"{}\" needs table_type = \"primary_key\"",
                    mode.row_kind().name()
                ));
            }
            (TableType::PrimaryKey, WriteMode::Append) => {
                return bad("a primary_key table takes write_mode \"upsert\" or \"delete\"".into());
            }
            _ => {}
        }
        if self.table_type == TableType::PrimaryKey
            && !self.columns.is_empty()
            && self.primary_key_columns.is_empty()
        {
            return bad(
                "table_type = \"primary_key\" with declared columns needs primary_key_columns".into(),
            );
        }
        if self.table_type == TableType::Log && !self.primary_key_columns.is_empty() {
            return bad("primary_key_columns needs table_type = \"primary_key\"".into());
        }
        if self.partial_update {
            if self.table_type != TableType::PrimaryKey {
                return bad(
                    "partial_update needs table_type = \"primary_key\" (log tables take whole rows)".into(),
                );
            }
            if self.transform.is_some() || self.payload_format != PayloadFormat::Json {
                return bad(
                    "partial_update applies to the JSON mapping; a transform leaves columns out with absent cells"
                        .into(),
                );
            }
        }
        if self.dynamic_route_field.is_some() && !self.dynamic_routing {
            return bad("dynamic_route_field is set but dynamic_routing is false".into());
        }
        if self.payload_format == PayloadFormat::ArrowIpc {
            if self.transform.is_some() {
                return bad("payload_format = \"arrow_ipc\" cannot be combined with a transform".into());
            }
            if self.table_type == TableType::PrimaryKey {
                return bad("payload_format = \"arrow_ipc\" writes to log tables only".into());
            }
            if self.dynamic_routing {
                return bad("dynamic_routing reads JSON fields; it does not apply to arrow_ipc".into());
            }
        }
        if self.dynamic_routing && self.transform.is_some() {
            return bad(
                "with a transform, route rows by their table in the transform, not dynamic_routing".into(),
            );
        }
        self.declared_schema()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::tests::parse;

    #[test]
    fn contradictions_are_refused_with_the_fix() {
        let cases = [
            (r#""write_mode":"upsert""#, "needs table_type = \"primary_key\""),
            (
                r#""table_type":"primary_key","write_mode":"append""#,
                "takes write_mode",
            ),
            (
                r#""table_type":"primary_key","columns":[{"name":"id","type":"BIGINT"}]"#,
                "needs primary_key_columns",
            ),
            (r#""dynamic_route_field":"to""#, "dynamic_routing is false"),
            (
                r#""payload_format":"arrow_ipc","table_type":"primary_key""#,
                "log tables only",
            ),
            (r#""dead_letter_table":"nodot""#, "dead_letter_table"),
            (r#""columns":[{"name":"a","type":"NUMBER"}]"#, "column `a`"),
            (r#""batch_size":0"#, "batch_size"),
            (r#""sasl_username":"u""#, "go together"),
            (
                r#""delivery_timeout":"0s""#,
                "delivery_timeout must be more than 0",
            ),
            (r#""open_timeout":"0ms""#, "open_timeout must be more than 0"),
            (
                r#""schema_refresh_interval":"0s""#,
                "schema_refresh_interval must be more than 0",
            ),
            (r#""bucket_count":0"#, "bucket_count must be at least 1"),
            (r#""max_table_columns":0"#, "max_table_columns must be at least 1"),
            (
                r#""evolve_schema":true,"payload_format":"arrow_ipc""#,
                "Arrow IPC payloads are written as they are",
            ),
            (r#""partial_update":true"#, "partial_update needs table_type"),
            (r#""dead_letter_table":"d.t""#, "the sink's own table"),
            (
                r#""allowed_tables":["orders_*"]"#,
                "allowed_tables: `orders_*` is not",
            ),
        ];
        for (extra, expected) in cases {
            let json = format!(r#"{{"bootstrap_servers":"x:1","database":"d","table":"t",{extra}}}"#);
            let e = parse(&json).unwrap_err();
            assert!(e.to_string().contains(expected), "{extra}: {e}");
        }
    }
}
