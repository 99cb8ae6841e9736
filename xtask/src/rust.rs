//! The Rust transforms: rustup's `wasm32-wasip2` target where it is
//! installed, else Debian's `rustc-web` building `std` for
//! `wasm32-unknown-unknown`, the core modules made components here.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::{Result, is_root, run};

/// The transform crates, in `transforms/`, that become components.
const TRANSFORMS: &[&str] = &["json-to-row", "tenant-router", "cdc-upsert", "noop", "evil"];

const DEBIAN_PACKAGES: &[&str] = &["rustc-web", "cargo-web", "rust-web-src", "lld-22"];

fn rustup_has_wasip2() -> bool {
    Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l.trim() == "wasm32-wasip2")
        })
        .unwrap_or(false)
}

fn debian_toolchain_ready() -> bool {
    let sysroot = Command::new("/usr/bin/rustc")
        .args(["--print", "sysroot"])
        .output();
    let Ok(sysroot) = sysroot else { return false };
    let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
    Path::new("/usr/bin/cargo").exists()
        && sysroot.join("lib/rustlib/src/rust/library").exists()
        && (Path::new("/usr/bin/rust-lld").exists() || Path::new("/usr/bin/lld-22").exists())
}

fn install_debian_toolchain() -> Result<()> {
    let line = format!("apt-get install -y {}", DEBIAN_PACKAGES.join(" "));
    if !is_root() {
        return Err(format!(
            "no wasm guest toolchain: run `rustup target add wasm32-wasip2`, or as root `apt-get update && {line}`"
        ));
    }
    eprintln!("xtask: installing Debian's rustc-web guest toolchain ({line})");
    run(Command::new("apt-get").args(["update", "-qq"]))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-qq"])
        .args(DEBIAN_PACKAGES)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

/// A `cargo` command for the transforms workspace, clear of the outer cargo's environment.
fn guest_cargo(program: &str, transforms: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.current_dir(transforms);
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_")
            || key.starts_with("RUSTUP_")
            || key == "RUSTC"
            || key == "RUSTFLAGS"
            || key == "RUSTDOC"
        {
            cmd.env_remove(key.as_ref());
        }
    }
    cmd.env("CARGO_TARGET_DIR", transforms.join("target"));
    cmd
}

/// Builds the Rust transforms of `transforms/` into `out_dir`.
pub(crate) fn build(root: &Path, out_dir: &Path) -> Result<()> {
    let transforms = root.join("transforms");
    let started = Instant::now();

    let (artifacts, componentize) = if rustup_has_wasip2() {
        eprintln!("xtask: building transforms with rustup's wasm32-wasip2 target");
        run(guest_cargo("cargo", &transforms).args(["build", "--release", "--target", "wasm32-wasip2"]))?;
        (transforms.join("target/wasm32-wasip2/release"), false)
    } else {
        if !debian_toolchain_ready() {
            install_debian_toolchain()?;
        }
        eprintln!("xtask: building transforms with Debian's rustc-web (build-std, wasm32-unknown-unknown)");
        run(guest_cargo("/usr/bin/cargo", &transforms)
            .env("RUSTC", "/usr/bin/rustc")
            .env("RUSTDOC", "/usr/bin/rustdoc")
            .env("RUSTC_BOOTSTRAP", "1")
            .args([
                "build",
                "--release",
                "-Zbuild-std=std,panic_abort",
                "--target",
                "wasm32-unknown-unknown",
            ]))?;
        (transforms.join("target/wasm32-unknown-unknown/release"), true)
    };

    for name in TRANSFORMS {
        let file = format!("{}.wasm", name.replace('-', "_"));
        let input = artifacts.join(&file);
        let bytes = std::fs::read(&input).map_err(|e| format!("cannot read {}: {e}", input.display()))?;
        let component = if componentize {
            wit_component::ComponentEncoder::default()
                .module(&bytes)
                .and_then(|e| e.validate(true).encode())
                .map_err(|e| format!("cannot make a component of {}: {e:#}", input.display()))?
        } else {
            bytes
        };
        let output = out_dir.join(format!("{name}.wasm"));
        std::fs::write(&output, &component).map_err(|e| format!("cannot write {}: {e}", output.display()))?;
        eprintln!("xtask: {} ({} KiB)", output.display(), component.len() / 1024);
    }
    eprintln!(
        "xtask: built {} Rust transforms in {:.1?}",
        TRANSFORMS.len(),
        started.elapsed()
    );
    Ok(())
}
