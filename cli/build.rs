//! Sets `VKML_COMMIT` for `vkml bench` reports: the environment's `VKML_COMMIT` if set
//! (builds outside a git checkout), else `git rev-parse --short=12 HEAD`, else `unknown`.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok().filter(|o| o.status.success())?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=VKML_COMMIT");
    let commit = std::env::var("VKML_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=VKML_COMMIT={commit}");
    // Re-run when HEAD moves: HEAD itself (per worktree), the branch it names and the packed
    // refs (shared by worktrees). Only existing paths: cargo re-runs the script on every
    // build for a path that does not exist.
    let watch = |path: String| {
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    };
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        watch(format!("{dir}/HEAD"));
    }
    let common = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]);
    if let Some(common) = common {
        watch(format!("{common}/packed-refs"));
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watch(format!("{common}/{r}"));
        }
    }
}
