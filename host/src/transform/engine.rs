//! The process-wide Wasmtime engines, the linker every transform gets, and
//! the checks that a component implements the `transform` world.

use std::path::Path;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use wasmtime::component::{HasSelf, Linker, types::ComponentItem};
use wasmtime::{Config, Engine};

use super::guest::GuestState;
use super::{TransformError, WIT_PACKAGE, WIT_VERSION, bindings, clocks};

/// How often the epoch ticks; CPU deadlines are rounded up to it.
pub(super) const EPOCH_TICK: Duration = Duration::from_millis(5);

/// The linker of every transform: WASI p2 with a context that grants
/// nothing (see `guest`), a monotonic clock that never blocks (see
/// `clocks`), and this project's host interface.
pub(super) fn linker(engine: &Engine) -> Result<Linker<GuestState>, TransformError> {
    let mut linker: Linker<GuestState> = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
        .map_err(|e| TransformError::Setting(format!("cannot link WASI: {e}")))?;
    // Replace the monotonic clock with one whose sleeps return at once
    // (see `clocks`): no guest may block its thread past `call_timeout`.
    linker.allow_shadowing(true);
    wasmtime_wasi::p2::bindings::clocks::monotonic_clock::add_to_linker::<_, clocks::NonBlockingClocks>(
        &mut linker,
        GuestState::clocks,
    )
    .map_err(|e| TransformError::Setting(format!("cannot link the clock: {e}")))?;
    linker.allow_shadowing(false);
    bindings::Transform::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)
        .map_err(|e| TransformError::Setting(format!("cannot link the host interface: {e}")))?;
    Ok(linker)
}

/// The process-wide engines, one per stack cap.
pub(super) fn shared_engine(max_stack: usize) -> Result<Engine, TransformError> {
    static ENGINES: OnceLock<Mutex<Vec<(usize, Engine)>>> = OnceLock::new();
    let mut engines = ENGINES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some((_, engine)) = engines.iter().find(|(stack, _)| *stack == max_stack) {
        return Ok(engine.clone());
    }
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .concurrency_support(false)
        .epoch_interruption(true)
        .max_wasm_stack(max_stack);
    // For profiling: with FLUSS_SINK_PERFMAP set, the engine writes
    // /tmp/perf-<pid>.map, which names a component's compiled functions in
    // `perf report` (docs/benchmarks.md, "Profiling").
    if std::env::var_os("FLUSS_SINK_PERFMAP").is_some() {
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    let engine =
        Engine::new(&config).map_err(|e| TransformError::Setting(format!("max_stack {max_stack}: {e}")))?;
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("fluss-sink-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
                match weak.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => break,
                }
            }
        })
        .map_err(|e| TransformError::Setting(format!("cannot start the epoch thread: {e}")))?;
    engines.push((max_stack, engine.clone()));
    Ok(engine)
}

pub(super) fn check_header(path: &Path, bytes: &[u8]) -> Result<(), TransformError> {
    let not = |reason: &str| TransformError::NotAComponent {
        path: path.to_path_buf(),
        reason: reason.into(),
    };
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(not("it does not start with the WebAssembly magic bytes"));
    }
    match bytes[4..8] {
        [0x0d, 0x00, 0x01, 0x00] => Ok(()),
        [0x01, 0x00, 0x00, 0x00] => Err(not(
            "it is a core WebAssembly module; turn it into a component (`wasm-tools component new`, or build for wasm32-wasip2)",
        )),
        _ => Err(not("unknown WebAssembly version or layer")),
    }
}

/// Imports of our own package must be of the version this host implements.
pub(super) fn check_version(
    path: &Path,
    engine: &Engine,
    component: &wasmtime::component::Component,
) -> Result<(), TransformError> {
    for (name, _) in component.component_type().imports(engine) {
        if let Some(rest) = name.strip_prefix(&format!("{WIT_PACKAGE}/")) {
            let version = rest.split_once('@').map(|(_, v)| v);
            if version != Some(WIT_VERSION) {
                return Err(TransformError::IncompatibleVersion {
                    path: path.to_path_buf(),
                    found: name.to_string(),
                });
            }
        }
    }
    Ok(())
}

/// The world's two functions must be exported.
pub(super) fn check_exports(
    path: &Path,
    engine: &Engine,
    component: &wasmtime::component::Component,
) -> Result<(), TransformError> {
    let ty = component.component_type();
    let exports: Vec<String> = ty
        .exports(engine)
        .filter(|(_, item)| matches!(item.ty, ComponentItem::ComponentFunc(_)))
        .map(|(name, _)| name.to_string())
        .collect();
    for needed in ["init", "process"] {
        if !exports.iter().any(|e| e == needed) {
            return Err(TransformError::WrongWorld {
                path: path.to_path_buf(),
                reason: format!(
                    "it exports no function `{needed}` (it exports: {})",
                    list_or_none(&exports)
                ),
            });
        }
    }
    Ok(())
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "nothing".into()
    } else {
        items.join(", ")
    }
}
