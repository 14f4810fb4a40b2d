//! `tinyrun sandbox --image` run by an ordinary user (a throw-away user each test makes,
//! `unprivileged_common`): the image is unpacked into the user's own cache, owned by the user
//! (the box's root), and the box's root is an overlay over it that the user mounts in its own
//! user and mount namespaces, which its later commands join (so `cp` and `exec` reach a launched
//! box's overlay, and terminate removes it).
//!
//! * A box from an OCI image layout (busybox from `bundles/mkrootfs`, a second layer from
//!   `bundles/mkimage`) runs its command, keeps its writes between execs and copies, and never
//!   writes into the cache (every cached file compared before and after); a root filesystem
//!   directory of another user's is refused by name; nothing is left afterwards.
//! * Attack: an image whose `/etc` is a symlink to a host directory (the user's own, writable)
//!   and with a file linking to a host secret: the box reads neither, its writes and `cp` into
//!   it never land there, and `cp` out refuses the planted link.

mod unprivileged_common;

use std::collections::BTreeMap;
use std::fs;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tinyrun_conformance::{require_root, workspace_root};
use unprivileged_common::{text, Host, User};

const BE: &str = "--limits=best-effort";

/// An OCI image layout in `dir` (readable by everyone): `rootfs` (mkrootfs) and a layer over it,
/// owned by 1000 in the archive, with `/app/new` and `/app/data`.
fn layout(dir: &Path, rootfs: &Path) -> PathBuf {
    let l2 = dir.join("l2");
    fs::create_dir_all(l2.join("app")).unwrap();
    fs::write(l2.join("app/new"), "v2\n").unwrap();
    fs::write(l2.join("app/data"), "original\n").unwrap();
    let out = dir.join("layout");
    let st = Command::new(workspace_root().join("bundles/mkimage"))
        .arg(rootfs)
        .arg("localhost/unpriv:1")
        .arg(&out)
        .arg("--layer")
        .arg(&l2)
        .args(["--layer-owner", "1000", "--layout"])
        .stdout(Stdio::null())
        .status();
    assert!(st.expect("mkimage").success(), "mkimage --layout failed");
    assert!(Command::new("chmod").args(["-R", "a+rX"]).arg(&out).status().unwrap().success());
    out
}

fn mkrootfs(at: &Path) {
    let st = Command::new(workspace_root().join("bundles/mkrootfs")).arg(at).stdout(Stdio::null()).status();
    assert!(st.expect("mkrootfs").success(), "mkrootfs failed");
}

/// Every file under `dir`: path → (a hash of its content, mode, uid, size).
fn sums(dir: &Path) -> BTreeMap<PathBuf, (u64, u32, u32, u64)> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            let m = fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                todo.push(p.clone());
            }
            let mut h = std::collections::hash_map::DefaultHasher::new();
            if m.is_file() {
                fs::read(&p).unwrap_or_default().hash(&mut h);
            }
            out.insert(p, (h.finish(), m.mode(), m.uid(), m.len()));
        }
    }
    out
}

#[test]
fn an_image_box_runs_and_its_writes_never_reach_the_image() {
    require_root!();
    let Some(host) = Host::here() else { return };
    let u = User::new(host, "m", true);
    let rootfs = u.work.join("rootfs");
    mkrootfs(&rootfs);
    let image = layout(&u.work, &rootfs);
    let image = image.to_str().unwrap();
    // A directory of root's: refused by name, nothing made.
    let v = u.run_json(&[BE, "--image", rootfs.to_str().unwrap(), "--", "true"]);
    assert!(v["error"].as_str().unwrap_or_default().contains("must be owned by that user"), "{v}");
    let script = "id -u; cat /app/new; stat -c '%u %a' /app/data /bin/busybox; echo w > /work/x; echo t > /tmp/t; cat /work/x /tmp/t";
    let v = u.run_json(&[BE, "--image", image, "--", "sh", "-c", script]);
    let out = text(&v, "stdout");
    eprintln!("SANDBOX unprivileged image run: {out:?}");
    assert_eq!(out, "1000\nv2\n0 644\n0 755\nw\nt\n", "the image's files are the box root's: {v}");
    let cache = u.root().join("sandbox-images");
    let before = sums(&cache);
    assert!(before.keys().any(|p| p.ends_with("app/new")), "the layers are in {}", cache.display());
    // As the box's root, which owns the image's files.
    let (ok, id, err) = u.sandbox(&["launch", BE, "--user", "0", "--image", image, "--lifetime", "2m"]);
    assert!(ok, "launch: {err}");
    let id = id.trim().to_string();
    let src = u.work.join("in.txt");
    fs::write(&src, "copied\n").unwrap();
    let (ok, _, err) = u.sandbox(&["cp", src.to_str().unwrap(), &format!("{id}:/app/in.txt")]);
    assert!(ok, "cp in: {err}");
    let change = "echo changed > /app/new; rm /app/data; echo w > /work/x; mkdir -p /opt/d";
    let (ok, _, err) = u.sandbox(&["exec", &id, "--", "sh", "-c", change]);
    assert!(ok, "exec: {err}");
    let (ok, out, err) = u.sandbox(&["exec", &id, "--", "sh", "-c", "cat /app/new /app/in.txt /work/x; ls /app"]);
    assert!(ok && out == "changed\ncopied\nw\nin.txt\nnew\n", "writes kept between execs: {out:?} {err}");
    let (ok, _, err) = u.sandbox(&["terminate", &id]);
    assert!(ok, "terminate: {err}");
    assert_eq!(sums(&cache), before, "the cache changed under a box's writes");
    let v = u.run_json(&[BE, "--image", image, "--", "sh", "-c", "cat /app/new /app/data; ls /work"]);
    assert_eq!(text(&v, "stdout"), "v2\noriginal\n", "a new box sees the image as it was: {v}");
    u.assert_nothing_left();
}

#[test]
fn an_images_links_out_expose_nothing_of_the_host() {
    require_root!();
    let Some(host) = Host::here() else { return };
    let u = User::new(host, "l", true);
    // The host directory the image's /etc names: the user's own, writable, with a secret.
    let escape = u.work.join("escape");
    fs::create_dir(&escape).unwrap();
    fs::write(escape.join("secret"), "host secret\n").unwrap();
    fs::write(escape.join("passwd"), "host:x:0:0::/:/bin/sh\n").unwrap();
    assert!(Command::new("chown")
        .args(["-R", &format!("{}:{}", u.uid, u.gid)])
        .arg(&escape)
        .status()
        .unwrap()
        .success());
    fs::set_permissions(&escape, fs::Permissions::from_mode(0o777)).unwrap();
    let rootfs = u.work.join("rootfs");
    mkrootfs(&rootfs);
    // Inside the image the link's target is a directory of its own, with the image's passwd.
    let inside = rootfs.join(escape.strip_prefix("/").unwrap());
    fs::create_dir_all(&inside).unwrap();
    fs::rename(rootfs.join("etc/passwd"), inside.join("passwd")).unwrap();
    fs::remove_dir_all(rootfs.join("etc")).unwrap();
    std::os::unix::fs::symlink(&escape, rootfs.join("etc")).unwrap();
    fs::create_dir_all(rootfs.join("app")).unwrap();
    std::os::unix::fs::symlink(escape.join("secret"), rootfs.join("app/link")).unwrap();
    let image = layout(&u.work, &rootfs);
    let image = image.to_str().unwrap();
    let host_files = || {
        let mut names: Vec<String> =
            fs::read_dir(&escape).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    };
    let script = "cat /etc/secret /app/link 2>&1; head -c 4 /etc/passwd; echo; echo planted > /etc/planted; echo planted > /app/link; echo done";
    let v = u.run_json(&[BE, "--user", "0", "--image", image, "--", "sh", "-c", script]);
    let out = text(&v, "stdout");
    eprintln!("SANDBOX unprivileged image links: {out:?}; host dir {:?}", host_files());
    assert!(out.ends_with("done\n") && !out.contains("host secret"), "the box read the host's file: {v}");
    assert!(!out.contains("host"), "the box read the host's passwd: {v}");
    assert_eq!(host_files(), ["passwd", "secret"], "the box wrote into the host directory");
    assert_eq!(fs::read_to_string(escape.join("secret")).unwrap(), "host secret\n");
    let (ok, id, err) = u.sandbox(&["launch", BE, "--image", image, "--lifetime", "2m"]);
    assert!(ok, "launch: {err}");
    let id = id.trim().to_string();
    let src = u.work.join("in.txt");
    fs::write(&src, "copied\n").unwrap();
    let _ = u.sandbox(&["cp", src.to_str().unwrap(), &format!("{id}:/etc/copied")]);
    let _ = u.sandbox(&["cp", src.to_str().unwrap(), &format!("{id}:/app/link")]);
    assert_eq!(host_files(), ["passwd", "secret"], "cp wrote through the image's link");
    assert_eq!(fs::read_to_string(escape.join("secret")).unwrap(), "host secret\n", "cp wrote through /app/link");
    fs::set_permissions(&u.work, fs::Permissions::from_mode(0o777)).unwrap();
    let dst = u.work.join("out.txt");
    let (ok, _, err) = u.sandbox(&["cp", &format!("{id}:/app/link"), dst.to_str().unwrap()]);
    let got = fs::read_to_string(&dst).unwrap_or_default();
    assert!(!got.contains("host secret"), "cp out followed the link to the host: {ok} {err}");
    let (ok, _, err) = u.sandbox(&["terminate", &id]);
    assert!(ok, "terminate: {err}");
    u.assert_nothing_left();
}
