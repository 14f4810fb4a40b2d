//! Unpacking and layout reading against hand-made archives, hostile ones
//! included. Unpacking sets owners, makes whiteout nodes and sets trusted
//! attributes, all of which need the host's root: without it these tests
//! say so and pass.

use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

use sha2::{Digest, Sha256};

use super::unpack::{unpack, IdShift, Limits, Stats};
use super::{prepare, Source};

const BASE: u32 = 0x7000_0000;

fn root() -> bool {
    let r = nix::unistd::geteuid().is_root();
    if !r {
        eprintln!("skipped: unpacking needs root");
    }
    r
}

/// A tar entry; `name` goes into the header as raw bytes, so names the tar
/// crate would refuse to write (`..`, absolute) can be made.
struct E<'a> {
    name: &'a [u8],
    kind: tar::EntryType,
    data: &'a [u8],
    link: &'a [u8],
    uid: u64,
    mode: u32,
}

fn e(name: &'static str, kind: tar::EntryType) -> E<'static> {
    E { name: name.as_bytes(), kind, data: b"", link: b"", uid: 0, mode: 0o644 }
}

fn tar_of(entries: &[E<'_>]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for x in entries {
        let mut h = tar::Header::new_old();
        h.as_old_mut().name[..x.name.len()].copy_from_slice(x.name);
        h.as_old_mut().linkname[..x.link.len()].copy_from_slice(x.link);
        h.set_entry_type(x.kind);
        h.set_size(x.data.len() as u64);
        h.set_uid(x.uid);
        h.set_gid(x.uid);
        h.set_mode(x.mode);
        h.set_cksum();
        b.append(&h, x.data).unwrap();
    }
    b.into_inner().unwrap()
}

fn unpack_into(dir: &Path, entries: &[E<'_>], limits: Limits) -> Result<Stats, String> {
    std::fs::create_dir_all(dir).unwrap();
    unpack(tar_of(entries).as_slice(), dir, IdShift { base: BASE }, limits)
}

#[test]
fn owners_shift_into_the_box_range_and_types_are_kept() {
    if !root() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("layer");
    use tar::EntryType as T;
    let stats = unpack_into(
        &d,
        &[
            E { mode: 0o755, ..e("app/", T::Directory) },
            E { data: b"hello", uid: 1000, mode: 0o4755, ..e("app/run", T::Regular) },
            E { data: b"x", uid: 70_000, ..e("app/big-uid", T::Regular) },
            E { link: b"/etc/shadow", ..e("app/abs-link", T::Symlink) },
            E { link: b"app/run", ..e("app/hard", T::Link) },
            e("dev/null", T::Char),
            e("app/fifo", T::Fifo),
            E { data: b"deep", ..e("no/parent/listed", T::Regular) },
        ],
        Limits::default(),
    )
    .unwrap();
    assert_eq!((stats.entries, stats.devices_skipped), (8, 1));
    let run = std::fs::metadata(d.join("app/run")).unwrap();
    assert_eq!((run.uid(), run.gid()), (BASE + 1000, BASE + 1000));
    assert_eq!(run.mode() & 0o7777, 0o4755, "set-id bits survive the chown");
    assert_eq!(std::fs::metadata(d.join("app/big-uid")).unwrap().uid(), BASE + 65_534);
    assert_eq!(std::fs::metadata(d.join("app")).unwrap().uid(), BASE);
    assert_eq!(std::fs::read_link(d.join("app/abs-link")).unwrap(), Path::new("/etc/shadow"));
    assert_eq!(std::fs::metadata(d.join("app/hard")).unwrap().ino(), run.ino());
    assert!(!d.join("dev/null").exists(), "no device node is made on the host");
    assert!(std::fs::symlink_metadata(d.join("app/fifo")).unwrap().file_type().is_fifo());
    assert_eq!(std::fs::read(d.join("no/parent/listed")).unwrap(), b"deep");
    assert_eq!(std::fs::metadata(d.join("no/parent")).unwrap().uid(), BASE);
}

#[test]
fn hostile_names_are_refused_and_nothing_escapes() {
    if !root() {
        return;
    }
    use tar::EntryType as T;
    let t = tempfile::tempdir().unwrap();
    let outside = t.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let target = outside.to_str().unwrap().as_bytes().to_vec();
    let abs_file = format!("{}/abs", outside.display());
    let cases: Vec<(&str, Vec<E<'_>>, &str)> = vec![
        ("absolute", vec![E { data: b"x", ..E { name: abs_file.as_bytes(), ..e("", T::Regular) } }], "absolute"),
        ("dotdot", vec![E { data: b"x", ..e("../outside/dotdot", T::Regular) }], "`..`"),
        ("inner dotdot", vec![E { data: b"x", ..e("a/../../outside/in", T::Regular) }], "`..`"),
        (
            "symlinked parent",
            vec![
                E { link: &target, ..e("escape", T::Symlink) },
                E { data: b"x", ..e("escape/through-link", T::Regular) },
            ],
            "symlink",
        ),
        ("hard link out", vec![E { link: b"../outside/f", ..e("h", T::Link) }], "`..`"),
        ("hard link absolute", vec![E { link: b"/etc/passwd", ..e("h", T::Link) }], "absolute"),
    ];
    for (what, entries, says) in cases {
        let d = t.path().join(what.replace(' ', "-"));
        let err = unpack_into(&d, &entries, Limits::default()).unwrap_err();
        assert!(err.contains(says), "{what}: {err}");
        let left: Vec<_> = std::fs::read_dir(&outside).unwrap().collect();
        assert!(left.is_empty(), "{what}: wrote outside the layer: {left:?}");
    }
}

#[test]
fn caps_on_entries_and_bytes() {
    if !root() {
        return;
    }
    use tar::EntryType as T;
    let t = tempfile::tempdir().unwrap();
    let many: Vec<E<'_>> = (0..5).map(|_| e("f", T::Regular)).collect();
    let err = unpack_into(&t.path().join("a"), &many, Limits { max_entries: 3, ..Limits::default() }).unwrap_err();
    assert!(err.contains("more than 3 entries"), "{err}");
    let big = [E { data: &[7u8; 20], ..e("f", T::Regular) }];
    let err = unpack_into(&t.path().join("b"), &big, Limits { max_bytes: 10, ..Limits::default() }).unwrap_err();
    assert!(err.contains("more than 10 bytes"), "{err}");
}

#[test]
fn whiteouts_become_overlay_markers() {
    if !root() {
        return;
    }
    use tar::EntryType as T;
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("layer");
    unpack_into(
        &d,
        &[e("etc/", T::Directory), e("etc/.wh.gone", T::Regular), e("opq/.wh..wh..opq", T::Regular)],
        Limits::default(),
    )
    .unwrap();
    let m = std::fs::symlink_metadata(d.join("etc/gone")).unwrap();
    assert!(m.file_type().is_char_device() && m.rdev() == 0, "whiteout is a 0:0 char device");
    let opq = std::ffi::CString::new(d.join("opq").to_str().unwrap()).unwrap();
    assert_eq!(crate::sys::lgetxattr(&opq, c"trusted.overlay.opaque"), Ok(b"y".to_vec()));
    assert!(!d.join("opq/.wh..wh..opq").exists() && !d.join("etc/.wh.gone").exists());
}

fn hex(b: &[u8]) -> String {
    Sha256::digest(b).iter().map(|x| format!("{x:02x}")).collect()
}

/// An OCI layout with one gzip layer holding `tar`; `corrupt` flips a byte
/// of the layer blob after its digest was taken.
fn layout(dir: &Path, tar: &[u8], corrupt: bool) {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(tar).unwrap();
    let mut layer = gz.finish().unwrap();
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let put = |data: &[u8]| {
        let h = hex(data);
        std::fs::write(blobs.join(&h), data).unwrap();
        (h, data.len())
    };
    let lh = hex(&layer);
    let len = layer.len();
    if corrupt {
        let last = layer.len() - 1;
        layer[last] ^= 0xff;
    }
    std::fs::write(blobs.join(&lh), &layer).unwrap();
    let config = format!(
        r#"{{"architecture":"amd64","os":"linux","config":{{"Env":["PATH=/bin","IMG=1"]}},"rootfs":{{"type":"layers","diff_ids":["sha256:{}"]}}}}"#,
        hex(tar)
    );
    let (ch, cl) = put(config.as_bytes());
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:{ch}","size":{cl}}},"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:{lh}","size":{len}}}]}}"#
    );
    let (mh, ml) = put(manifest.as_bytes());
    let index = format!(
        r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:{mh}","size":{ml}}}]}}"#
    );
    std::fs::write(dir.join("index.json"), index).unwrap();
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
}

#[test]
fn layers_are_verified_cached_once_and_never_half_there() {
    if !root() {
        return;
    }
    use tar::EntryType as T;
    let t = tempfile::tempdir().unwrap();
    let state = t.path().join("state");
    let tar = tar_of(&[E { data: b"print(1)", mode: 0o755, ..e("app/main.py", T::Regular) }]);
    let good = t.path().join("good");
    layout(&good, &tar, false);
    let src = Source::open(&good).unwrap();
    let p = prepare(&state, &src, BASE, Limits::default()).unwrap();
    assert_eq!(p.env, vec!["PATH=/bin".to_string(), "IMG=1".to_string()]);
    assert_eq!(p.lowers.len(), 1);
    let main = p.lowers[0].join("app/main.py");
    assert_eq!(std::fs::read(&main).unwrap(), b"print(1)");
    let ino = std::fs::metadata(&main).unwrap().ino();
    let again = prepare(&state, &src, BASE, Limits::default()).unwrap();
    assert_eq!(
        std::fs::metadata(again.lowers[0].join("app/main.py")).unwrap().ino(),
        ino,
        "cached, not unpacked again"
    );
    let cache = state.join(super::CACHE);
    assert_eq!(std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777, 0o700);

    let bad = t.path().join("bad");
    layout(&bad, &tar, true);
    let err = prepare(&state, &Source::open(&bad).unwrap(), BASE + 65_536, Limits::default()).unwrap_err().to_string();
    assert!(err.contains("does not match") || err.contains("gzip") || err.contains("corrupt"), "{err}");
    let left: Vec<_> = std::fs::read_dir(cache.join((BASE + 65_536).to_string()).join("sha256")).unwrap().collect();
    assert!(left.is_empty(), "a layer that failed verification left {left:?}");
}
