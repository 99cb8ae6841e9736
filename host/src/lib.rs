//! `iggy_connector_fluss_sink`: a sink plugin for the Apache Iggy connectors
//! runtime that lands messages in Apache Fluss, reshaped by user-supplied
//! WebAssembly transforms.
//!
//! Data flows one way: `abi` (the runtime's C calls, decoded into a
//! `batch`) → `pipeline` (one per instance, configured by `config`) →
//! `transform` (WebAssembly) or `mapping` (JSON) → `rows` (encoded rows with
//! one outcome per message) → `writer` (Fluss).

#![warn(missing_docs)]

pub mod abi;
mod arrow_rows;
pub mod batch;
pub mod columns;
pub mod config;
pub mod deadline;
pub mod decimal;
pub mod mapping;
pub mod metadata;
pub mod metrics;
pub mod pipeline;
mod private_dir;
pub mod rows;
pub mod schema;
pub mod spool;
pub mod transform;
pub mod writer;
