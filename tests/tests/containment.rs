//! Misbehaving transforms are contained: the host neither crashes nor hangs,
//! each failure names its cause, the poisoned message is dead-lettered and
//! the rest of the batch goes on.

use std::sync::atomic::Ordering;
use std::time::Duration;

use iggy_connector_fluss_sink::TableSchema;
use iggy_connector_fluss_sink::{Limits, Transform, TransformError, TransformSpec};
use iggy_connector_fluss_sink::{MessageOutcome, TransformOutput};
use integration_tests::{component, rows_of, table, test_cache_dir, text_batch};

fn offsets_table() -> TableSchema {
    table("db.evil", &[("offset", "BIGINT", false)], &[])
}

fn evil(mode: &str, limits: Limits, extra: &[(&str, &str)]) -> Result<Transform, TransformError> {
    let mut spec = TransformSpec::new(component("evil"));
    spec.config = vec![("mode".into(), mode.into())];
    spec.config
        .extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    spec.limits = limits;
    spec.cache_dir = Some(test_cache_dir());
    Transform::load(&spec, &[offsets_table()])
}

/// Runs 7 messages with the poisoned one at index 4 and checks that only it
/// is dead-lettered; returns its reason.
fn poisoned_reason(t: &Transform) -> String {
    let out = t
        .process(&text_batch(&["a", "b", "c", "d", "poison", "e", "f"]))
        .unwrap();
    check_only_fourth_failed(&out)
}

fn check_only_fourth_failed(out: &TransformOutput) -> String {
    assert_eq!(out.outcomes.len(), 7);
    let healthy: Vec<u32> = rows_of(out).into_iter().map(|(m, _, _, _)| m).collect();
    assert_eq!(
        healthy,
        vec![0, 1, 2, 3, 5, 6],
        "every other message still becomes its row"
    );
    match &out.outcomes[4] {
        MessageOutcome::DeadLetter(reason) => reason.clone(),
        other => panic!("the poisoned message should be dead-lettered, got {other:?}"),
    }
}

fn quick() -> Limits {
    Limits {
        call_timeout: Duration::from_millis(200),
        ..Limits::default()
    }
}

#[test]
fn an_infinite_loop_hits_the_cpu_deadline() {
    let t = evil("loop", quick(), &[]).unwrap();
    let reason = poisoned_reason(&t);
    assert!(reason.contains("CPU deadline of 200ms"), "{reason}");
    assert!(t.stats().faults.load(Ordering::Relaxed) >= 2);
}

/// A call cut off at its deadline counts as taking at least the deadline:
/// the transform's pace slows to it at once, so auto-sized chunks shrink
/// to the 500-message floor before the next batch (no call was measured
/// before, so only the deadline can have set the pace).
#[test]
fn a_call_past_its_deadline_slows_the_transforms_pace_to_it() {
    let t = evil("loop", quick(), &[]).unwrap();
    assert_eq!(t.messages_per_call(), None, "no call yet");
    let out = t.process(&text_batch(&["poison"])).unwrap();
    assert!(matches!(out.outcomes[0], MessageOutcome::DeadLetter(_)));
    assert_eq!(
        t.messages_per_call(),
        Some(0),
        "a message that takes at least 200 ms: none fits in 50 ms"
    );
}

#[test]
fn a_memory_bomb_hits_the_memory_cap() {
    let t = evil(
        "memory-bomb",
        Limits {
            max_memory: 32 << 20,
            recycle_memory: 16 << 20,
            ..quick()
        },
        &[],
    )
    .unwrap();
    let reason = poisoned_reason(&t);
    assert!(reason.contains("memory limit exceeded"), "{reason}");
    assert!(reason.contains("33554432"), "names the cap: {reason}");
}

#[test]
fn deep_recursion_overflows_the_stack_cap() {
    let t = evil(
        "recursion",
        Limits {
            max_stack: 256 << 10,
            ..quick()
        },
        &[],
    )
    .unwrap();
    let reason = poisoned_reason(&t);
    assert!(reason.contains("overflowed its 256 KiB stack"), "{reason}");
}

#[test]
fn a_trap_on_one_message_is_isolated() {
    let t = evil("trap", quick(), &[]).unwrap();
    let created = || t.stats().instances_created.load(Ordering::Relaxed);
    let faults = || t.stats().faults.load(Ordering::Relaxed);
    let before = (created(), faults());
    let reason = poisoned_reason(&t);
    assert!(
        reason.contains("trapped") && reason.contains("unreachable"),
        "{reason}"
    );
    let (made, trapped) = (created() - before.0, faults() - before.1);
    assert!(trapped >= 1, "the poisoned message trapped");
    // The pool held the instance `load` made: without a fresh one after
    // each trap, `made` would be 0.
    assert!(
        made >= trapped,
        "every instance that trapped ({trapped}) is replaced, never reused: {made} made"
    );
    let out = t.process(&text_batch(&["x", "y"])).unwrap();
    assert_eq!(out.rows.len(), 2, "a fresh instance serves the next batch");
}

#[test]
fn a_panic_carries_its_message() {
    let t = evil("panic", quick(), &[]).unwrap();
    let reason = poisoned_reason(&t);
    assert!(reason.contains("evil panic on offset 4"), "{reason}");
}

#[test]
fn the_wrong_number_of_outcomes_is_caught() {
    let t = evil("wrong-count", quick(), &[]).unwrap();
    let reason = poisoned_reason(&t);
    assert!(reason.contains("returned 0 outcomes for 1 messages"), "{reason}");
}

#[test]
fn a_huge_output_hits_the_output_cap() {
    let limits = Limits {
        max_output_bytes: 1 << 20,
        ..quick()
    };
    let t = evil("huge-output", limits, &[("huge_bytes", "4194304")]).unwrap();
    let reason = poisoned_reason(&t);
    assert!(
        reason.contains("over the cap of 1048576 (transform.max_output_bytes)"),
        "{reason}"
    );
}

#[test]
fn too_many_rows_hit_the_row_cap() {
    let limits = Limits {
        max_rows_per_batch: 3,
        ..quick()
    };
    let t = evil("none", limits, &[]).unwrap();
    let calls = |t: &Transform| t.stats().calls.load(Ordering::Relaxed);
    let faults = |t: &Transform| t.stats().faults.load(Ordering::Relaxed);
    let out = t.process(&text_batch(&["a", "b", "c", "d"])).unwrap();
    // The whole batch's 4 rows are over the cap of 3: that call is refused
    // (a fault), and bisection finds halves small enough to pass it.
    assert_eq!(out.rows.len(), 4);
    assert!(out.outcomes.iter().all(|o| *o == MessageOutcome::Rows(1)));
    let (after_cap, faults_at_cap) = (calls(&t), faults(&t));
    assert!(faults_at_cap >= 1, "the call of 4 rows hit the cap");
    assert!(
        after_cap >= 3,
        "the call of 4, then its halves: {after_cap} calls"
    );
    // Within the cap: one call more, no fault more.
    let out = t.process(&text_batch(&["a", "b"])).unwrap();
    assert_eq!(out.rows.len(), 2);
    assert_eq!((calls(&t), faults(&t)), (after_cap + 1, faults_at_cap));
}

#[test]
fn a_value_of_the_wrong_type_is_dead_lettered() {
    let t = evil("type-mismatch", quick(), &[]).unwrap();
    let mut out = t
        .process(&text_batch(&["a", "b", "c", "d", "poison", "e", "f"]))
        .unwrap();
    // Checked where rows are used (the writer, the CLI), with the same check.
    let table = offsets_table();
    out.check_rows(|_| Some(&table));
    let reason = check_only_fourth_failed(&out);
    assert_eq!(
        reason,
        "row 1 for table db.evil: column `offset` is BIGINT but the row has a STRING value"
    );
    assert_eq!(
        t.stats().faults.load(Ordering::Relaxed),
        0,
        "a schema mismatch is not a fault"
    );
}

#[test]
fn malformed_row_bytes_are_isolated() {
    let t = evil("bad-encoding", quick(), &[]).unwrap();
    let reason = poisoned_reason(&t);
    assert!(
        reason.contains("malformed rows") && reason.contains("unknown cell tag 200"),
        "{reason}"
    );
}

#[test]
fn an_always_failing_transform_stops_bisecting_at_the_budget() {
    let limits = Limits {
        max_faults_per_batch: 3,
        ..quick()
    };
    let t = evil("trap", limits, &[("trigger", "")]).unwrap();
    // Every message is empty, so every message traps.
    let batch = text_batch(&[""; 64]);
    let out = t.process(&batch).unwrap();
    assert_eq!(out.outcomes.len(), 64);
    assert!(
        out.outcomes
            .iter()
            .all(|o| matches!(o, MessageOutcome::DeadLetter(_)))
    );
    let calls = t.stats().calls.load(Ordering::Relaxed);
    assert!(
        calls <= 2 + 2 * 3 + 2,
        "bisection is bounded by the budget, made {calls} calls"
    );
    assert!(
        out.outcomes
            .iter()
            .any(|o| matches!(o, MessageOutcome::DeadLetter(r) if r.starts_with("not isolated")))
    );
}

/// Guests that wait instead of spinning: the epoch deadline cannot interrupt
/// a blocking host call, so WASI's clocks never block (`transform::clocks`).
/// The guests are C (wasi-libc's `nanosleep` and `clock_gettime` through the
/// preview-1 adapter) and Python (`time.sleep`, `time.monotonic`). Rust
/// guests built here target wasm32-unknown-unknown, whose std has no clock
/// at all; built for wasm32-wasip2 they reach the same WASI clock.
mod blocking_guests {
    use super::*;
    use std::time::Instant;

    /// The longest a batch with one poisoned message may take under
    /// `quick()` limits: a first call, a retry, a bisection of a few calls,
    /// each cut at 200 ms, plus slack for a loaded machine.
    const BOUND: Duration = Duration::from_secs(5);

    fn waiter(language: &str, mode: &str) -> Transform {
        let mut spec = TransformSpec::new(component(&format!("{language}-evil-sleep")));
        spec.config = vec![("mode".into(), mode.into())];
        spec.limits = quick();
        spec.cache_dir = Some(test_cache_dir());
        Transform::load(&spec, &[offsets_table()]).unwrap()
    }

    /// A guest sleeping 120 s on the poisoned message returns at once.
    fn sleeps_return_at_once(language: &str) {
        let t = waiter(language, "sleep");
        let started = Instant::now();
        let out = t
            .process(&text_batch(&["a", "b", "c", "d", "poison", "e", "f"]))
            .unwrap();
        let took = started.elapsed();
        assert!(
            took < BOUND,
            "{language}: a 120 s sleep held the call for {took:?}"
        );
        let made: Vec<u32> = rows_of(&out).into_iter().map(|(m, _, _, _)| m).collect();
        assert_eq!(
            made,
            vec![0, 1, 2, 3, 4, 5, 6],
            "{language}: the sleep returned and the row was made"
        );
        assert_eq!(t.stats().faults.load(Ordering::Relaxed), 0);
    }

    /// A guest reading the clock until 120 s have passed spins, and meets
    /// the CPU deadline like any loop.
    fn clock_waits_hit_the_cpu_deadline(language: &str) {
        let t = waiter(language, "clock-spin");
        let started = Instant::now();
        let reason = poisoned_reason(&t);
        let took = started.elapsed();
        assert!(reason.contains("CPU deadline of 200ms"), "{language}: {reason}");
        assert!(
            took < BOUND,
            "{language}: the clock loop held the call for {took:?}"
        );
    }

    #[test]
    fn a_c_guest_that_sleeps_returns_at_once() {
        sleeps_return_at_once("c");
    }

    #[test]
    fn a_python_guest_that_sleeps_returns_at_once() {
        sleeps_return_at_once("python");
    }

    #[test]
    fn a_c_guest_waiting_on_the_clock_hits_the_cpu_deadline() {
        clock_waits_hit_the_cpu_deadline("c");
    }

    #[test]
    fn a_python_guest_waiting_on_the_clock_hits_the_cpu_deadline() {
        clock_waits_hit_the_cpu_deadline("python");
    }
}

#[test]
fn an_init_error_fails_the_load_with_the_guest_message() {
    let err = evil("init-error", quick(), &[]).err().unwrap();
    assert!(matches!(err, TransformError::Init { .. }));
    assert!(
        err.to_string()
            .contains("evil init refuses: the config asked for init-error"),
        "{err}"
    );
}

#[test]
fn guest_logs_do_not_disturb_processing() {
    let t = evil("log", quick(), &[]).unwrap();
    let out = t.process(&text_batch(&["a", "b"])).unwrap();
    assert_eq!(out.rows.len(), 2);
}

mod load_errors {
    use super::*;

    fn load_bytes(bytes: &[u8]) -> TransformError {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.wasm");
        std::fs::write(&path, bytes).unwrap();
        let mut spec = TransformSpec::new(&path);
        spec.cache_dir = None;
        Transform::load(&spec, &[offsets_table()])
            .err()
            .expect("load should fail")
    }

    #[test]
    fn a_missing_file_is_named() {
        let mut spec = TransformSpec::new("/nowhere/t.wasm");
        spec.cache_dir = None;
        let err = Transform::load(&spec, &[offsets_table()]).err().unwrap();
        assert!(matches!(err, TransformError::Read { .. }));
        assert!(
            err.to_string()
                .starts_with("cannot read transform /nowhere/t.wasm"),
            "{err}"
        );
    }

    #[test]
    fn garbage_is_not_a_component() {
        let err = load_bytes(b"hello, world");
        assert!(
            err.to_string()
                .contains("does not start with the WebAssembly magic bytes"),
            "{err}"
        );
    }

    #[test]
    fn a_core_module_is_not_a_component() {
        let err = load_bytes(&wat::parse_str("(module)").unwrap());
        assert!(matches!(err, TransformError::NotAComponent { .. }));
        assert!(err.to_string().contains("core WebAssembly module"), "{err}");
    }

    #[test]
    fn a_component_without_the_exports_is_the_wrong_world() {
        let err = load_bytes(&wat::parse_str("(component)").unwrap());
        assert!(matches!(err, TransformError::WrongWorld { .. }));
        assert!(err.to_string().contains("exports no function `init`"), "{err}");
    }

    #[test]
    fn a_component_for_another_wit_version_is_refused() {
        let err = load_bytes(
            &wat::parse_str(r#"(component (import "iggy:fluss-sink/host@0.1.0" (instance)))"#).unwrap(),
        );
        assert!(matches!(err, TransformError::IncompatibleVersion { .. }));
        assert!(
            err.to_string()
                .contains("built against iggy:fluss-sink/host@0.1.0"),
            "{err}"
        );
        assert!(err.to_string().contains("iggy:fluss-sink@0.3.0"), "{err}");
    }

    #[test]
    fn a_component_importing_what_the_host_lacks_is_the_wrong_world() {
        let err = load_bytes(
            &wat::parse_str(r#"(component (import "acme:net/http@1.0.0" (instance (export "get" (func)))))"#)
                .unwrap(),
        );
        assert!(matches!(err, TransformError::WrongWorld { .. }), "{err}");
        assert!(err.to_string().contains("acme:net/http"), "{err}");
    }

    #[test]
    fn the_cache_serves_the_second_load() {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = TransformSpec::new(component("noop"));
        spec.cache_dir = Some(dir.path().to_path_buf());
        let first = Transform::load(&spec, &[offsets_table()]).unwrap();
        let second = Transform::load(&spec, &[offsets_table()]).unwrap();
        use iggy_connector_fluss_sink::LoadSource;
        assert_eq!(first.load_info().source, LoadSource::Compiled);
        assert_eq!(second.load_info().source, LoadSource::Cached);
        // A corrupt entry is compiled again, not trusted.
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            std::fs::write(entry.unwrap().path(), b"junk").unwrap();
        }
        let third = Transform::load(&spec, &[offsets_table()]).unwrap();
        assert_eq!(third.load_info().source, LoadSource::Compiled);
        assert!(third.process(&text_batch(&["a"])).unwrap().outcomes.len() == 1);
    }

    /// A cached artifact is native code: a folder others can write to is refused.
    #[test]
    fn a_world_writable_cache_folder_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let mut spec = TransformSpec::new(component("noop"));
        spec.cache_dir = Some(dir.path().to_path_buf());
        let err = Transform::load(&spec, &[offsets_table()]).err().expect("refused");
        assert!(matches!(err, TransformError::Cache(_)), "{err}");
        assert!(err.to_string().contains("is not private"), "{err}");
        assert!(err.to_string().contains("mode 0777"), "{err}");
    }

    /// An artifact planted (or left) writable by others is compiled over, not loaded.
    #[test]
    fn a_planted_artifact_others_could_write_is_not_loaded() {
        use iggy_connector_fluss_sink::LoadSource;
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let mut spec = TransformSpec::new(component("noop"));
        spec.cache_dir = Some(dir.path().to_path_buf());
        Transform::load(&spec, &[offsets_table()]).unwrap();
        let artifact = std::fs::read_dir(dir.path())
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        std::fs::set_permissions(&artifact, std::fs::Permissions::from_mode(0o666)).unwrap();
        let again = Transform::load(&spec, &[offsets_table()]).unwrap();
        assert_eq!(again.load_info().source, LoadSource::Compiled);
        let mode = std::fs::metadata(&artifact).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the artifact is written again, private");
    }
}
