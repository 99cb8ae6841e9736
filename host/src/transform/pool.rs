//! Instances of a loaded transform: made (instantiated and `init`ed) on
//! demand, pooled between calls, recycled past the memory high-water mark.

use std::sync::atomic::Ordering;

use wasmtime::Store;

use super::bindings::iggy::fluss_sink::types as wit;
use super::engine::EPOCH_TICK;
use super::error::describe_failure;
use super::guest::GuestState;
use super::{Transform, TransformError, bindings};

pub(super) struct Instance {
    pub store: Store<GuestState>,
    pub bindings: bindings::Transform,
}

impl Transform {
    pub(super) fn deadline_ticks(&self) -> u64 {
        let tick = EPOCH_TICK.as_nanos();
        (self.limits.call_timeout.as_nanos().div_ceil(tick) as u64).max(1) + 1
    }

    pub(super) fn new_instance(&self) -> Result<Instance, TransformError> {
        let mut store = Store::new(
            &self.engine,
            GuestState::new(self.name.clone(), self.limits.max_memory),
        );
        store.limiter(|s| &mut s.limiter);
        store.epoch_deadline_trap();
        store.set_epoch_deadline(self.deadline_ticks());
        let bindings = self
            .pre
            .instantiate(&mut store)
            .map_err(|source| TransformError::Instantiate {
                path: self.path.clone(),
                reason: describe_failure(&source, &self.limits, None),
                source,
            })?;
        self.stats.instances_created.fetch_add(1, Ordering::Relaxed);

        let config: Vec<(&str, &str)> = self
            .config
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let columns: Vec<Vec<wit::Column<'_>>> = self
            .wit_tables
            .iter()
            .map(|t| {
                t.columns
                    .iter()
                    .map(|(name, data_type, nullable)| wit::Column {
                        name,
                        data_type,
                        nullable: *nullable,
                    })
                    .collect()
            })
            .collect();
        let keys: Vec<Vec<&str>> = self
            .wit_tables
            .iter()
            .map(|t| t.primary_key.iter().map(String::as_str).collect())
            .collect();
        let tables: Vec<wit::TableSchema<'_>> = self
            .wit_tables
            .iter()
            .zip(&columns)
            .zip(&keys)
            .map(|((t, columns), keys)| wit::TableSchema {
                path: &t.path,
                columns,
                primary_key: keys,
            })
            .collect();
        let init_failed = |reason| TransformError::Init {
            path: self.path.clone(),
            reason,
        };
        match bindings.call_init(&mut store, &config, &tables) {
            Ok(Ok(())) => Ok(Instance { store, bindings }),
            Ok(Err(message)) => Err(init_failed(message)),
            Err(e) => Err(init_failed(describe_failure(
                &e,
                &self.limits,
                store.data().last_error.as_deref(),
            ))),
        }
    }

    pub(super) fn take_instance(&self) -> Result<Instance, TransformError> {
        let pooled = self.pool.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match pooled {
            Some(instance) => Ok(instance),
            None => self.new_instance(),
        }
    }

    pub(super) fn give_back(&self, instance: Instance) {
        if instance.store.data().limiter.peak > self.limits.recycle_memory {
            self.stats.recycled.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                transform = &*self.name,
                "recycling an instance past the memory high-water mark"
            );
            return;
        }
        self.pool.lock().unwrap_or_else(|e| e.into_inner()).push(instance);
    }
}
