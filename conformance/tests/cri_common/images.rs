//! The two images, built here instead of pulled: the sandbox image (`bundles/pause/pause.c`,
//! `gcc -static`, alone in its rootfs) and busybox (the shared `bundles/mkrootfs` rootfs with
//! `/bin/probe`), each written as an OCI archive by `bundles/mkimage` for `ctr images import`.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use tinyrun_conformance::{shared_rootfs, target_dir, workspace_root};

pub const PAUSE: &str = "localhost/tinyrun-pause:latest";
pub const BUSYBOX: &str = "localhost/tinyrun-busybox:latest";

pub struct Archives {
    pub pause: PathBuf,
    pub busybox: PathBuf,
}

/// Built once per test process, under a file lock (several test binaries may start at once);
/// mkimage writes each archive atomically and the same bytes for the same input.
pub fn archives() -> &'static Archives {
    static ARCHIVES: OnceLock<Archives> = OnceLock::new();
    ARCHIVES.get_or_init(|| {
        let dir = target_dir().join("cri-images");
        fs::create_dir_all(&dir).expect("mkdir target/cri-images");
        let lock = File::create(dir.join(".lock")).expect("lock file");
        let _locked =
            nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| e).expect("flock");
        let pause_root = dir.join("pause-rootfs");
        fs::create_dir_all(&pause_root).expect("mkdir pause rootfs");
        compile_pause(&pause_root.join("pause"));
        let a = Archives { pause: dir.join("pause.tar"), busybox: dir.join("busybox.tar") };
        mkimage(&pause_root, PAUSE, &a.pause, &["/pause"]);
        mkimage(shared_rootfs(), BUSYBOX, &a.busybox, &["sh"]);
        a
    })
}

fn compile_pause(out: &Path) {
    let src = workspace_root().join("bundles/pause/pause.c");
    let tmp = out.with_extension(format!("tmp{}", std::process::id()));
    let st = Command::new("gcc").args(["-static", "-O2", "-Wall", "-o"]).arg(&tmp).arg(&src).status();
    assert!(st.expect("run gcc").success(), "gcc -static {} failed", src.display());
    fs::rename(&tmp, out).expect("rename pause");
}

fn mkimage(rootfs: &Path, name: &str, out: &Path, cmd: &[&str]) {
    let st = Command::new(workspace_root().join("bundles/mkimage"))
        .arg(rootfs)
        .arg(name)
        .arg(out)
        .arg("--")
        .args(cmd)
        .status()
        .expect("run bundles/mkimage");
    assert!(st.success(), "bundles/mkimage {} {name} failed", rootfs.display());
}
