//! `cargo xtask test [--per-binary DURATION] [CARGO TEST ARGS...]`: builds
//! the test binaries with `cargo test --no-run`, then runs each one in its
//! package's folder (as `cargo test` does) with a time bound, so that a hung
//! test fails CI within minutes and is named: libtest prints `test X has
//! been running for over 60 seconds` for it, and this task names the binary
//! it killed. Every binary runs even after one fails; the summary lists each
//! with its time. A build that yields fewer test binaries than the
//! workspace defines (`cargo metadata`) fails before anything runs, so a
//! change in cargo's output cannot pass CI with nothing tested.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::Result;

/// The bound when `--per-binary` is not given.
const DEFAULT_PER_BINARY: Duration = Duration::from_secs(20 * 60);

/// One test executable cargo built.
struct TestBinary {
    /// The target's name and kind, as `cargo test` prints them.
    name: String,
    executable: PathBuf,
    /// Its package's folder: the working directory `cargo test` gives it.
    package_dir: PathBuf,
}

/// How one binary ended.
enum Outcome {
    Passed,
    Failed(String),
    TimedOut,
}

pub(crate) fn run(args: &[String]) -> Result<()> {
    let (per_binary, cargo_args) = parse(args)?;
    let binaries = build(&cargo_args)?;
    let expected = expected_binaries(&cargo_args)?;
    check_floor(binaries.len(), expected)?;
    let mut summary = Vec::new();
    for binary in &binaries {
        let started = Instant::now();
        let outcome = run_one(binary, per_binary)?;
        summary.push((binary, outcome, started.elapsed()));
    }
    eprintln!(
        "\nxtask test: {} binaries, at most {per_binary:?} each",
        binaries.len()
    );
    let mut failed = Vec::new();
    for (binary, outcome, took) in &summary {
        let what = match outcome {
            Outcome::Passed => "ok".to_string(),
            Outcome::Failed(status) => format!("FAILED ({status})"),
            Outcome::TimedOut => format!("TIMED OUT (killed after {per_binary:?})"),
        };
        eprintln!("  {:<48} {:>8.1?}  {what}", binary.name, took);
        if !matches!(outcome, Outcome::Passed) {
            failed.push(binary.name.clone());
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("test binaries that did not pass: {}", failed.join(", ")))
    }
}

fn parse(args: &[String]) -> Result<(Duration, Vec<String>)> {
    match args {
        [flag, value, rest @ ..] if flag == "--per-binary" => {
            let bound = humantime::parse_duration(value)
                .map_err(|e| format!("--per-binary {value}: {e} (write e.g. `15m`)"))?;
            Ok((bound, rest.to_vec()))
        }
        _ => Ok((DEFAULT_PER_BINARY, args.to_vec())),
    }
}

/// Builds the test binaries; each test executable with its package folder.
fn build(cargo_args: &[String]) -> Result<Vec<TestBinary>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .arg("test")
        .args(cargo_args)
        .args(["--no-run", "--message-format=json-render-diagnostics"])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo test --no-run: {e}"))?;
    if !output.status.success() {
        return Err(format!("cargo test --no-run failed with {}", output.status));
    }
    let mut binaries = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let is_test = message["reason"] == "compiler-artifact" && message["profile"]["test"] == true;
        let (Some(executable), Some(manifest)) =
            (message["executable"].as_str(), message["manifest_path"].as_str())
        else {
            continue;
        };
        if !is_test {
            continue;
        }
        let kind = message["target"]["kind"][0].as_str().unwrap_or("?");
        let target = message["target"]["name"].as_str().unwrap_or("?");
        binaries.push(TestBinary {
            name: format!("{target} ({kind})"),
            executable: PathBuf::from(executable),
            package_dir: Path::new(manifest)
                .parent()
                .ok_or_else(|| format!("{manifest} has no folder"))?
                .to_path_buf(),
        });
    }
    Ok(binaries)
}

/// How many test binaries `cargo test` with `cargo_args` must build: with
/// `--workspace --all-targets`, every library, binary, test and bench
/// target of the workspace's members (examples are built too, but not
/// counted: whether cargo runs them as tests depends on its version);
/// otherwise at least one.
fn expected_binaries(cargo_args: &[String]) -> Result<usize> {
    let has = |flag: &str| cargo_args.iter().any(|a| a == flag);
    if !(has("--workspace") && has("--all-targets")) {
        return Ok(1);
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    if !output.status.success() {
        return Err(format!("cargo metadata failed with {}", output.status));
    }
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("cargo metadata printed what is not JSON: {e}"))?;
    Ok(test_targets(&metadata))
}

/// The targets of `metadata`'s packages that `cargo test --all-targets`
/// builds as test binaries.
fn test_targets(metadata: &serde_json::Value) -> usize {
    let packages = metadata["packages"].as_array().map_or(&[][..], Vec::as_slice);
    packages
        .iter()
        .flat_map(|package| package["targets"].as_array().map_or(&[][..], Vec::as_slice))
        .filter(|target| {
            let kinds = target["kind"].as_array().map_or(&[][..], Vec::as_slice);
            let tested = target["test"].as_bool().unwrap_or(true);
            kinds.iter().any(|kind| match kind.as_str() {
                Some("lib" | "rlib" | "cdylib" | "dylib" | "staticlib" | "proc-macro" | "bin" | "test") => {
                    tested
                }
                Some("bench") => true,
                _ => false,
            })
        })
        .count()
}

/// Fails when the build gave fewer test binaries than `expected`.
fn check_floor(found: usize, expected: usize) -> Result<()> {
    if found < expected {
        return Err(format!(
            "cargo test --no-run built {found} test binaries, but the workspace defines {expected}: \
             nothing is run rather than a part of the tests (did cargo's JSON output change?)"
        ));
    }
    Ok(())
}

/// Runs one binary in a process group of its own, killing the whole group
/// (the servers its tests started too) when it outlasts `bound`.
fn run_one(binary: &TestBinary, bound: Duration) -> Result<Outcome> {
    eprintln!("\nxtask test: {} ({})", binary.name, binary.executable.display());
    let mut child = Command::new(&binary.executable)
        .current_dir(&binary.package_dir)
        .env("CARGO_MANIFEST_DIR", &binary.package_dir)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", binary.executable.display()))?;
    let started = Instant::now();
    loop {
        if let Some(status) = child
            .try_wait()
            .map_err(|e| format!("cannot wait for {}: {e}", binary.name))?
        {
            return Ok(if status.success() {
                Outcome::Passed
            } else {
                Outcome::Failed(status.to_string())
            });
        }
        if started.elapsed() > bound {
            eprintln!(
                "xtask test: {} still running after {bound:?}: killing it (the test libtest named \
                 `has been running for over 60 seconds` above is the one that hung)",
                binary.name
            );
            kill_group(child.id());
            let _ = child.wait();
            return Ok(Outcome::TimedOut);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// SIGTERM to the process group `pgid`, then SIGKILL 5 s later.
fn kill_group(pgid: u32) {
    let group = format!("-{pgid}");
    let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
    std::thread::sleep(Duration::from_secs(5));
    let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_refuses_fewer_binaries_than_expected() {
        assert!(check_floor(0, 1).is_err());
        let refused = check_floor(18, 19).unwrap_err();
        assert!(
            refused.contains("built 18 test binaries") && refused.contains("defines 19"),
            "{refused}"
        );
        assert!(check_floor(19, 19).is_ok());
        assert!(check_floor(20, 19).is_ok());
    }

    #[test]
    fn test_targets_counts_what_cargo_test_builds() {
        let metadata = serde_json::json!({"packages": [
            {"targets": [
                {"kind": ["cdylib", "rlib"], "test": true},
                {"kind": ["bench"], "test": false},
                {"kind": ["test"], "test": true},
                {"kind": ["custom-build"], "test": false},
                {"kind": ["example"], "test": false},
            ]},
            {"targets": [
                {"kind": ["bin"], "test": true},
                {"kind": ["lib"], "test": false},
                {"kind": ["example"], "test": true},
            ]},
        ]});
        // cdylib+rlib (one binary), the bench, the test, the bin.
        assert_eq!(test_targets(&metadata), 4);
    }
}
