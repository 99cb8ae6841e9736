//! Opening an instance: Fluss reached, the sink table created or read and
//! checked against the config, the row stage (transform, JSON mapping or
//! Arrow IPC, on its lean path) made, and the spool opened.

use std::sync::{Arc, Mutex, RwLock};

use super::{Pipeline, PipelineError, PipelineStats, RowStage, evolve, reload, spooled};
use crate::config::{SinkConfig, TableType};
use crate::deadline::Deadline;
use crate::metrics::InstanceMetrics;
use crate::schema::TableSchema;
use crate::spool::SpoolMode;
use crate::transform::Reloadable;
use crate::writer::FlussWriter;

impl Pipeline {
    /// Connects to Fluss, creates or reads the sink table, checks it against
    /// the config, loads the transform, and opens the spool (whose drainer
    /// replays what an earlier process left there before new batches).
    /// `instance` labels its metrics (the runtime's connector id).
    pub(crate) async fn open(config: SinkConfig, instance: u32) -> Result<Arc<Self>, PipelineError> {
        let table = config.table_path()?;
        let deadline = Deadline::after(config.open_timeout);
        let metrics = Arc::new(InstanceMetrics::new(instance));
        if let Some(address) = &config.metrics_address {
            crate::metrics::server::ensure(address).await?;
        }
        let writer = FlussWriter::connect_within(config.writer_settings(), deadline)
            .await?
            .observed_by(metrics.clone());
        let schema = match config.declared_schema()? {
            Some(declared) => {
                let schema = writer.ensure_table_within(&declared, deadline).await?;
                if config.evolve_schema {
                    evolve::add_declared_columns(
                        &writer,
                        &declared,
                        schema,
                        config.max_table_columns,
                        deadline,
                    )
                    .await?
                } else {
                    schema
                }
            }
            None if config.evolve_schema && !writer.table_exists_within(&table, deadline).await? => {
                tracing::info!(
                    table = %table,
                    "table {table} does not exist yet: it is created from the fields of the first batch (evolve_schema)"
                );
                evolve::not_made_yet(&config, table.clone())
            }
            None => writer.table_schema_within(&table, deadline).await?,
        };
        check_table(&config, &schema)?;
        let (stage, reloadable) = make_stage(&config, &schema, &writer, None, deadline).await?;
        let versions = reloadable.map(|r| {
            let t = config.transform.as_ref().expect("a transform was loaded");
            reload::Versions::new(r, t.reload, t.reload_check_interval, metrics.clone())
        });
        let spooler = match config.spool.mode {
            SpoolMode::Off => None,
            mode => {
                let dir = config
                    .spool
                    .dir(&table)
                    .ok_or(crate::spool::SpoolError::NoFolder)?;
                Some(spooled::Spooler::open(
                    mode,
                    &dir,
                    config.spool.max_bytes(),
                    table.clone(),
                    metrics.clone(),
                )?)
            }
        };
        tracing::info!(table = %table, "Fluss sink open");
        let refresh = config.schema_refresh_interval;
        let pipeline = Arc::new(Self {
            table,
            stage: RwLock::new((Arc::new(stage), schema)),
            versions,
            metrics,
            writer,
            chunking: config.batch_size.into(),
            stats: PipelineStats::default(),
            spooler,
            config,
            follower: Mutex::new(None),
            looked_for_field: Mutex::new(None),
        });
        pipeline.start_drainer();
        pipeline.start_follower(refresh);
        Ok(pipeline)
    }
}

/// The row stage `config` asks for, for the sink's table of `schema`:
/// the transform loaded (or, given its `reloadable`, initialised again for
/// `schema`), or the JSON mapping made, each on the lean path where the
/// table takes it. Loading or initialising a transform runs on the
/// blocking pool.
pub(super) async fn make_stage(
    config: &SinkConfig,
    schema: &TableSchema,
    writer: &FlussWriter,
    reloadable: Option<Arc<Reloadable>>,
    deadline: Deadline,
) -> Result<(RowStage, Option<Arc<Reloadable>>), PipelineError> {
    let table = &schema.path;
    let (stage, reloadable) = {
        let (config, schema) = (config.clone(), schema.clone());
        tokio::task::spawn_blocking(move || match (config.transform_spec(), reloadable) {
            (Some(_), Some(reloadable)) => {
                reloadable.follow_tables(std::slice::from_ref(&schema))?;
                Ok((RowStage::Wasm(reloadable.current()), Some(reloadable)))
            }
            (Some(spec), None) => {
                let reloadable = Arc::new(Reloadable::load(spec, std::slice::from_ref(&schema))?);
                Ok((RowStage::Wasm(reloadable.current()), Some(reloadable)))
            }
            (None, _) => RowStage::from_config(&config, &schema).map(|stage| (stage, None)),
        })
        .await
        .map_err(|source| PipelineError::Worker {
            step: "loading the transform",
            source,
        })?
        .map_err(PipelineError::Transform)?
    };
    if schema.columns.is_empty() {
        // The table is made from the first batch's fields; until then no
        // lean path can be chosen.
        return Ok((stage, reloadable));
    }
    let kind = writer.table_kind(table, deadline).await?;
    Ok((
        stage.for_table(schema, &kind, config.include_metadata),
        reloadable,
    ))
}

fn check_table(config: &SinkConfig, schema: &TableSchema) -> Result<(), PipelineError> {
    let mismatch = |reason: String| {
        Err(PipelineError::TableMismatch {
            table: schema.path.clone(),
            reason,
        })
    };
    match (config.table_type, schema.has_primary_key()) {
        (TableType::Log, true) => {
            return mismatch(format!(
                "it has primary key {:?}; set table_type = \"primary_key\"",
                schema.primary_key
            ));
        }
        (TableType::PrimaryKey, false) => {
            return mismatch("it is a log table; set table_type = \"log\"".into());
        }
        _ => {}
    }
    if !config.primary_key_columns.is_empty() && config.primary_key_columns != schema.primary_key {
        return mismatch(format!(
            "its primary key is {:?}, the config says {:?}",
            schema.primary_key, config.primary_key_columns
        ));
    }
    if config.partial_update
        && let Some(reason) = crate::rows::partial_update_refusal(schema)
    {
        return mismatch(format!("partial_update is on, but {reason}"));
    }
    Ok(())
}
