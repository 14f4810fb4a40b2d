//! Id-mapped bind mounts (runtime-spec `config.md` "Mounts": `uidMappings`, `gidMappings`, the
//! `idmap` and `ridmap` options; runc 1.2's behaviour): a container in a user namespace whose
//! root is host uid/gid 100000 gets a bind of a host directory owned by root, and
//!
//! * with the mount mapped as the container is (0 -> 100000), sees it as its own: it writes
//!   there, and what it writes (and chowns) lands on the host with the ids it used inside;
//! * with `idmap` and no mappings, the container's mappings are taken;
//! * with a mapping of its own (disk 1000 -> the container's root), the host's ids are moved by
//!   that mapping, not the container's;
//! * `idmap` maps the bind's top mount only, `ridmap` its submounts too;
//! * SECURITY: the same bind without `idmap` stays the host's: the container's root can't write
//!   it (runs against runc too);
//! * an `idmap` that can't be honoured (no bind, no mappings, a file system without id-mapped
//!   mounts) is refused naming the field or the mount, with nothing left behind.
//!
//! runc 1.1.5 (the oracle here) predates id-mapped mounts (runc 1.2): its spec has no
//! `mounts[].uidMappings`, and it binds the source unmapped. The tests that need the mapping skip
//! it; the one that needs none runs.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tinyrun_conformance::{require_root, Bundle, Runtime};

/// The container's root on the host.
const ROOT: u32 = 100_000;

fn map(container: u32, host: u32, size: u32) -> Value {
    json!([{"containerID": container, "hostID": host, "size": size}])
}

/// A bundle running `script` in a new user namespace mapping 0-65535 to 100000-165535, with
/// CAP_CHOWN (the default config has not).
fn userns_bundle(rt: &Runtime, script: &str) -> Bundle {
    let b = rt.bundle(&["/bin/sh", "-c", script]);
    b.config_mut(|c| {
        for set in ["bounding", "effective", "permitted"] {
            c["process"]["capabilities"][set].as_array_mut().unwrap().push(json!("CAP_CHOWN"));
        }
        c["linux"]["namespaces"].as_array_mut().unwrap().push(json!({"type": "user"}));
        c["linux"]["uidMappings"] = map(0, ROOT, 65536);
        c["linux"]["gidMappings"] = map(0, ROOT, 65536);
    });
    b
}

/// A host directory owned by root (mode 0755: only its owner writes), holding `from-host`
/// (root's) and `of-5` (uid/gid 5's).
fn host_dir(rt: &Runtime) -> PathBuf {
    let dir = rt.tempdir();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(dir.join("from-host"), "host-data\n").unwrap();
    std::fs::write(dir.join("of-5"), "").unwrap();
    std::os::unix::fs::chown(dir.join("of-5"), Some(5), Some(5)).unwrap();
    dir
}

/// (uid, gid) of `path` on the host.
fn owner(path: &Path) -> (u32, u32) {
    let m = std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (m.uid(), m.gid())
}

/// `probe stat` of each path, as `path uid:gid` lines, then what `script` prints.
const STAT_AND_WRITE: &str = "for f in /home /home/from-host /home/of-5; do \
     echo \"$f $(/bin/probe stat $f | grep -E '^(uid|gid)=' | cut -d= -f2 | paste -sd:)\"; done; \
     /bin/probe write /home/new; mkdir /home/sub && chown 7:8 /home/sub && echo chown=ok";

#[test]
fn idmapped_bind_makes_a_root_owned_host_dir_the_containers() {
    require_root!();
    let rt = Runtime::new("idmapbind");
    if rt.is_runc() {
        tinyrun_conformance::skip!("runc 1.1.5 predates id-mapped mounts (runc 1.2): it binds the source unmapped");
    }
    for how in ["own mappings", "idmap alone"] {
        let host = host_dir(&rt);
        let b = userns_bundle(&rt, STAT_AND_WRITE);
        let mut m = json!({"destination": "/home", "type": "bind", "source": host, "options": ["rbind", "idmap"]});
        if how == "own mappings" {
            m["options"] = json!(["rbind"]);
            m["uidMappings"] = map(0, ROOT, 65536);
            m["gidMappings"] = map(0, ROOT, 65536);
        }
        b.add_mount(m);
        let o = rt.run_bundle(&b);
        for line in ["/home 0:0", "/home/from-host 0:0", "/home/of-5 5:5", "write=ok", "chown=ok"] {
            assert!(o.stdout.lines().any(|l| l == line), "{how}: {line:?} expected inside\n{o}");
        }
        assert_eq!(owner(&host.join("new")), (0, 0), "{how}: the container's root wrote as disk id 0\n{o}");
        assert_eq!(owner(&host.join("sub")), (7, 8), "{how}: its chown 7:8 is 7:8 on the host\n{o}");
        assert_eq!(std::fs::read_to_string(host.join("new")).unwrap(), "probe\n");
    }
}

/// A mapping of the mount's own, other than the container's: disk id 1000 is the container's
/// root, and disk 0 is no id it has.
#[test]
fn a_mounts_own_mapping_is_the_one_applied() {
    require_root!();
    let rt = Runtime::new("idmapown");
    if rt.is_runc() {
        tinyrun_conformance::skip!("runc 1.1.5 predates id-mapped mounts (runc 1.2): it binds the source unmapped");
    }
    let host = host_dir(&rt);
    std::os::unix::fs::chown(&host, Some(1000), Some(1000)).unwrap();
    let b = userns_bundle(&rt, STAT_AND_WRITE);
    b.add_mount(json!({"destination": "/home", "type": "bind", "source": host, "options": ["bind"],
                       "uidMappings": map(1000, ROOT, 1), "gidMappings": map(1000, ROOT, 1)}));
    let o = rt.run_bundle(&b);
    for line in ["/home 0:0", "/home/from-host 65534:65534", "/home/of-5 65534:65534", "write=ok"] {
        assert!(o.stdout.lines().any(|l| l == line), "{line:?} expected inside\n{o}");
    }
    assert_eq!(owner(&host.join("new")), (1000, 1000), "written through the mount's mapping\n{o}");
    // Id 7 of the container is no id of the mount's mapping: the kernel refuses to store it.
    assert!(!o.stdout.contains("chown=ok") && owner(&host.join("sub")) == (1000, 1000), "{o}");
}

/// `idmap` maps the top mount of an `rbind`, `ridmap` every mount below it too.
#[test]
fn ridmap_maps_the_submounts_too() {
    require_root!();
    let rt = Runtime::new("ridmap");
    if rt.is_runc() {
        tinyrun_conformance::skip!("runc 1.1.5 predates id-mapped mounts (runc 1.2): it binds the source unmapped");
    }
    let host = host_dir(&rt);
    let sub = host.join("sub");
    std::fs::create_dir(&sub).unwrap();
    let st = std::process::Command::new("mount").args(["-t", "tmpfs", "-o", "mode=0755", "tmpfs"]).arg(&sub).status();
    assert!(st.is_ok_and(|s| s.success()), "mount a tmpfs under the host dir");
    rt.track_mount(&sub);
    for (opt, in_sub) in [("idmap", "write=EACCES"), ("ridmap", "write=ok")] {
        let b = userns_bundle(&rt, "/bin/probe write /home/top; /bin/probe write /home/sub/file");
        b.add_mount(json!({"destination": "/home", "type": "bind", "source": host, "options": ["rbind", opt]}));
        let o = rt.run_bundle(&b);
        let lines: Vec<&str> = o.stdout.lines().filter(|l| l.starts_with("write=")).collect();
        assert_eq!(lines, ["write=ok", in_sub], "{opt}: the top, then the submount\n{o}");
        let _ = std::fs::remove_file(host.join("top"));
        let _ = std::fs::remove_file(sub.join("file"));
    }
}

/// SECURITY: without `idmap`, a root-owned host directory bound into a user namespace stays
/// the host root's: the container's root (host uid 100000) sees it as nobody's and can't write
/// it. Fails if a bind were id-mapped unasked.
#[test]
fn a_bind_without_idmap_stays_unwritable() {
    require_root!();
    let rt = Runtime::new("noidmap");
    let host = host_dir(&rt);
    let b = userns_bundle(&rt, STAT_AND_WRITE);
    b.add_mount(json!({"destination": "/home", "type": "bind", "source": host, "options": ["rbind"]}));
    let o = rt.run_bundle(&b);
    assert!(o.stdout.lines().any(|l| l == "/home 65534:65534"), "the host's root is nobody inside\n{o}");
    assert!(o.stdout.contains("write=EACCES"), "the container's root can't write it\n{o}");
    assert!(!o.stdout.contains("chown=ok"), "{o}");
    assert!(!host.join("new").exists() && !host.join("sub").exists(), "nothing made on the host\n{o}");
}

/// What can't be honoured is refused, naming the field, before anything is made.
#[test]
fn an_idmap_that_cannot_be_honoured_is_refused() {
    require_root!();
    let rt = Runtime::new("idmapbad");
    if rt.is_runc() {
        tinyrun_conformance::skip!("runc 1.1.5 takes idmap as file-system data and mounts[].uidMappings not at all");
    }
    let host = host_dir(&rt);
    let cases = [
        (
            "mounts[/home].options",
            json!({"destination": "/home", "type": "tmpfs", "source": "tmpfs",
                                         "options": ["idmap"]}),
            true,
        ),
        (
            "mounts[/home].uidMappings",
            json!({"destination": "/home", "type": "bind", "source": host,
                                             "options": ["bind"], "uidMappings": map(0, ROOT, 65536)}),
            true,
        ),
        (
            "mounts[/home].options",
            json!({"destination": "/home", "type": "bind", "source": host,
                                         "options": ["bind", "idmap"]}),
            false,
        ),
    ];
    for (field, mount, userns) in cases {
        let b = if userns { userns_bundle(&rt, "true") } else { rt.bundle(&["true"]) };
        b.add_mount(mount);
        let o = rt.create(&b).expect_err("create");
        assert!(o.stderr.contains(field), "the error names {field}\n{o}");
        rt.assert_nothing_left(&b.id);
    }
    // A file system without id-mapped mounts (ramfs): the kernel's refusal, naming the mount.
    let ram = rt.tempdir();
    let st = std::process::Command::new("mount").args(["-t", "ramfs", "ramfs"]).arg(&ram).status();
    assert!(st.is_ok_and(|s| s.success()), "mount a ramfs");
    rt.track_mount(&ram);
    let b = userns_bundle(&rt, "true");
    b.add_mount(json!({"destination": "/home", "type": "bind", "source": ram, "options": ["rbind", "idmap"]}));
    let o = rt.create(&b).expect_err("create");
    assert!(o.stderr.contains("mounts[/home]") && o.stderr.contains("id-mapped"), "{o}");
    rt.assert_nothing_left(&b.id);
}
