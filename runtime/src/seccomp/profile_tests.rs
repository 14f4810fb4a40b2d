//! The allowlist shipped in `bundles/profiles` (the one `tinyrun sandbox`
//! applies), compiled here and loaded for real in a forked child: its
//! ioctl rules refuse TIOCSTI and TIOCLINUX on their low 32 bits, and
//! change the outcome of no other request.
#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "errno values and test pids")]

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};

use nix::sys::wait::{waitpid, WaitStatus};
use oci_spec::runtime::LinuxSeccomp;
use serde_json::json;

use super::*;
use crate::sys::{self, Forked};

const SHIPPED: &str = include_str!("../../../bundles/profiles/sandbox-seccomp.json");

fn shipped() -> Filter {
    let profile: LinuxSeccomp = serde_json::from_str(SHIPPED).unwrap();
    Filter::compile(&profile).unwrap()
}

/// Forks; the child loads `f` (if any, after no_new_privs), then reports
/// the errno (0 for success) of `ioctl(pipe, request, buf)` for each
/// request, through another pipe. Returns the child's report.
fn ioctl_errnos(f: Option<&Filter>, requests: &[u64]) -> Vec<i32> {
    let (target_r, _target_w) = nix::unistd::pipe().unwrap();
    let (report_r, report_w) = nix::unistd::pipe().unwrap();
    match sys::seccomp::fork_for_test().unwrap() {
        Forked::Child => {
            drop(report_r);
            if let Some(f) = f {
                if nix::sys::prctl::set_no_new_privs().is_err() || f.load().is_err() {
                    sys::exit_child(101);
                }
            }
            let mut out = String::new();
            for r in requests {
                out.push_str(&format!("{} ", ioctl(&target_r, *r)));
            }
            let ok = nix::unistd::write(&report_w, out.as_bytes()).is_ok();
            sys::exit_child(if ok { 0 } else { 102 })
        }
        Forked::Parent(pid) => {
            drop(report_w);
            let mut text = String::new();
            std::fs::File::from(report_r).read_to_string(&mut text).unwrap();
            assert_eq!(waitpid(pid, None).unwrap(), WaitStatus::Exited(pid, 0), "report: {text:?}");
            text.split_whitespace().map(|e| e.parse().unwrap()).collect()
        }
    }
}

/// `ioctl(fd, request, buf)` with a zeroed buffer; the errno or 0.
fn ioctl(fd: &OwnedFd, request: u64) -> i32 {
    let mut buf = [0u8; 256];
    sys::seccomp::raw_ioctl(fd.as_raw_fd(), request, &mut buf)
}

const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541C;
const FIONREAD: u64 = 0x541B;
const TIOCGWINSZ: u64 = 0x5413;

#[test]
fn the_shipped_profile_refuses_tiocsti_and_tioclinux_on_their_low_32_bits() {
    let f = shipped();
    let refused = [TIOCSTI, 0x1_0000_5412, 0xFFFF_FFFF_0000_5412, TIOCLINUX, 0x1_0000_541C];
    // Every request one bit away from a refused one, and a few real ones.
    let mut others = vec![FIONREAD, 0x1_0000_541B, TIOCGWINSZ, 0x5401];
    for b in 0..32 {
        others.extend([TIOCSTI ^ (1 << b), TIOCLINUX ^ (1 << b)]);
    }
    others.retain(|r| !refused.contains(r));
    let all: Vec<u64> = refused.iter().chain(&others).copied().collect();
    let control = ioctl_errnos(None, &all);
    let filtered = ioctl_errnos(Some(&f), &all);
    let eperm = libc::EPERM;
    for (i, r) in all.iter().enumerate() {
        if refused.contains(r) {
            assert_eq!(filtered[i], eperm, "request {r:#x} must be refused (without the filter: {})", control[i]);
            assert_ne!(control[i], eperm, "control: {r:#x} on a pipe fails without the filter too, but not EPERM");
        } else {
            assert_eq!(filtered[i], control[i], "request {r:#x}: the filter must not change its outcome");
        }
    }
    let fionread = all.iter().position(|r| *r == FIONREAD).unwrap();
    assert_eq!(filtered[fionread], 0, "FIONREAD on a pipe works under the filter");
    let winsz = all.iter().position(|r| *r == TIOCGWINSZ).unwrap();
    assert_eq!(filtered[winsz], libc::ENOTTY, "TIOCGWINSZ reaches the kernel (a pipe is no tty)");
}

/// Why the profile splits its ioctl allow: under an unconditional allow,
/// libseccomp drops a conditional refusal of the same call without a word.
#[test]
fn an_unconditional_allow_would_swallow_the_refusal() {
    let naive: LinuxSeccomp = serde_json::from_value(json!({
        "defaultAction": "SCMP_ACT_ERRNO",
        "syscalls": [
            {"names": ["ioctl", "write", "exit_group", "exit", "close", "munmap"], "action": "SCMP_ACT_ALLOW"},
            {"names": ["ioctl"], "action": "SCMP_ACT_ERRNO", "args": [
                {"index": 1, "value": 0xFFFF_FFFF_u32, "valueTwo": TIOCSTI, "op": "SCMP_CMP_MASKED_EQ"}]}
        ]
    }))
    .unwrap();
    let Ok(f) = Filter::compile(&naive) else { return };
    let got = ioctl_errnos(Some(&f), &[TIOCSTI]);
    assert_ne!(got, vec![libc::EPERM], "libseccomp now keeps the refusal: the profile's ioctl rules can be simpler");
}

#[test]
fn the_shipped_profile_parses_and_loads() {
    let f = shipped();
    // The child loads it and makes an allowed call.
    let got = ioctl_errnos(Some(&f), &[FIONREAD]);
    assert_eq!(got, vec![0]);
}
