//! What the launcher's real-peer tests share: their tools (installed with `scripts/apt-ensure.sh` when missing;
//! a tool still missing fails the test, never skips it) and running commands.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // tests: each binary uses a part; panics report

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The workspace checkout.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// Makes sure each `(program, Debian package)` is there, installing the missing packages with
/// `scripts/apt-ensure.sh`; returns the programs' paths. Panics (fails the test) when one is still missing.
pub fn tools(wanted: &[(&str, &str)]) -> Vec<PathBuf> {
    let missing: Vec<&str> = wanted.iter().filter(|(p, _)| on_path(p).is_none()).map(|(_, pkg)| *pkg).collect();
    if !missing.is_empty() {
        let script = format!(". '{}/scripts/apt-ensure.sh' && apt_ensure {}", repo().display(), missing.join(" "));
        let out = Command::new("bash").arg("-c").arg(&script).output().expect("running bash for apt_ensure");
        assert!(
            out.status.success(),
            "installing {missing:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    wanted
        .iter()
        .map(|(p, pkg)| {
            on_path(p).unwrap_or_else(|| panic!("{p} (Debian package {pkg}) is missing after installing it"))
        })
        .collect()
}

/// Runs `program args`; panics with its output unless it succeeds; returns stdout.
pub fn run(program: &str, args: &[&str]) -> String {
    let out = output(program, args);
    assert!(
        out.status.success(),
        "`{program} {}` failed ({}): {}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `program args` and returns what happened.
pub fn output(program: &str, args: &[&str]) -> Output {
    Command::new(program).args(args).output().unwrap_or_else(|e| panic!("cannot run {program}: {e}"))
}

/// `qemu-img info --output=json` of `path`.
pub fn qemu_img_info(path: &Path) -> serde_json::Value {
    let out = run("qemu-img", &["info", "-U", "--output=json", path.to_str().unwrap()]);
    serde_json::from_str(&out).unwrap()
}
