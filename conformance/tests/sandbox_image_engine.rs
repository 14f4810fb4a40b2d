//! `tinyrun sandbox --image` and `--rootfs` as an engine runs images, driven through the binary.
//! Images are built here with no registry (`bundles/mkrootfs`, `bundles/mkimage --layout`).
//!
//! Checked: a layer is applied onto the view of the layers below it (a file added under a lower
//! layer's `lib -> usr/lib` link lands in usr/lib); the layer cache holds one copy of each layer
//! for boxes of every id range and evicts the least recently used layers no box uses when over
//! `--image-cache-size`; a directory image's owners are the box's own (its /home/tester, owned by
//! 1000, is the box user's); an OCI image's User, WorkingDir, Entrypoint and Cmd apply, `--user`
//! overrides the user, and `LAYOUT:TAG` picks one of two tagged images; `--rootfs` never writes
//! into the caller's directory.
//!
//! Each test prints `SANDBOX <name>: <what it saw>` before it asserts.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tinyrun_conformance::require_root;
use tinyrun_conformance::sandbox::{image_layer_dirs, mkimage, mkrootfs, saw, Sbx};

/// A directory of the test, searchable by the boxes' unprivileged roots.
fn open_dir(sb: &Sbx) -> PathBuf {
    let dir = sb.rt.tempdir();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

/// A file under a lower layer's `lib -> usr/lib` link: the layer's tar holds `lib/x` and no entry
/// for `lib` itself (`--bare-layers`), so an engine puts x in usr/lib and /lib stays a link.
#[test]
fn a_layer_is_applied_through_a_lower_link() {
    require_root!();
    let sb = Sbx::new("sbx_img_link");
    let dir = open_dir(&sb);
    let rootfs = dir.join("rootfs");
    mkrootfs(&rootfs);
    fs::create_dir_all(rootfs.join("usr/lib")).unwrap();
    fs::write(rootfs.join("usr/lib/base"), "base\n").unwrap();
    std::os::unix::fs::symlink("usr/lib", rootfs.join("lib")).unwrap();
    let l2 = dir.join("l2");
    fs::create_dir_all(l2.join("lib")).unwrap();
    fs::write(l2.join("lib/x"), "from layer 2\n").unwrap();
    let layout = dir.join("layout");
    let l2s = l2.to_str().unwrap();
    mkimage(&rootfs, "localhost/link:1", &layout, &["--layer", l2s, "--bare-layers", "--layout"]);
    let o = sb.run(&["--image", layout.to_str().unwrap()], &["sh", "-c", "cat /usr/lib/x; readlink /lib; ls /lib/"]);
    saw("img_link", format!("exit {:?}: {:?} {:?}", o.code(), o.stdout, o.stderr));
    assert!(o.ok(), "{o}");
    assert_eq!(o.stdout, "from layer 2\nusr/lib\nbase\nx\n", "x is in usr/lib, and /lib is still the link\n{o}");
    sb.assert_clean("the run");
}

/// Two launched boxes of the same image get different id ranges, and the cache holds one copy of
/// each layer for both (each box sees the image's root as its own root, and its writes as its own
/// host ids). Then, with `--image-cache-size 1`, a second image evicts the first's layers only
/// once no box uses them.
#[test]
fn the_cache_is_shared_by_every_range_and_evicts_unused_layers() {
    require_root!();
    let sb = Sbx::new("sbx_img_cache");
    let dir = open_dir(&sb);
    let rootfs = dir.join("rootfs");
    mkrootfs(&rootfs);
    let l2 = dir.join("l2");
    fs::create_dir_all(l2.join("app")).unwrap();
    fs::write(l2.join("app/data"), "a's data\n").unwrap();
    let a = dir.join("a");
    mkimage(&rootfs, "localhost/a:1", &a, &["--layer", l2.to_str().unwrap(), "--layer-owner", "1000", "--layout"]);
    let rootfs_b = dir.join("rootfs-b");
    mkrootfs(&rootfs_b);
    fs::write(rootfs_b.join("etc/b"), "b\n").unwrap();
    let b = dir.join("b");
    mkimage(&rootfs_b, "localhost/b:1", &b, &["--layout"]);
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());

    let boxes = [sb.launch(&["--image", a]), sb.launch(&["--image", a])];
    let script = "probe stat /bin/busybox | grep uid; probe stat /app/data | grep uid; echo hi > /work/mine";
    let mut seen = Vec::new();
    for id in &boxes {
        let o = sb.raw(&["exec", id, "--", "sh", "-c", script]);
        let mine = sb.rt.root().join("sandbox-bundles").join(id).join("scratch/upper/work/mine");
        seen.push((o.stdout.clone(), fs::metadata(&mine).map(|m| m.uid()).ok(), o.ok()));
    }
    let shared = image_layer_dirs(sb.rt.root());
    let terminate_b = sb.raw(&["terminate", &boxes[1]]);
    let first = sb.run(&["--image", b, "--image-cache-size", "1"], &["cat", "/etc/b"]);
    let while_a_lives = image_layer_dirs(sb.rt.root());
    let a_still = sb.raw(&["exec", &boxes[0], "--", "cat", "/app/data"]);
    let terminate_a = sb.raw(&["terminate", &boxes[0]]);
    let second = sb.run(&["--image", b, "--image-cache-size", "1"], &["cat", "/etc/b"]);
    let after = image_layer_dirs(sb.rt.root());
    saw(
        "img_cache",
        format!(
            "two boxes saw {seen:?}; layer dirs {shared:?}; first run of b (cap 1): {:?} {:?}, dirs while a lives \
             {while_a_lives:?}, a reads {:?}; second run of b: {:?}, dirs after {after:?}",
            first.stdout, first.stderr, a_still.stdout, second.stdout
        ),
    );
    for (out, _, ok) in &seen {
        assert!(*ok && out == "uid=0\nuid=1000\n", "the image's 0 and 1000 are the box's: {seen:?}");
    }
    let (u0, u1) = (seen[0].1.expect("box 0's write"), seen[1].1.expect("box 1's write"));
    assert!(u0 != u1 && u0 % 65536 == 1000 && u1 % 65536 == 1000, "each box writes as its own host ids: {u0} {u1}");
    assert_eq!(shared.len(), 2, "one copy of each of the image's 2 layers for both boxes: {shared:?}");
    assert!(terminate_b.ok() && first.ok() && first.stdout == "b\n", "{terminate_b}\n{first}");
    let b_layers: Vec<&String> = while_a_lives.iter().filter(|l| !shared.contains(l)).collect();
    assert_eq!(b_layers.len(), 1, "b's layer was added: {while_a_lives:?}");
    assert!(shared.iter().all(|l| while_a_lives.contains(l)), "a's layers stay while box a uses them");
    assert!(a_still.ok() && a_still.stdout == "a's data\n", "{a_still}");
    assert!(terminate_a.ok() && second.ok(), "{terminate_a}\n{second}");
    assert_eq!(after, [b_layers[0].clone()], "over the cap, the layers no box uses went, b's stayed");
    sb.assert_clean("the boxes and runs");
}

/// A directory image (mkrootfs's, whose /home/tester is owned by 1000 on the host) is seen with
/// its own owners: /home/tester is the box user's, so the box can write its home; /etc/motd is the
/// box root's. The directory itself is not written.
#[test]
fn a_directory_image_gives_its_owners_to_the_box() {
    require_root!();
    let sb = Sbx::new("sbx_img_dir_ids");
    let dir = open_dir(&sb);
    let rootfs = dir.join("rootfs");
    mkrootfs(&rootfs);
    fs::write(rootfs.join("etc/motd"), "hello\n").unwrap();
    let before = listing(&rootfs);
    let script = "echo mine > /home/tester/f && cat /home/tester/f; probe stat /home/tester | grep uid; \
                  probe stat /etc/motd | grep uid; id -u; echo HOME=$HOME";
    let o = sb.run(&["--image", rootfs.to_str().unwrap()], &["sh", "-c", script]);
    let after = listing(&rootfs);
    saw(
        "img_dir_ids",
        format!("exit {:?}: {:?} {:?}; directory changed: {}", o.code(), o.stdout, o.stderr, before != after),
    );
    assert!(o.ok(), "{o}");
    assert_eq!(o.stdout, "mine\nuid=1000\nuid=0\n1000\nHOME=/home/tester\n", "{o}");
    assert_eq!(before, after, "the image directory was written");
    sb.assert_clean("the run");
}

/// An OCI layout with two tagged images: v1 names a User (app, 1001, from the image's
/// /etc/passwd), a WorkingDir, an Entrypoint and a Cmd; v2 only a Cmd. `LAYOUT:TAG` picks each;
/// no tag is an error naming both; a given command goes after the Entrypoint; `--user root` runs
/// as the box's root, which can write the image's root-owned /bin in its overlay; `exec` in a
/// launched v1 box keeps its user and directory.
#[test]
fn an_image_config_applies_and_tags_pick_the_image() {
    require_root!();
    let sb = Sbx::new("sbx_img_config");
    let dir = open_dir(&sb);
    let rootfs = dir.join("rootfs");
    mkrootfs(&rootfs);
    let passwd = fs::read_to_string(rootfs.join("etc/passwd")).unwrap() + "app:x:1001:1001::/home/app:/bin/sh\n";
    fs::write(rootfs.join("etc/passwd"), passwd).unwrap();
    let group = fs::read_to_string(rootfs.join("etc/group")).unwrap() + "app:x:1001:\n";
    fs::write(rootfs.join("etc/group"), group).unwrap();
    fs::create_dir_all(rootfs.join("srv")).unwrap();
    // app's home, in a layer of app's own.
    let home = dir.join("home-layer");
    fs::create_dir_all(home.join("home/app")).unwrap();
    let layout = dir.join("layout");
    let h = home.to_str().unwrap();
    let v1 = ["--layer", h, "--layer-owner", "1001", "--user", "app", "--workdir", "/srv"];
    let v1 = [&v1[..], &["--entrypoint", "/bin/sh", "--entrypoint", "-c", "--layout"]].concat();
    let v1_cmd = "echo v1 default; id -u; id -g; pwd; echo HOME=$HOME";
    mkimage(&rootfs, "localhost/cfg:v1", &layout, &[&v1[..], &["--", v1_cmd]].concat());
    mkimage(
        &rootfs,
        "localhost/cfg:v2",
        &layout,
        &["--layout", "--add", "--", "sh", "-c", "echo v2 default; id -u; pwd"],
    );
    let l = layout.to_str().unwrap();
    let (t1, t2) = (format!("{l}:v1"), format!("{l}:v2"));
    let r1 = sb.run(&["--image", &t1], &[]);
    let r2 = sb.run(&["--image", &t1], &["echo given; id -u; pwd"]);
    let r3 = sb.run(&["--image", &t1, "--user", "root"], &["id -u; echo x > /bin/installed && cat /bin/installed"]);
    let r4 = sb.run(&["--image", &t2], &[]);
    let untagged = sb.run(&["--image", l], &["true"]);
    let id = sb.launch(&["--image", &t1]);
    let e = sb.raw(&["exec", &id, "--", "sh", "-c", "id -u; pwd"]);
    saw(
        "img_config",
        format!(
            "v1: {:?} {:?}; v1 with a command: {:?}; --user root: {:?} {:?}; v2: {:?}; no tag: exit {:?} {:?}; \
             exec in v1: {:?}",
            r1.stdout,
            r1.stderr,
            r2.stdout,
            r3.stdout,
            r3.stderr,
            r4.stdout,
            untagged.code(),
            untagged.stderr.trim(),
            e.stdout
        ),
    );
    assert!(r1.ok() && r1.stdout == "v1 default\n1001\n1001\n/srv\nHOME=/home/app\n", "Entrypoint + Cmd\n{r1}");
    assert!(r2.ok() && r2.stdout == "given\n1001\n/srv\n", "Entrypoint + the given command\n{r2}");
    assert!(r3.ok() && r3.stdout == "0\nx\n", "--user root installs into the overlay\n{r3}");
    assert!(r4.ok() && r4.stdout == "v2 default\n1000\n/work\n", "the other tag, with the sandbox's user\n{r4}");
    assert!(
        !untagged.ok() && untagged.stderr.contains("v1, v2") && untagged.stderr.contains("LAYOUT:TAG"),
        "{untagged}"
    );
    assert!(e.ok() && e.stdout == "1001\n/srv\n", "exec keeps the image's user and directory\n{e}");
    sb.raw(&["terminate", &id]).expect_ok("terminate");
    sb.assert_clean("the runs");
}

/// Every entry below `dir`: path → (mode, uid, gid, size, mtime in ns), links not followed.
fn listing(dir: &Path) -> BTreeMap<PathBuf, (u32, u32, u32, u64, i128)> {
    fn walk(d: &Path, out: &mut BTreeMap<PathBuf, (u32, u32, u32, u64, i128)>) {
        let m = fs::symlink_metadata(d).unwrap();
        let mtime = i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec());
        out.insert(d.to_path_buf(), (m.mode(), m.uid(), m.gid(), m.size(), mtime));
        if m.is_dir() {
            for e in fs::read_dir(d).unwrap().flatten() {
                walk(&e.path(), out);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, &mut out);
    out
}

/// `--rootfs DIR` in a one-shot run, with `--writable-root`, and in a launched box: the box gets
/// its mount points, /work and /tmp and (loosened) a writable root, where it writes into DIR's
/// world-writable /drop, and DIR's listing, mtimes included, is the same afterwards. Without
/// --writable-root the root stays read-only.
#[test]
fn rootfs_is_never_written() {
    require_root!();
    let sb = Sbx::new("sbx_rootfs_ro");
    let dir = open_dir(&sb);
    let rootfs = dir.join("rootfs");
    mkrootfs(&rootfs);
    for d in ["dev", "proc", "sys", "tmp"] {
        fs::remove_dir_all(rootfs.join(d)).unwrap();
    }
    fs::create_dir(rootfs.join("drop")).unwrap();
    fs::set_permissions(rootfs.join("drop"), fs::Permissions::from_mode(0o1777)).unwrap();
    let before = listing(&rootfs);
    let r = rootfs.to_str().unwrap();
    let run = sb.run(
        &["--rootfs", r],
        &["sh", "-c", "echo a > /work/a; echo b > /tmp/b; touch /drop/ro 2>/dev/null; echo rc=$?"],
    );
    let writable = sb.run(&["--rootfs", r, "--writable-root"], &["sh", "-c", "echo c > /drop/c && cat /drop/c"]);
    let id = sb.launch(&["--rootfs", r]);
    let e = sb.raw(&["exec", &id, "--", "sh", "-c", "echo d > /work/d && cat /work/d"]);
    let t = sb.raw(&["terminate", &id]);
    let after = listing(&rootfs);
    let added: Vec<&PathBuf> = after.keys().filter(|p| !before.contains_key(*p)).collect();
    let changed: Vec<&PathBuf> =
        before.iter().filter(|(p, v)| after.get(*p).is_some_and(|a| a != *v)).map(|(p, _)| p).collect();
    saw(
        "rootfs_ro",
        format!(
            "run: {:?} {:?}; --writable-root: {:?}; exec: {:?}; added in DIR {added:?}, changed {changed:?}",
            run.stdout, run.stderr, writable.stdout, e.stdout
        ),
    );
    assert!(run.ok() && run.stdout == "rc=1\n", "the root is read-only\n{run}");
    assert!(writable.ok() && writable.stdout == "c\n", "{writable}");
    assert!(e.ok() && t.ok(), "{e}\n{t}");
    assert!(added.is_empty() && changed.is_empty(), "--rootfs wrote into DIR: added {added:?}, changed {changed:?}");
    sb.assert_clean("the runs");
}
