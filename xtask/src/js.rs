//! The JavaScript transforms (`transforms/js/*.js` exporting `init` and
//! `process`), made components by componentize-js, installed from the npm
//! registry with `npm ci` in `transforms/js` (version pinned in its lock file;
//! `@bytecodealliance/preview2-shim` is listed because componentize-js
//! imports it without declaring it).

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use crate::{Result, built, run};

/// JavaScript sources that become components (`<name>.js`).
const TRANSFORMS: &[&str] = &["json-to-row", "tenant-router"];

pub(crate) fn build(root: &Path, out_dir: &Path) -> Result<()> {
    let started = Instant::now();
    let sources = root.join("transforms/js");
    let tool = sources.join("node_modules/.bin/componentize-js");
    let lock = std::fs::read_to_string(sources.join("package-lock.json"))
        .map_err(|e| format!("transforms/js/package-lock.json: {e}"))?;
    let stamp = sources.join("node_modules/.xtask-installed-lock");
    if !tool.exists() || std::fs::read_to_string(&stamp).ok().as_deref() != Some(lock.as_str()) {
        eprintln!(
            "xtask: installing componentize-js (npm ci in {})",
            sources.display()
        );
        run(Command::new("npm")
            .args(["ci", "--silent", "--no-audit", "--no-fund"])
            .current_dir(&sources))
        .map_err(|e| format!("{e}; Node.js 18 or newer with npm is needed"))?;
        std::fs::write(&stamp, &lock).map_err(|e| format!("{}: {e}", stamp.display()))?;
    }
    for name in TRANSFORMS {
        let output = out_dir.join(format!("js-{name}.wasm"));
        // WASI HTTP is left out: the sink links no HTTP for transforms.
        run(Command::new(&tool)
            .arg(sources.join(format!("{name}.js")))
            .arg("--wit")
            .arg(root.join("wit"))
            .args([
                "--world-name",
                "transform",
                "--disable",
                "http",
                "fetch-event",
                "--out",
            ])
            .arg(&output)
            .stdout(std::process::Stdio::null()))?;
        built(&output)?;
    }
    eprintln!(
        "xtask: built {} JavaScript transforms in {:.1?}",
        TRANSFORMS.len(),
        started.elapsed()
    );
    Ok(())
}
