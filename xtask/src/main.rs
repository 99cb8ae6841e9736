//! Project tasks. `cargo xtask build-transforms [LANGUAGE...]` builds the
//! transforms under `transforms/` into WebAssembly components in
//! `target/wasm-transforms/`, installing each language's guest toolchain
//! first where it is missing (from the package registries):
//!
//! - `rust`: rustup's `wasm32-wasip2` target, or Debian's `rustc-web`;
//! - `python`: componentize-py from PyPI, in a virtualenv under `target/`;
//! - `js`: componentize-js from the npm registry (`npm ci` in `transforms/js`);
//! - `c`: Debian's clang and wasi-libc, bindings from wit-bindgen's C generator;
//! - `go`: the standard Go toolchain (wasip1), with the canonical ABI in `transforms/go/fluss`.
//!
//! With no language named, all of them are built.
//!
//! `cargo xtask test [--per-binary DURATION] [--jobs N] [--alone PATTERN]...
//! [--one-at-a-time PATTERN]... [CARGO TEST ARGS...]` runs the tests with a
//! time bound on each test binary, up to N binaries at once (see
//! `bounded_test` and `test_lanes`).

mod bounded_test;
mod c;
mod go;
mod js;
mod python;
mod rust;
mod test_lanes;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

type Result<T> = std::result::Result<T, String>;

/// The languages, in build order.
const LANGUAGES: &[&str] = &["rust", "python", "js", "c", "go"];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.split_first() {
        Some((task, languages)) if task == "build-transforms" => build_transforms(languages),
        Some((task, cargo_args)) if task == "test" => bounded_test::run(cargo_args),
        _ => Err(format!(
            "usage: cargo xtask build-transforms [{}]...\n       cargo xtask test [--per-binary DURATION] [--jobs N] [--alone PATTERN]... [--one-at-a-time PATTERN]... [CARGO TEST ARGS...]",
            LANGUAGES.join("|")
        )),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn build_transforms(languages: &[String]) -> Result<()> {
    let root = repo_root();
    let out_dir = root.join("target/wasm-transforms");
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;
    let chosen: Vec<&str> = if languages.is_empty() {
        LANGUAGES.to_vec()
    } else {
        languages.iter().map(String::as_str).collect()
    };
    for language in chosen {
        match language {
            "rust" => rust::build(&root, &out_dir)?,
            "python" => python::build(&root, &out_dir)?,
            "js" => js::build(&root, &out_dir)?,
            "c" => c::build(&root, &out_dir)?,
            "go" => go::build(&root, &out_dir)?,
            other => {
                return Err(format!(
                    "unknown language `{other}` (known: {})",
                    LANGUAGES.join(", ")
                ));
            }
        }
    }
    Ok(())
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the repo")
        .to_path_buf()
}

fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed with {status}"))
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Reports one built component.
fn built(path: &Path) -> Result<()> {
    let size = std::fs::metadata(path)
        .map_err(|e| format!("{} was not written: {e}", path.display()))?
        .len();
    eprintln!("xtask: {} ({} KiB)", path.display(), size / 1024);
    Ok(())
}

/// Makes a component of a `wasm32-wasi` (preview1) core module read from
/// `source`, with the WASI preview1 reactor adapter, and writes it to `output`.
fn wasi_component(module: &[u8], source: &Path, output: &Path) -> Result<()> {
    let component = wit_component::ComponentEncoder::default()
        .module(module)
        .and_then(|e| {
            e.adapter(
                wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
                wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
            )
        })
        .and_then(|e| e.validate(true).encode())
        .map_err(|e| format!("cannot make a component of {}: {e:#}", source.display()))?;
    std::fs::write(output, &component).map_err(|e| format!("cannot write {}: {e}", output.display()))?;
    built(output)
}
