//! The `fluss-sink` binary as a transform author runs it.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn fluss_sink(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_fluss-sink"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("run fluss-sink");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn inputs() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("schema.toml"),
        "table = \"shop.orders\"\ncolumns = [{ name = \"tenant\", type = \"STRING\" }, { name = \"v\", type = \"INT\" }]\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("m.jsonl"),
        "{\"tenant\":\"acme\",\"v\":1}\n{\"tenant\":\"globex\",\"v\":\"two\"}\n{\"v\":3}\n",
    )
    .unwrap();
    dir
}

#[test]
fn dry_run_prints_each_outcome_as_json() {
    let dir = inputs();
    let (schema, input) = (dir.path().join("schema.toml"), dir.path().join("m.jsonl"));
    let component = repo().join("target/wasm-transforms/tenant-router.wasm");
    assert!(component.exists(), "run `cargo xtask build-transforms` first");
    let (code, out, err) = fluss_sink(&[
        "dry-run",
        "--input",
        input.to_str().unwrap(),
        "--schema",
        schema.to_str().unwrap(),
        "--transform",
        component.to_str().unwrap(),
        "--set",
        "prefix=t_",
        "--json",
        "--fail-on-dead-letter",
    ]);
    let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(lines[0]["rows"][0]["table"], "shop.t_acme");
    assert_eq!(lines[0]["rows"][0]["cells"]["v"], 1);
    assert_eq!(lines[1]["outcome"], "dead_letter");
    assert_eq!(lines[1]["reason"], "column `v` (INT): \"two\" is not a INT");
    assert_eq!(
        lines[2]["reason"],
        "no tenant: neither a `tenant` field nor header"
    );
    assert_eq!(code, 1, "--fail-on-dead-letter");
    assert!(
        err.contains("3 messages: 1 became 1 rows, 0 filtered, 2 dead-lettered"),
        "{err}"
    );
}

#[test]
fn dry_run_without_a_transform_maps_json_into_a_table() {
    let dir = inputs();
    let (schema, input) = (dir.path().join("schema.toml"), dir.path().join("m.jsonl"));
    let (code, out, _) = fluss_sink(&[
        "dry-run",
        "--input",
        input.to_str().unwrap(),
        "--schema",
        schema.to_str().unwrap(),
    ]);
    assert_eq!(code, 0);
    assert!(out.contains(r#"{"tenant":"acme","v":1}"#), "{out}");
    assert!(out.contains("dead-letter"), "{out}");
    assert!(out.contains(r#"{"tenant":null,"v":3}"#), "{out}");
}

#[test]
fn dry_run_without_a_schema_says_what_to_pass() {
    let dir = inputs();
    let (code, _, err) = fluss_sink(&["dry-run", "--input", dir.path().join("m.jsonl").to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("pass --schema"), "{err}");
}

#[test]
fn check_reports_a_bad_key_and_passes_a_good_file_offline() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "type = \"sink\"\npath = \"x\"\n[plugin_config]\nbootstrap_servers = \"x:1\"\ndatabase = \"d\"\ntable = \"t\"\ntabel_type = \"log\"\n",
    )
    .unwrap();
    let (code, out, _) = fluss_sink(&["check", "--config", bad.to_str().unwrap(), "--offline"]);
    assert_eq!(code, 1);
    assert!(out.contains("unknown field `tabel_type`"), "{out}");

    let good = dir.path().join("good.toml");
    let library = dir.path().join("libplugin.so");
    std::fs::write(&library, b"").unwrap();
    std::fs::write(
        &good,
        format!(
            "type = \"sink\"\npath = \"{}\"\n[plugin_config]\nbootstrap_servers = \"x:1\"\ndatabase = \"d\"\ntable = \"t\"\ncolumns = [{{ name = \"id\", type = \"BIGINT\" }}]\n[plugin_config.transform]\npath = \"target/wasm-transforms/json-to-row.wasm\"\n",
            library.with_extension("").display()
        ),
    )
    .unwrap();
    let (code, out, _) = fluss_sink(&["check", "--config", good.to_str().unwrap(), "--offline"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("transform target/wasm-transforms/json-to-row.wasm loads"),
        "{out}"
    );
}

#[test]
fn dry_run_compare_prints_only_what_a_candidate_changes() {
    let dir = inputs();
    let (schema, input) = (dir.path().join("schema.toml"), dir.path().join("m.jsonl"));
    let current = repo().join("target/wasm-transforms/json-to-row.wasm");
    let candidate = repo().join("target/wasm-transforms/tenant-router.wasm");
    assert!(candidate.exists(), "run `cargo xtask build-transforms` first");
    let run = |candidate: &Path, json: bool| {
        let mut args = vec![
            "dry-run",
            "--input",
            input.to_str().unwrap(),
            "--schema",
            schema.to_str().unwrap(),
            "--transform",
            current.to_str().unwrap(),
            "--set",
            "prefix=t_",
            "--compare",
            candidate.to_str().unwrap(),
        ];
        if json {
            args.push("--json");
        }
        fluss_sink(&args)
    };
    let (code, out, err) = run(&candidate, true);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(
        lines.len(),
        2,
        "the message both dead-letter alike is not shown: {out}"
    );
    assert_eq!(lines[0]["offset"], 0);
    assert_eq!(lines[0]["current"]["rows"][0]["table"], "shop.orders");
    assert_eq!(lines[0]["candidate"]["rows"][0]["table"], "shop.t_acme");
    assert_eq!(lines[1]["offset"], 2);
    assert_eq!(lines[1]["current"]["outcome"], "rows");
    assert_eq!(lines[1]["candidate"]["outcome"], "dead_letter");
    assert!(
        err.contains("3 messages: 2 differ (1 with other rows, 1 newly dead-lettered, 0 no longer dead-lettered, 0 filtered differently, 0 dead-lettered for another reason)"),
        "{err}"
    );

    let (code, out, err) = run(&current, false);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.trim().is_empty(),
        "a version compared with itself shows nothing: {out}"
    );
    assert!(err.contains("3 messages: 0 differ"), "{err}");
}

/// Online, against the local cluster (`scripts/fluss-local.sh start`): a
/// table that does not exist and no `columns` is an error, unless
/// `evolve_schema` will make it from the first batch.
#[test]
fn check_takes_an_absent_table_when_evolve_schema_will_make_it() {
    let dir = tempfile::tempdir().unwrap();
    let library = dir.path().join("libplugin.so");
    std::fs::write(&library, b"").unwrap();
    let bootstrap = std::env::var("FLUSS_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:9123".into());
    let file = |evolve: bool| {
        let path = dir.path().join(format!("evolve_{evolve}.toml"));
        std::fs::write(
            &path,
            format!(
                "type = \"sink\"\npath = \"{}\"\n[plugin_config]\nbootstrap_servers = \"{bootstrap}\"\ndatabase = \"cli_check\"\ntable = \"absent_{:08x}\"\nevolve_schema = {evolve}\n",
                library.with_extension("").display(),
                std::process::id()
            ),
        )
        .unwrap();
        path
    };
    let (code, out, _) = fluss_sink(&["check", "--config", file(false).to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("does not exist and no columns are declared"),
        "{out}"
    );
    let (code, out, _) = fluss_sink(&["check", "--config", file(true).to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("the first batch's fields will create it (evolve_schema)"),
        "{out}"
    );
}
