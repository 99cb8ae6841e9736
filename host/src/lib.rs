//! `iggy_connector_fluss_sink`: a sink plugin for the Apache Iggy connectors
//! runtime that lands messages in Apache Fluss, reshaped by user-supplied
//! WebAssembly transforms.
//!
//! Data flows one way: `batch` (messages) → `transform` (WebAssembly) →
//! `rows` (encoded rows with one outcome per message) → writer.

#![warn(missing_docs)]

pub mod abi;
pub mod batch;
pub mod mapping;
pub mod metadata;
pub mod rows;
pub mod schema;
pub mod transform;
pub mod writer;
