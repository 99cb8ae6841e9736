//! The C transforms (`transforms/c/<name>.c` with the shared `fluss_sink.c`
//! and `batch.c`): bindings generated here with wit-bindgen's C generator,
//! compiled by Debian's clang for `wasm32-wasi` against Debian's wasi-libc
//! (installed with apt when missing), and made components with
//! wit-component and the WASI preview1 reactor adapter.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use wit_bindgen_core::wit_parser::Resolve;

use crate::{Result, is_root, run, wasi_component};

/// C sources that become components (`<file>.c` → `c-<name>.wasm`).
/// `evil_sleep` is TEST ONLY (a guest that waits on a clock; see the containment tests).
const TRANSFORMS: &[(&str, &str)] = &[
    ("json_to_row", "json-to-row"),
    ("tenant_router", "tenant-router"),
    ("evil_sleep", "evil-sleep"),
];

const CLANG: &str = "clang-19";
const DEBIAN_PACKAGES: &[&str] = &["clang-19", "lld-19", "wasi-libc", "libclang-rt-19-dev-wasm32"];

fn toolchain_ready() -> bool {
    Command::new(CLANG)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
        && Path::new("/usr/lib/wasm32-wasi/libc.a").exists()
        && Path::new("/usr/lib/llvm-19/lib/clang/19/lib/wasi/libclang_rt.builtins-wasm32.a").exists()
}

fn install_toolchain() -> Result<()> {
    let line = format!("apt-get install -y {}", DEBIAN_PACKAGES.join(" "));
    if !is_root() {
        return Err(format!(
            "no C guest toolchain: as root, run `apt-get update && {line}`"
        ));
    }
    eprintln!("xtask: installing the C guest toolchain ({line})");
    run(Command::new("apt-get").args(["update", "-qq"]))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-qq"])
        .args(DEBIAN_PACKAGES)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

/// Writes the C bindings of the `transform` world into `dir`.
fn bindings(root: &Path, dir: &Path) -> Result<()> {
    let mut resolve = Resolve::default();
    let (package, _) = resolve
        .push_path(root.join("wit"))
        .map_err(|e| format!("cannot read wit/: {e:#}"))?;
    let world = resolve
        .select_world(&[package], Some("transform"))
        .map_err(|e| format!("no `transform` world: {e:#}"))?;
    let mut files = wit_bindgen_core::Files::default();
    wit_bindgen_c::Opts::default()
        .build()
        .generate(&mut resolve, world, &mut files)
        .map_err(|e| format!("cannot generate C bindings: {e:#}"))?;
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for (name, contents) in files.iter() {
        std::fs::write(dir.join(name), contents).map_err(|e| format!("cannot write {name}: {e}"))?;
    }
    Ok(())
}

pub(crate) fn build(root: &Path, out_dir: &Path) -> Result<()> {
    let started = Instant::now();
    if !toolchain_ready() {
        install_toolchain()?;
    }
    let sources = root.join("transforms/c");
    let work = root.join("target/guest-tools/c");
    bindings(root, &work)?;
    for (file, name) in TRANSFORMS {
        let core = work.join(format!("{file}.core.wasm"));
        run(Command::new(CLANG)
            .args([
                "--target=wasm32-wasi",
                "--sysroot=/usr",
                "-I/usr/include/wasm32-wasi",
            ])
            .args([
                "-L/usr/lib/wasm32-wasi",
                "-mexec-model=reactor",
                "-fuse-ld=lld",
                "-O2",
            ])
            .args(["-Wall", "-Wextra", "-Werror"])
            .arg("-I")
            .arg(&work)
            .arg("-I")
            .arg(&sources)
            .arg(work.join("transform.c"))
            .arg(work.join("transform_component_type.o"))
            .arg(sources.join("fluss_sink.c"))
            .arg(sources.join("batch.c"))
            .arg(sources.join(format!("{file}.c")))
            .arg("-o")
            .arg(&core))?;
        let module = std::fs::read(&core).map_err(|e| format!("cannot read {}: {e}", core.display()))?;
        wasi_component(&module, &core, &out_dir.join(format!("c-{name}.wasm")))?;
    }
    eprintln!(
        "xtask: built {} C transforms in {:.1?}",
        TRANSFORMS.len(),
        started.elapsed()
    );
    Ok(())
}
