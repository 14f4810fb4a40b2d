use super::*;

fn ret(k: u32) -> sock_filter {
    sock_filter { code: RET_K, jt: 0, jf: 0, k }
}

fn data(nr: i64, arg: u64) -> libc::seccomp_data {
    let mut args = [0u64; 6];
    args[0] = arg;
    args[1] = arg;
    libc::seccomp_data { nr: i32::try_from(nr).unwrap(), arch: native_arch().unwrap(), instruction_pointer: 0, args }
}

#[test]
fn refusing_returns_notify_and_enosys_and_allow_stay() {
    let eperm = libc::SECCOMP_RET_ERRNO | 1;
    let enosys = libc::SECCOMP_RET_ERRNO | 38;
    let p = [ret(libc::SECCOMP_RET_ALLOW), ret(eperm), ret(enosys), ret(eperm)];
    let (n, errno) = notifying(&p).unwrap();
    assert_eq!(errno, 1);
    let ks: Vec<u32> = n.iter().map(|i| i.k).collect();
    let notif = libc::SECCOMP_RET_USER_NOTIF;
    assert_eq!(ks, vec![libc::SECCOMP_RET_ALLOW, notif, enosys, notif]);
}

#[test]
fn several_errnos_or_a_computed_return_cannot_be_recorded() {
    let two = [ret(libc::SECCOMP_RET_ERRNO | 1), ret(libc::SECCOMP_RET_ERRNO | 13)];
    assert!(notifying(&two).is_none());
    let computed = [sock_filter { code: RET_A, jt: 0, jf: 0, k: 0 }, ret(libc::SECCOMP_RET_ERRNO | 1)];
    assert!(notifying(&computed).is_none());
    assert!(notifying(&[ret(libc::SECCOMP_RET_ALLOW)]).is_none(), "nothing to record");
}

#[test]
fn the_record_is_bounded_and_counts_saturate() {
    let mut r = Refusals::default();
    for nr in 1000..1000 + MAX_CALLS as i64 + 10 {
        r.add(&data(nr, 0));
    }
    assert_eq!(r.calls.len(), MAX_CALLS);
    assert_eq!(r.unlisted, 10);
    for v in 0..10 {
        r.add(&data(libc::SYS_ioctl, 0x5412 + v));
    }
    let ioctl = r.calls.iter().find(|c| i64::from(c.nr) == libc::SYS_ioctl);
    assert!(ioctl.is_none(), "no room for a 65th call: {r:?}");

    let mut r = Refusals::default();
    for v in 0..10 {
        r.add(&data(libc::SYS_ioctl, 0x5412 + v % 6));
    }
    let c = &r.calls[0];
    assert_eq!((c.name().as_str(), c.count, c.arg_name()), ("ioctl", 10, Some("request")));
    assert_eq!(c.args, vec![0x5412, 0x5413, 0x5414, 0x5415], "the first MAX_ARGS values");
    r.calls[0].count = u32::MAX - 1;
    r.add(&data(libc::SYS_ioctl, 0));
    r.add(&data(libc::SYS_ioctl, 0));
    assert_eq!(r.calls[0].count, u32::MAX);
}

#[test]
fn since_keeps_what_was_added() {
    let mut before = Refusals::default();
    before.add(&data(libc::SYS_ptrace, 0));
    let mut after = before.clone();
    after.add(&data(libc::SYS_ptrace, 0));
    after.add(&data(libc::SYS_mount, 0));
    let d = after.since(&before);
    let got: Vec<(String, u32)> = d.calls.iter().map(|c| (c.name(), c.count)).collect();
    assert_eq!(got, vec![("ptrace".to_string(), 1), ("mount".to_string(), 1)]);
    assert!(before.since(&before).is_empty());
}

/// A real filter in a forked child: a refused call is answered by whoever
/// holds the listener, with the profile's errno, and recorded; once the
/// listener is gone (a dead supervisor), it fails with ENOSYS rather than
/// hang or succeed.
#[test]
fn refused_calls_are_answered_and_fail_closed_without_a_supervisor() {
    use nix::errno::Errno;
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    let profile = serde_json::json!({"defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": ["getpgid"], "action": "SCMP_ACT_ERRNO"}]});
    let mut f = crate::seccomp::Filter::compile(&serde_json::from_value(profile).unwrap()).unwrap();
    f.record_refusals().unwrap();
    let (mut ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let getpgid = || nix::unistd::getpgid(None).err();
    match crate::sys::seccomp::fork_for_test().unwrap() {
        crate::sys::Forked::Child => {
            drop(ours);
            let loaded = nix::sys::prctl::set_no_new_privs().ok().and_then(|()| f.load().ok().flatten());
            let Some(fd) = loaded else { crate::sys::exit_child(100) };
            let raw = [fd.as_raw_fd()];
            let iov = [std::io::IoSlice::new(b"l")];
            let cmsg = [ControlMessage::ScmRights(&raw)];
            if sendmsg::<()>(theirs.as_raw_fd(), &iov, &cmsg, MsgFlags::empty(), None).is_err() {
                crate::sys::exit_child(101);
            }
            drop(fd);
            // Answered by the parent, as the profile says.
            let first = getpgid();
            // The parent drops its listener, then lets us go on.
            let _ = theirs.read(&mut [0u8; 1]);
            let second = getpgid();
            crate::sys::exit_child(match (first, second) {
                (Some(Errno::EPERM), Some(Errno::ENOSYS)) => 0,
                (Some(Errno::EPERM), _) => 102,
                _ => 103,
            })
        }
        crate::sys::Forked::Parent(pid) => {
            drop(theirs);
            let (mut fds, _) = crate::sys::recv_fds(&ours, &mut [0u8; 1]).unwrap();
            let mut l = RefusalListener::new(fds.pop().unwrap(), f.refusal_errno().unwrap());
            let mut record = Refusals::default();
            let mut p = [nix::poll::PollFd::new(l.as_fd(), nix::poll::PollFlags::POLLIN)];
            nix::poll::poll(&mut p, nix::poll::PollTimeout::from(5000u16)).unwrap();
            l.answer(&mut record);
            let got: Vec<(String, u32)> = record.calls.iter().map(|c| (c.name(), c.count)).collect();
            assert_eq!(got, vec![("getpgid".to_string(), 1)]);
            drop(l);
            ours.write_all(b"g").unwrap();
            let status = nix::sys::wait::waitpid(pid, None).unwrap();
            assert_eq!(status, nix::sys::wait::WaitStatus::Exited(pid, 0), "EPERM answered, then ENOSYS");
        }
    }
}
