//! Project tasks. `cargo xtask build-transforms` builds every transform under
//! `transforms/` into a WebAssembly component in `target/wasm-transforms/`,
//! installing the guest toolchain first where it is missing:
//!
//! - where rustup has the `wasm32-wasip2` target, the ordinary route:
//!   `cargo build --target wasm32-wasip2`, which links components directly;
//! - otherwise Debian's `rustc-web` (which ships the standard library's
//!   source) builds `std` for `wasm32-unknown-unknown`, and the core modules
//!   are turned into components here with `wit-component`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

/// The transform crates, in `transforms/`, that become components.
const TRANSFORMS: &[&str] = &["json-to-row", "tenant-router", "cdc-upsert", "noop", "evil"];

const DEBIAN_PACKAGES: &[&str] = &["rustc-web", "cargo-web", "rust-web-src", "lld-22"];

type Result<T> = std::result::Result<T, String>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("build-transforms") => build_transforms(),
        _ => Err("usage: cargo xtask build-transforms".to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
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
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    let line = format!("apt-get install -y {}", DEBIAN_PACKAGES.join(" "));
    if !is_root {
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

fn build_transforms() -> Result<()> {
    let root = repo_root();
    let transforms = root.join("transforms");
    let out_dir = root.join("target/wasm-transforms");
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;
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
        "xtask: built {} transforms in {:.1?}",
        TRANSFORMS.len(),
        started.elapsed()
    );
    Ok(())
}
