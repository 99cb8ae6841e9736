//! What the config gives each part of the sink: table paths, the write
//! mode, the routing field, the writer's settings and the transform's spec.

use super::{ConfigError, SinkConfig, TableType, WriteMode, defaults};
use crate::schema::TablePath;
use crate::transform::{Limits, TransformSpec};
use crate::writer::TablePattern;
use crate::writer::WriterSettings;

impl SinkConfig {
    /// The parsed `allowed_tables`.
    pub fn allowed_table_patterns(&self) -> Result<Vec<TablePattern>, ConfigError> {
        self.allowed_tables
            .iter()
            .map(|p| {
                p.parse()
                    .map_err(|e| ConfigError::Inconsistent(format!("allowed_tables: {e}")))
            })
            .collect()
    }

    /// The sink table.
    pub fn table_path(&self) -> Result<TablePath, ConfigError> {
        let path = TablePath::new(self.database.clone(), self.table.clone());
        path.to_string()
            .parse::<TablePath>()
            .map_err(|e| ConfigError::Inconsistent(format!("database/table: {e}")))
    }

    pub(super) fn dead_letter_path(&self) -> Result<Option<TablePath>, ConfigError> {
        self.dead_letter_table
            .as_deref()
            .map(|t| {
                t.parse::<TablePath>()
                    .map_err(|e| ConfigError::Inconsistent(format!("dead_letter_table: {e}")))
            })
            .transpose()
    }

    /// The row kind where the input gives none.
    pub fn write_mode(&self) -> WriteMode {
        self.write_mode.unwrap_or(match self.table_type {
            TableType::Log => WriteMode::Append,
            TableType::PrimaryKey => WriteMode::Upsert,
        })
    }

    /// The field dynamic routing reads, when it is on.
    pub fn route_field(&self) -> Option<String> {
        self.dynamic_routing.then(|| {
            self.dynamic_route_field
                .clone()
                .unwrap_or_else(|| defaults::ROUTE_FIELD.into())
        })
    }

    /// The writer's settings.
    pub fn writer_settings(&self) -> WriterSettings {
        WriterSettings {
            bootstrap_servers: self.bootstrap_servers.clone(),
            sasl: self
                .sasl_username
                .clone()
                .zip(self.sasl_password.as_ref().map(|p| p.expose().to_string())),
            delivery_timeout: self.delivery_timeout,
            request_timeout: self.request_timeout,
            max_retries: self.max_retries,
            retry_backoff: self.retry_backoff,
            buffer_wait_timeout: self.buffer_wait_timeout,
            batch_timeout: self.flush_interval,
            dead_letter_table: self.dead_letter_path().ok().flatten(),
            auto_create_table: self.auto_create_table,
            // Checked when the config was read.
            allowed_tables: self.allowed_table_patterns().unwrap_or_default(),
            bucket_count: self.bucket_count.map(|n| n as i32),
            include_metadata: self.include_metadata,
            auto_create_partitions: self.auto_create_partitions,
            table_properties: self.table_properties(),
            evolve_routed_tables: (self.evolve_schema
                && self.transform.is_none()
                && self.route_field().is_some())
            .then_some(self.max_table_columns),
            conversions_are_schema: self.evolve_schema && self.transform.is_none(),
        }
    }

    /// The transform to load, if any.
    pub fn transform_spec(&self) -> Option<TransformSpec> {
        let t = self.transform.as_ref()?;
        let mut spec = TransformSpec::new(t.path.clone());
        spec.config = t.config.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        if let Some(dir) = &t.cache_dir {
            spec.cache_dir = Some(dir.clone());
        }
        let limits = Limits::default();
        spec.limits = Limits {
            call_timeout: t.call_timeout.unwrap_or(limits.call_timeout),
            max_memory: t.max_memory.map_or(limits.max_memory, |b| b as usize),
            recycle_memory: t
                .max_memory
                .map_or(limits.recycle_memory, |b| defaults::recycle_memory(b as usize)),
            max_rows_per_batch: t.max_rows_per_batch.unwrap_or(limits.max_rows_per_batch),
            max_output_bytes: t.max_output_bytes.map_or(limits.max_output_bytes, |b| b as usize),
            max_faults_per_batch: t.max_faults_per_batch.unwrap_or(limits.max_faults_per_batch),
            ..limits
        };
        Some(spec)
    }
}
