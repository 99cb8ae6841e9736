//! The Go transforms (`transforms/go/<name>/main.go` on the `fluss`
//! package), built by the standard Go toolchain for `GOOS=wasip1
//! GOARCH=wasm` as reactors (`-buildmode=c-shared`), then given the
//! `transform` world's type and made components here with the WASI preview1
//! reactor adapter.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use wit_component::StringEncoding;
use wit_parser::Resolve;

use crate::{Result, run, wasi_component};

/// Go main packages that become components (`go-<name>.wasm`).
const TRANSFORMS: &[&str] = &["json-to-row", "tenant-router"];

pub(crate) fn build(root: &Path, out_dir: &Path) -> Result<()> {
    let started = Instant::now();
    let sources = root.join("transforms/go");
    let work = root.join("target/guest-tools/go");
    std::fs::create_dir_all(&work).map_err(|e| format!("cannot create {}: {e}", work.display()))?;
    let mut resolve = Resolve::default();
    let (package, _) = resolve
        .push_path(root.join("wit"))
        .map_err(|e| format!("cannot read wit/: {e:#}"))?;
    let world = resolve
        .select_world(&[package], Some("transform"))
        .map_err(|e| format!("no `transform` world: {e:#}"))?;
    for name in TRANSFORMS {
        let core = work.join(format!("{name}.core.wasm"));
        run(Command::new("go")
            .args(["build", "-trimpath", "-buildmode=c-shared", "-o"])
            .arg(&core)
            .arg(format!("./{name}"))
            .current_dir(&sources)
            .env("GOOS", "wasip1")
            .env("GOARCH", "wasm"))
        .map_err(|e| format!("{e}; Go 1.24 or newer is needed (go:wasmexport)"))?;
        let mut module = std::fs::read(&core).map_err(|e| format!("cannot read {}: {e}", core.display()))?;
        wit_component::embed_component_metadata(&mut module, &resolve, world, StringEncoding::UTF8, false)
            .map_err(|e| format!("cannot embed the world's type in {}: {e:#}", core.display()))?;
        wasi_component(&module, &core, &out_dir.join(format!("go-{name}.wasm")))?;
    }
    eprintln!(
        "xtask: built {} Go transforms in {:.1?}",
        TRANSFORMS.len(),
        started.elapsed()
    );
    Ok(())
}
