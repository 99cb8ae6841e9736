//! The pipeline's side of hot reload: a background task that checks the
//! transform's file every `reload_check_interval` (off the hot path: a
//! `stat` of the file, and a compile only when it changed), and the log of
//! which version handles which offsets.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::Instrument;

use crate::batch::MessageBatch;
use crate::metrics::InstanceMetrics;
use crate::transform::{ReloadOutcome, Reloadable, Transform};

/// A reloadable transform, its watcher, and what the log said last.
pub(super) struct Versions {
    reloadable: Arc<Reloadable>,
    /// The version the log last named as handling batches.
    handling: Mutex<String>,
    watcher: Option<tokio::task::AbortHandle>,
}

impl Versions {
    /// Watches `reloadable`'s file every `interval` when `reload` is on,
    /// counting reloads in `metrics`.
    pub(super) fn new(
        reloadable: Arc<Reloadable>,
        reload: bool,
        interval: Duration,
        metrics: Arc<InstanceMetrics>,
    ) -> Self {
        let first = reloadable.current();
        metrics.transform_version(first.version());
        tracing::info!(
            version = first.version(),
            "transform {} version {} loaded; {}",
            first.path().display(),
            first.version(),
            if reload {
                format!("checked for a new version every {interval:?}")
            } else {
                "hot reload is off".into()
            }
        );
        // The watcher logs as the instance that opened it (its span).
        let watcher = reload.then(|| {
            let watching = watch(reloadable.clone(), interval, metrics);
            tokio::spawn(watching.instrument(tracing::Span::current())).abort_handle()
        });
        Self {
            handling: Mutex::new(first.version().to_string()),
            reloadable,
            watcher,
        }
    }

    /// The transform whose versions these are.
    pub(super) fn reloadable(&self) -> &Arc<Reloadable> {
        &self.reloadable
    }

    /// The version `batch` is made with, from start to end. The first batch
    /// a new version handles is logged with its offsets.
    pub(super) fn for_batch(&self, batch: &MessageBatch) -> Arc<Transform> {
        let transform = self.reloadable.current();
        let mut handling = self.handling.lock().expect("version log poisoned");
        if *handling != transform.version() && !batch.is_empty() {
            let (first, last) = (batch.get(0).offset, batch.get(batch.len() - 1).offset);
            tracing::info!(
                version = transform.version(),
                previous = handling.as_str(),
                "transform version {} handles offsets {first}..={last} of {}/{} partition {} and the batches after them; version {} handled the batches before",
                transform.version(),
                batch.source.stream,
                batch.source.topic,
                batch.source.partition,
                handling.as_str()
            );
            *handling = transform.version().to_string();
        }
        transform
    }
}

impl Drop for Versions {
    fn drop(&mut self) {
        if let Some(watcher) = &self.watcher {
            watcher.abort();
        }
    }
}

async fn watch(reloadable: Arc<Reloadable>, interval: Duration, metrics: Arc<InstanceMetrics>) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let checking = reloadable.clone();
        let outcome = match tokio::task::spawn_blocking(move || checking.check()).await {
            Ok(outcome) => outcome,
            Err(e) => {
                tracing::error!("checking the transform for a new version failed: {e}");
                continue;
            }
        };
        match outcome {
            ReloadOutcome::Unchanged => {}
            ReloadOutcome::Reloaded { from, to } => {
                metrics.reload(true);
                metrics.transform_version(&to);
                tracing::info!(
                    version = to.as_str(),
                    previous = from.as_str(),
                    "transform reloaded: version {to} replaces {from} from the next batch on"
                );
            }
            ReloadOutcome::Refused { version, reason } => {
                metrics.reload(false);
                tracing::error!(
                    "transform reload refused (new version {}), version {} keeps running: {reason}",
                    version.as_deref().unwrap_or("unreadable"),
                    reloadable.current().version()
                );
            }
        }
    }
}
