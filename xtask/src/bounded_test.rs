//! `cargo xtask test [--per-binary DURATION] [--jobs N] [--alone PATTERN]...
//! [--one-at-a-time PATTERN]... [CARGO TEST ARGS...]`: builds the test
//! binaries with `cargo test --no-run`, then runs each one in its package's
//! folder (as `cargo test` does) with a time bound, so that a hung test
//! fails CI within minutes and is named: libtest prints `test X has been
//! running for over 60 seconds` for it, and this task names the binary it
//! killed. Up to `--jobs` binaries run at once (`test_lanes` says which may
//! run beside which). Every binary runs even after one fails; the summary
//! lists each with its time. A build that yields fewer test binaries than
//! the workspace defines (`cargo metadata`) fails before anything runs, so
//! a change in cargo's output cannot pass CI with nothing tested.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::Result;
use crate::test_lanes::{Lanes, Outcome, run_all};

/// The bound when `--per-binary` is not given.
const DEFAULT_PER_BINARY: Duration = Duration::from_secs(20 * 60);

/// One test executable cargo built.
pub(crate) struct TestBinary {
    /// The target's name and kind, as `cargo test` prints them.
    pub(crate) name: String,
    /// The target's name alone: what `--alone` and `--one-at-a-time` match.
    pub(crate) target: String,
    pub(crate) executable: PathBuf,
    /// Its package's folder: the working directory `cargo test` gives it.
    pub(crate) package_dir: PathBuf,
}

impl TestBinary {
    /// A file name for its captured output: target and kind.
    pub(crate) fn file_stem(&self) -> String {
        self.name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    }
}

/// What `cargo xtask test` was asked, before the arguments for cargo.
#[derive(Debug, PartialEq)]
struct Options {
    per_binary: Duration,
    lanes: Lanes,
    cargo_args: Vec<String>,
}

pub(crate) fn run(args: &[String]) -> Result<()> {
    let options = parse(args)?;
    let binaries = build(&options.cargo_args)?;
    let expected = expected_binaries(&options.cargo_args)?;
    check_floor(binaries.len(), expected)?;
    let log_dir = crate::repo_root().join("target/xtask-test");
    let summary = run_all(&binaries, &options.lanes, options.per_binary, &log_dir)?;
    eprintln!(
        "\nxtask test: {} binaries, at most {:?} each, {} at a time",
        binaries.len(),
        options.per_binary,
        options.lanes.jobs
    );
    let mut failed = Vec::new();
    for (binary, outcome, took) in &summary {
        let what = match outcome {
            Outcome::Passed => "ok".to_string(),
            Outcome::Failed(status) => format!("FAILED ({status})"),
            Outcome::TimedOut => format!("TIMED OUT (killed after {:?})", options.per_binary),
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

/// Reads this task's flags, in any order, up to the first argument that is
/// not one of them: the rest is for `cargo test`.
fn parse(args: &[String]) -> Result<Options> {
    let mut options = Options {
        per_binary: DEFAULT_PER_BINARY,
        lanes: Lanes {
            jobs: 1,
            ..Lanes::default()
        },
        cargo_args: Vec::new(),
    };
    let mut rest = args;
    loop {
        match rest {
            [flag, value, tail @ ..] if flag == "--per-binary" => {
                options.per_binary = humantime::parse_duration(value)
                    .map_err(|e| format!("--per-binary {value}: {e} (write e.g. `15m`)"))?;
                rest = tail;
            }
            [flag, value, tail @ ..] if flag == "--jobs" => {
                options.lanes.jobs = match value.parse::<usize>() {
                    Ok(jobs) if jobs > 0 => jobs,
                    _ => return Err(format!("--jobs {value}: give a whole number of at least 1")),
                };
                rest = tail;
            }
            [flag, value, tail @ ..] if flag == "--alone" => {
                options.lanes.alone.push(value.clone());
                rest = tail;
            }
            [flag, value, tail @ ..] if flag == "--one-at-a-time" => {
                options.lanes.one_at_a_time.push(value.clone());
                rest = tail;
            }
            [flag] if ["--per-binary", "--jobs", "--alone", "--one-at-a-time"].contains(&flag.as_str()) => {
                return Err(format!("{flag} needs a value"));
            }
            _ => break,
        }
    }
    options.cargo_args = rest.to_vec();
    Ok(options)
}

/// Builds the test binaries; each test executable with its package folder.
fn build(cargo_args: &[String]) -> Result<Vec<TestBinary>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_by_cargo_run) {
            command.env_remove(name);
        }
    }
    let output = command
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
            target: target.to_string(),
            executable: PathBuf::from(executable),
            package_dir: Path::new(manifest)
                .parent()
                .ok_or_else(|| format!("{manifest} has no folder"))?
                .to_path_buf(),
        });
    }
    Ok(binaries)
}

/// Whether `name` is one of the variables `cargo run` sets for xtask itself
/// (its package's name, version and folder). Build scripts such as ring's
/// ask to be rerun when these change, so a `cargo test` that inherits them
/// would rebuild ring, rustls, fluss-rs and the plugin that the build before
/// it made without them.
fn set_by_cargo_run(name: &str) -> bool {
    ["CARGO_PKG_", "CARGO_MANIFEST_", "CARGO_CRATE_", "CARGO_BIN_"]
        .iter()
        .any(|prefix| name.starts_with(prefix))
        || ["CARGO_PRIMARY_PACKAGE", "OUT_DIR"].contains(&name)
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

    #[test]
    fn flags_come_in_any_order_before_cargo_s_arguments() {
        let args: Vec<String> = [
            "--jobs",
            "2",
            "--alone",
            "failover",
            "--per-binary",
            "15m",
            "--one-at-a-time",
            "iggy_runtime*",
            "--workspace",
            "--alone",
            "not-ours",
        ]
        .map(String::from)
        .to_vec();
        let options = parse(&args).unwrap();
        assert_eq!(options.per_binary, Duration::from_secs(15 * 60));
        assert_eq!(
            options.lanes,
            Lanes {
                jobs: 2,
                alone: vec!["failover".into()],
                one_at_a_time: vec!["iggy_runtime*".into()]
            }
        );
        assert_eq!(options.cargo_args, ["--workspace", "--alone", "not-ours"]);
    }

    #[test]
    fn cargo_run_s_package_variables_are_not_passed_on_but_cargo_s_settings_are() {
        for name in [
            "CARGO_PKG_NAME",
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "CARGO_CRATE_NAME",
            "OUT_DIR",
        ] {
            assert!(set_by_cargo_run(name), "{name}");
        }
        for name in [
            "CARGO",
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_INCREMENTAL",
            "CARGO_PROFILE_DEV_OPT_LEVEL",
        ] {
            assert!(!set_by_cargo_run(name), "{name}");
        }
    }

    #[test]
    fn a_flag_without_its_value_or_a_bad_value_is_refused() {
        let refused =
            |args: &[&str]| parse(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>()).unwrap_err();
        assert!(refused(&["--jobs"]).contains("needs a value"));
        assert!(refused(&["--jobs", "0"]).contains("at least 1"));
        assert!(refused(&["--per-binary", "soon"]).contains("--per-binary soon"));
    }
}
