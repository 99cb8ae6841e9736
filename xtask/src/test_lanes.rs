//! Runs the test binaries `bounded_test` built, up to `--jobs` at a time,
//! each under the per-binary bound. Most of the suite waits on Fluss, on
//! deadlines and on restarts rather than on the CPU, so two lanes halve
//! the wall time without two binaries competing for what one of them
//! measures: a binary named by `--alone` runs with nothing beside it (the
//! failover test compares recovery times), and binaries matching one
//! `--one-at-a-time` pattern never overlap (the Iggy server's ports are
//! fixed, so only one of its binaries can start it).
//!
//! With more than one lane each binary's output goes to a file and is
//! printed whole when it ends, so the log reads one binary at a time.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::Result;
use crate::bounded_test::TestBinary;

/// Which binaries may run beside which.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Lanes {
    /// How many binaries run at once (at least 1).
    pub(crate) jobs: usize,
    /// Patterns of target names that run with nothing beside them.
    pub(crate) alone: Vec<String>,
    /// Patterns whose matching targets never run at the same time as each
    /// other (one group per pattern).
    pub(crate) one_at_a_time: Vec<String>,
}

/// How one binary ended.
pub(crate) enum Outcome {
    Passed,
    Failed(String),
    TimedOut,
}

/// Whether `target` matches `pattern`: one of its comma-separated
/// alternatives, each the same name or, ending in `*`, a name starting
/// with what comes before it.
fn matches(pattern: &str, target: &str) -> bool {
    pattern
        .split(',')
        .any(|alternative| match alternative.strip_suffix('*') {
            Some(prefix) => target.starts_with(prefix),
            None => target == alternative,
        })
}

impl Lanes {
    fn is_alone(&self, target: &str) -> bool {
        self.alone.iter().any(|p| matches(p, target))
    }

    fn conflict(&self, a: &str, b: &str) -> bool {
        self.one_at_a_time.iter().any(|p| matches(p, a) && matches(p, b))
    }

    /// The index in `pending` of the binary to start now, given the targets
    /// `running`; `None` when every lane is taken or nothing may start.
    pub(crate) fn next(&self, pending: &[&str], running: &[&str]) -> Option<usize> {
        if running.len() >= self.jobs.max(1) || running.iter().any(|r| self.is_alone(r)) {
            return None;
        }
        pending.iter().position(|candidate| {
            if self.is_alone(candidate) {
                running.is_empty()
            } else {
                !running.iter().any(|r| self.conflict(candidate, r))
            }
        })
    }

    /// Where a target comes in the order binaries are offered: those that
    /// run alone first (while nothing else has started), then those of a
    /// one-at-a-time group (a chain of them is the longest path through the
    /// lanes, so it starts early), then the others.
    fn rank(&self, target: &str) -> u8 {
        if self.is_alone(target) {
            0
        } else if self.one_at_a_time.iter().any(|p| matches(p, target)) {
            1
        } else {
            2
        }
    }

    /// `binaries` in the order to offer them: by [`Lanes::rank`], each
    /// rank as cargo listed them.
    fn order<'a>(&self, binaries: &'a [TestBinary]) -> Vec<&'a TestBinary> {
        let mut ordered: Vec<&TestBinary> = binaries.iter().collect();
        ordered.sort_by_key(|b| self.rank(&b.target));
        ordered
    }
}

/// One binary started and not yet reaped.
struct Started<'a> {
    binary: &'a TestBinary,
    child: Child,
    at: Instant,
    /// Where its output goes, when it is not printed as it comes.
    log: Option<PathBuf>,
}

/// Runs every binary and returns how each ended and how long it took, in
/// the order they ended.
pub(crate) fn run_all<'a>(
    binaries: &'a [TestBinary],
    lanes: &Lanes,
    bound: Duration,
    log_dir: &std::path::Path,
) -> Result<Vec<(&'a TestBinary, Outcome, Duration)>> {
    let capture = lanes.jobs > 1;
    if capture {
        std::fs::create_dir_all(log_dir).map_err(|e| format!("cannot create {}: {e}", log_dir.display()))?;
    }
    let mut pending = lanes.order(binaries);
    let mut running: Vec<Started<'a>> = Vec::new();
    let mut ended = Vec::new();
    while !pending.is_empty() || !running.is_empty() {
        loop {
            let pending_targets: Vec<&str> = pending.iter().map(|b| b.target.as_str()).collect();
            let running_targets: Vec<&str> = running.iter().map(|s| s.binary.target.as_str()).collect();
            let Some(index) = lanes.next(&pending_targets, &running_targets) else {
                break;
            };
            let binary = pending.remove(index);
            let log = capture.then(|| log_dir.join(format!("{}.log", binary.file_stem())));
            running.push(start(binary, log)?);
        }
        let mut still = Vec::with_capacity(running.len());
        for mut started in running {
            let took = started.at.elapsed();
            let outcome = match started
                .child
                .try_wait()
                .map_err(|e| format!("cannot wait for {}: {e}", started.binary.name))?
            {
                Some(status) => Some(outcome_of(status)),
                None if took > bound => {
                    eprintln!(
                        "xtask test: {} still running after {bound:?}: killing it (the test libtest \
                         named `has been running for over 60 seconds` is the one that hung)",
                        started.binary.name
                    );
                    dump_stacks(started.child.id(), started.log.as_deref());
                    kill_group(started.child.id());
                    let _ = started.child.wait();
                    Some(Outcome::TimedOut)
                }
                None => None,
            };
            match outcome {
                Some(outcome) => {
                    report(&started, took)?;
                    ended.push((started.binary, outcome, took));
                }
                None => still.push(started),
            }
        }
        running = still;
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(ended)
}

/// Starts `binary` in a process group of its own (so that a kill takes
/// the servers its tests started too), its output to `log` when given.
fn start(binary: &TestBinary, log: Option<PathBuf>) -> Result<Started<'_>> {
    let mut command = Command::new(&binary.executable);
    command
        .current_dir(&binary.package_dir)
        .env("CARGO_MANIFEST_DIR", &binary.package_dir)
        .process_group(0);
    match &log {
        Some(path) => {
            let file = File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
            let copy = file
                .try_clone()
                .map_err(|e| format!("cannot share {}: {e}", path.display()))?;
            command.stdout(Stdio::from(file)).stderr(Stdio::from(copy));
            eprintln!("xtask test: started {}", binary.name);
        }
        None => eprintln!("\nxtask test: {} ({})", binary.name, binary.executable.display()),
    }
    let child = command
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", binary.executable.display()))?;
    Ok(Started {
        binary,
        child,
        at: Instant::now(),
        log,
    })
}

/// Prints a captured binary's output whole, under its name.
fn report(started: &Started<'_>, took: Duration) -> Result<()> {
    let Some(path) = &started.log else {
        return Ok(());
    };
    let output = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    eprintln!(
        "\nxtask test: {} ({}), ended after {took:.1?}\n{output}",
        started.binary.name,
        started.binary.executable.display()
    );
    Ok(())
}

fn outcome_of(status: ExitStatus) -> Outcome {
    if status.success() {
        Outcome::Passed
    } else {
        Outcome::Failed(status.to_string())
    }
}

/// How long gdb gets to write a hung process's stacks.
const STACKS_LIMIT: Duration = Duration::from_secs(120);

/// Writes the stack of every thread of the hung process `pid` (gdb, when
/// the machine has it) into its log, or to stderr when it has none, so that
/// a hang says where it waited. Bounded: gdb gets [`STACKS_LIMIT`].
fn dump_stacks(pid: u32, log: Option<&std::path::Path>) {
    let pid = pid.to_string();
    let gdb = ["gdb", "-p", &pid, "-batch", "-ex", "thread apply all bt 40"];
    let text = match output_within(STACKS_LIMIT, &gdb) {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
        Ok(out) if out.status.code() == Some(TIMED_OUT) => {
            format!("(no stacks: gdb did not end within {STACKS_LIMIT:?})\n")
        }
        Ok(out) => format!(
            "(no stacks: gdb ended with {}: {})\n",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => format!("(no stacks: cannot run gdb: {e})\n"),
    };
    let text = format!("\nxtask test: the stacks of process {pid} when it was killed:\n{text}");
    match log.map(|path| File::options().append(true).open(path)) {
        Some(Ok(mut file)) => {
            let _ = std::io::Write::write_all(&mut file, text.as_bytes());
        }
        _ => eprintln!("{text}"),
    }
}

/// The exit code of `timeout` when the command ran out of time.
const TIMED_OUT: i32 = 124;

/// Runs `command` (program and arguments) and collects its output; past
/// `limit` it is killed (`timeout`, which then exits with [`TIMED_OUT`]).
fn output_within(limit: Duration, command: &[&str]) -> std::io::Result<std::process::Output> {
    Command::new("timeout")
        .arg("--kill-after=5")
        .arg(format!("{}", limit.as_secs_f64()))
        .args(command)
        .stdin(Stdio::null())
        .output()
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
    fn a_hung_process_s_stacks_go_into_its_log() {
        let mut hung = Command::new("sleep").arg("60").spawn().unwrap();
        let log = std::env::temp_dir().join(format!("xtask-stacks-{}.log", std::process::id()));
        std::fs::write(&log, "before\n").unwrap();
        dump_stacks(hung.id(), Some(&log));
        let _ = hung.kill();
        let _ = hung.wait();
        let text = std::fs::read_to_string(&log).unwrap();
        let _ = std::fs::remove_file(&log);
        assert!(text.starts_with("before\n"), "the log is appended to: {text}");
        assert!(text.contains(&format!("the stacks of process {} when it was killed", hung.id())));
        let has_gdb = Command::new("gdb")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if has_gdb {
            assert!(text.contains("#0 "), "gdb's frames: {text}");
        } else {
            assert!(text.contains("(no stacks: "), "why there are none: {text}");
        }
    }

    #[test]
    fn a_debugger_that_never_ends_is_stopped_at_its_limit() {
        let started = Instant::now();
        let out = output_within(Duration::from_millis(500), &["sleep", "60"]).unwrap();
        assert_eq!(out.status.code(), Some(TIMED_OUT), "{:?}", out.status);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "a command past its limit of 0.5 s ran {:?}",
            started.elapsed()
        );
    }

    fn lanes() -> Lanes {
        Lanes {
            jobs: 2,
            alone: vec!["failover".into()],
            one_at_a_time: vec!["iggy_runtime*".into()],
        }
    }

    #[test]
    fn a_free_lane_takes_the_first_binary_that_may_start() {
        let lanes = lanes();
        assert_eq!(lanes.next(&["spool", "faults"], &[]), Some(0));
        assert_eq!(lanes.next(&["spool", "faults"], &["chunks"]), Some(0));
        assert_eq!(
            lanes.next(&["spool"], &["chunks", "faults"]),
            None,
            "both lanes taken"
        );
    }

    #[test]
    fn an_alone_binary_starts_only_on_an_idle_runner_and_keeps_it_to_itself() {
        let lanes = lanes();
        assert_eq!(lanes.next(&["failover", "spool"], &["chunks"]), Some(1));
        assert_eq!(lanes.next(&["failover"], &["chunks"]), None);
        assert_eq!(lanes.next(&["failover", "spool"], &[]), Some(0));
        assert_eq!(lanes.next(&["spool"], &["failover"]), None);
    }

    #[test]
    fn binaries_of_one_group_never_overlap_but_run_beside_others() {
        let lanes = lanes();
        assert_eq!(
            lanes.next(
                &["iggy_runtime_spool", "iggy_runtime", "spool"],
                &["iggy_runtime_delivery"]
            ),
            Some(2)
        );
        assert_eq!(lanes.next(&["iggy_runtime"], &["spool"]), Some(0));
        assert!(!lanes.conflict("iggy_runtime", "spool"));
        assert!(lanes.conflict("iggy_runtime", "iggy_runtime_spool"));
    }

    #[test]
    fn one_lane_runs_one_binary_at_a_time_whatever_the_rules() {
        let lanes = Lanes {
            jobs: 1,
            ..Lanes::default()
        };
        assert_eq!(lanes.next(&["a", "b"], &[]), Some(0));
        assert_eq!(lanes.next(&["b"], &["a"]), None);
        let zero = Lanes {
            jobs: 0,
            ..Lanes::default()
        };
        assert_eq!(zero.next(&["a"], &[]), Some(0), "0 is taken as 1");
    }

    #[test]
    fn alone_binaries_are_offered_first_then_the_groups_then_the_rest() {
        let lanes = lanes();
        let mut targets = [
            "cli",
            "iggy_runtime_delivery",
            "spool",
            "failover",
            "iggy_runtime",
        ];
        targets.sort_by_key(|t| lanes.rank(t));
        assert_eq!(
            targets,
            [
                "failover",
                "iggy_runtime_delivery",
                "iggy_runtime",
                "cli",
                "spool"
            ]
        );
    }

    #[test]
    fn a_pattern_is_names_or_prefixes() {
        assert!(matches("failover", "failover"));
        assert!(!matches("failover", "failover_more"));
        assert!(matches("iggy_*", "iggy_runtime"));
        assert!(!matches("iggy_*", "spool"));
        assert!(matches("iggy_*,runtime", "runtime"));
        assert!(matches("iggy_*,runtime", "iggy_runtime_spool"));
        assert!(!matches("iggy_*,runtime", "runtime_capture"));
    }

    #[test]
    fn the_alternatives_of_one_pattern_are_one_group() {
        let lanes = Lanes {
            jobs: 2,
            alone: vec![],
            one_at_a_time: vec!["iggy_runtime*,runtime".into()],
        };
        assert_eq!(lanes.next(&["runtime", "spool"], &["iggy_runtime"]), Some(1));
    }
}
