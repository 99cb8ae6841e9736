//! `tracing` events to the runtime's log callback.
//!
//! Each instance registers the callback it was opened with; an event inside
//! an instance's span (see [`instance_span`]) goes to that instance's
//! callback, any other event (the Fluss client's background tasks, say) to
//! the most recently registered one. Levels are filtered by the
//! `IGGY_FLUSS_SINK_LOG` variable (tracing `Targets` syntax, default `info`).
//! Records of the `log` crate (fluss-rs logs through it: dropped batches,
//! retries, closed connections) are bridged into the same events.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{OnceLock, RwLock};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Level, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{Layer, Registry};

/// The runtime's log callback: level (0 TRACE … 4 ERROR), target, message.
pub(crate) type LogCallback = extern "C" fn(
    level: u8,
    target_ptr: *const u8,
    target_len: usize,
    message_ptr: *const u8,
    message_len: usize,
);

/// The span name that marks an instance's work.
const INSTANCE_SPAN: &str = "fluss_sink";

#[derive(Default)]
struct Callbacks {
    by_instance: HashMap<u32, LogCallback>,
    latest: Option<LogCallback>,
}

fn callbacks() -> &'static RwLock<Callbacks> {
    static CALLBACKS: OnceLock<RwLock<Callbacks>> = OnceLock::new();
    CALLBACKS.get_or_init(Default::default)
}

/// Routes instance `id`'s events to `callback`, installing the bridge on first use.
pub(crate) fn register(id: u32, callback: Option<LogCallback>) {
    install();
    let mut c = callbacks().write().unwrap_or_else(|e| e.into_inner());
    match callback {
        Some(cb) => {
            c.by_instance.insert(id, cb);
            c.latest = Some(cb);
        }
        None => {
            c.by_instance.remove(&id);
        }
    }
}

/// Stops routing to instance `id`'s callback (others stay).
pub(crate) fn unregister(id: u32) {
    let mut c = callbacks().write().unwrap_or_else(|e| e.into_inner());
    if let Some(cb) = c.by_instance.remove(&id)
        && c.latest.map(|l| l as usize) == Some(cb as usize)
    {
        c.latest = c.by_instance.values().next().copied();
    }
}

/// The span to run instance `id`'s work in, so its events reach its callback.
pub(crate) fn instance_span(id: u32) -> tracing::Span {
    tracing::info_span!(INSTANCE_SPAN, instance = id)
}

/// Installs the bridge as this library's global subscriber (once).
pub(crate) fn install() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let filter = std::env::var("IGGY_FLUSS_SINK_LOG")
            .ok()
            .and_then(|v| v.parse::<Targets>().ok())
            .unwrap_or_else(|| Targets::new().with_default(Level::INFO));
        let log_level = match filter.default_level() {
            Some(level) if level >= tracing::level_filters::LevelFilter::DEBUG => ::log::LevelFilter::Trace,
            _ => ::log::LevelFilter::Info,
        };
        let subscriber = Registry::default().with(CallbackLayer.with_filter(filter));
        // Fails only if this library already has a global subscriber: then it is used as it is.
        let _ = tracing::subscriber::set_global_default(subscriber);
        // The `log` crate is linked into this library alone, so its logger is
        // this library's own; fails only if one is set already.
        let _ = tracing_log::LogTracer::builder().with_max_level(log_level).init();
    });
}

struct InstanceId(u32);

struct CallbackLayer;

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for CallbackLayer {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().name() != INSTANCE_SPAN {
            return;
        }
        let mut visitor = InstanceVisitor(None);
        attrs.record(&mut visitor);
        if let (Some(instance), Some(span)) = (visitor.0, ctx.span(id)) {
            span.extensions_mut().insert(InstanceId(instance));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let instance = ctx.event_scope(event).and_then(|scope| {
            scope
                .from_root()
                .find_map(|span| span.extensions().get::<InstanceId>().map(|i| i.0))
        });
        let callback = {
            let c = callbacks().read().unwrap_or_else(|e| e.into_inner());
            instance.and_then(|i| c.by_instance.get(&i).copied()).or(c.latest)
        };
        let Some(callback) = callback else {
            return;
        };
        let mut message = MessageVisitor::default();
        event.record(&mut message);
        let mut text = message.message;
        if let Some(i) = instance {
            let _ = write!(text, " instance={i}");
        }
        text.push_str(&message.fields);
        // A bridged `log` record carries its real target and level in fields.
        let normalized = event.normalized_metadata();
        let metadata = normalized.as_ref().unwrap_or_else(|| event.metadata());
        let level = match *metadata.level() {
            Level::TRACE => 0,
            Level::DEBUG => 1,
            Level::INFO => 2,
            Level::WARN => 3,
            Level::ERROR => 4,
        };
        let target = metadata.target();
        callback(level, target.as_ptr(), target.len(), text.as_ptr(), text.len());
    }
}

struct InstanceVisitor(Option<u32>);

impl Visit for InstanceVisitor {
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "instance" {
            self.0 = u32::try_from(value).ok();
        }
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        if field.name() == "instance" {
            self.0 = u32::try_from(value).ok();
        }
    }
    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

#[derive(Default)]
struct MessageVisitor {
    message: String,
    fields: String,
}

impl Visit for MessageVisitor {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name().starts_with("log.") {
            return;
        }
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name().starts_with("log.") {
            return;
        }
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }
}

/// Serialises tests that replace the process-wide callbacks.
#[cfg(test)]
pub(crate) static TEST_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    static SEEN: Mutex<Vec<(u8, String, String)>> = Mutex::new(Vec::new());

    extern "C" fn record(level: u8, t: *const u8, tl: usize, m: *const u8, ml: usize) {
        // SAFETY: the layer passes pointers to live strings of these lengths.
        let (target, message) = unsafe {
            (
                std::str::from_utf8(std::slice::from_raw_parts(t, tl))
                    .unwrap()
                    .to_string(),
                std::str::from_utf8(std::slice::from_raw_parts(m, ml))
                    .unwrap()
                    .to_string(),
            )
        };
        SEEN.lock().unwrap().push((level, target, message));
    }

    #[test]
    fn events_reach_the_callback_with_level_target_and_fields() {
        let _guard = TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        register(7, Some(record));
        SEEN.lock().unwrap().clear();
        instance_span(7).in_scope(|| {
            tracing::warn!(target: "sink::test", rows = 3, "slow ack");
            tracing::error!(target: "sink::test", "refused");
            tracing::debug!(target: "sink::test", "below the default level");
        });
        let seen = SEEN.lock().unwrap().clone();
        assert_eq!(
            seen,
            vec![
                (
                    3,
                    "sink::test".to_string(),
                    "slow ack instance=7 rows=3".to_string()
                ),
                (4, "sink::test".to_string(), "refused instance=7".to_string()),
            ]
        );
        unregister(7);
    }

    #[test]
    fn log_crate_records_reach_the_callback_with_their_own_target() {
        let _guard = TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        register(8, Some(record));
        SEEN.lock().unwrap().clear();
        instance_span(8).in_scope(|| {
            ::log::warn!(target: "fluss::client::write", "batch will be dropped");
            ::log::debug!(target: "fluss::client::write", "below the default level");
        });
        let seen = SEEN.lock().unwrap().clone();
        assert_eq!(
            seen,
            vec![(
                3,
                "fluss::client::write".to_string(),
                "batch will be dropped instance=8".to_string()
            )]
        );
        unregister(8);
    }
}
