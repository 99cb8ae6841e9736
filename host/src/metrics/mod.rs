//! Prometheus metrics (`metrics_address`): one registry for the whole
//! library, so that every instance in one runtime shows on one endpoint,
//! each series labelled with its `instance` (the runtime's connector id).
//! An instance gets its handles once at open ([`InstanceMetrics`]); the hot
//! path only increments atomics and observes histograms. Routed tables
//! beyond [`MAX_TABLE_LABELS`](families::MAX_TABLE_LABELS) per instance share the label `other`.
//!
//! - [`families`]: the metric families, their registry and its text;
//! - [`instance`]: one instance's handles ([`InstanceMetrics`]);
//! - [`server`]: the HTTP endpoint (`GET /metrics`, Prometheus text).

mod families;
mod instance;
pub(crate) mod server;

pub(crate) use families::render;
pub use instance::InstanceMetrics;
