//! Host bindings generated from `wit/transform.wit`.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "transform",
    ownership: Borrowing { duplicate_if_necessary: false },
});

/// The WIT package version this host implements.
pub(crate) const WIT_PACKAGE: &str = "iggy:fluss-sink";
/// Its version; a component built against another cannot be loaded.
pub(crate) const WIT_VERSION: &str = "0.3.0";
