//! The Python transforms (`transforms/python/*.py` with a `WitWorld` class),
//! made components by componentize-py, installed from PyPI into a
//! virtualenv under `target/guest-tools/python` at the version pinned in
//! `transforms/python/requirements.txt`.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use crate::{Result, built, run};

/// Python modules that become components, with the component names.
/// `evil_sleep` is TEST ONLY (a guest that sleeps; see the containment tests).
const TRANSFORMS: &[(&str, &str)] = &[
    ("json_to_row", "json-to-row"),
    ("tenant_router", "tenant-router"),
    ("evil_sleep", "evil-sleep"),
];

pub(crate) fn build(root: &Path, out_dir: &Path) -> Result<()> {
    let started = Instant::now();
    let sources = root.join("transforms/python");
    let venv = root.join("target/guest-tools/python");
    let tool = venv.join("bin/componentize-py");
    let requirements = sources.join("requirements.txt");
    let stamp = venv.join("requirements.txt");
    let wanted =
        std::fs::read_to_string(&requirements).map_err(|e| format!("{}: {e}", requirements.display()))?;
    if !tool.exists() || std::fs::read_to_string(&stamp).ok().as_deref() != Some(wanted.as_str()) {
        eprintln!("xtask: installing componentize-py into {}", venv.display());
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv))
            .map_err(|e| format!("{e}; Python 3 with its venv module is needed (Debian: python3-venv)"))?;
        run(Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
            .arg(&requirements))?;
        std::fs::write(&stamp, &wanted).map_err(|e| format!("{}: {e}", stamp.display()))?;
    }
    for (module, name) in TRANSFORMS {
        let output = out_dir.join(format!("python-{name}.wasm"));
        run(Command::new(&tool)
            .arg("-d")
            .arg(root.join("wit"))
            .args(["-w", "transform", "componentize", module, "-p"])
            .arg(&sources)
            .arg("-o")
            .arg(&output)
            .stdout(std::process::Stdio::null()))?;
        built(&output)?;
    }
    eprintln!(
        "xtask: built {} Python transforms in {:.1?}",
        TRANSFORMS.len(),
        started.elapsed()
    );
    Ok(())
}
