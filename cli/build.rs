//! Records the commit the binary is built from, for `tinyrun --version`
//! (`commit: <hash>`, as runc prints it). Outside a git checkout, or
//! without git, the line says `unknown`; TINYRUN_COMMIT set in the build's
//! environment wins (a package build from a tarball).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    out.status.success().then(|| text.trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=TINYRUN_COMMIT");
    if std::env::var_os("TINYRUN_COMMIT").is_some() {
        return;
    }
    let Some(commit) = git(&["rev-parse", "HEAD"]) else { return };
    // A new commit or checkout moves HEAD's reflog: build again then.
    if let Some(log) = git(&["rev-parse", "--path-format=absolute", "--git-path", "logs/HEAD"]) {
        println!("cargo:rerun-if-changed={log}");
    }
    if let Some(head) = git(&["rev-parse", "--path-format=absolute", "--git-path", "HEAD"]) {
        println!("cargo:rerun-if-changed={head}");
    }
    println!("cargo:rustc-env=TINYRUN_COMMIT={commit}");
}
