//! SECURITY: nothing in a container or a sandbox may type into its caller's terminal.
//!
//! TIOCSTI pushes bytes into a terminal's input queue as if they were typed. A process may do it
//! on its own controlling terminal without any privilege, so a container that stays in the
//! session of the shell that started it can make that shell run a command once the container is
//! gone (bubblewrap's CVE-2017-5226). Every container process must start a session of its own.
//!
//! Each test runs the runtime the way an interactive shell runs a command: its stdio is a fresh
//! pty that is its controlling terminal. The program inside calls TIOCSTI with `echo INJECTED`;
//! afterwards the test reads what the shell would read next from that terminal. The line must
//! not be there, and the program must have been refused. The container's processes are also
//! checked from the host to have no controlling terminal at all.
//!
//! Needs a kernel that still allows TIOCSTI (`dev.tty.legacy_tiocsti = 1`); where it is 0 the
//! kernel refuses TIOCSTI to everyone without CAP_SYS_ADMIN and the tests print SKIP.

use tinyrun_conformance::terminal::{legacy_tiocsti, on_terminal, tty_nr, OnTerminal};
use tinyrun_conformance::{kv, require_root, Runtime};

const LINE: &str = "echo INJECTED";

macro_rules! require_tiocsti {
    () => {
        if !legacy_tiocsti() {
            eprintln!("SKIP: dev.tty.legacy_tiocsti is 0: the kernel refuses TIOCSTI to unprivileged processes");
            return;
        }
    };
}

/// The program's TIOCSTI failed: EPERM, since the terminal it was handed is not its controlling
/// terminal. runc relays a foreground container's stdio through pipes instead of handing it
/// the terminal, so there the program sees ENOTTY.
#[track_caller]
fn assert_refused(rt: &Runtime, t: &OnTerminal) {
    let seen = kv(&t.output).get("tiocsti").cloned().unwrap_or_default();
    let want = if rt.is_runc() { "ENOTTY" } else { "EPERM" };
    assert_eq!(seen, want, "TIOCSTI must be refused: the terminal is not the container's\n{}", t.output);
}

#[track_caller]
fn assert_not_injected(what: &str, t: &OnTerminal) {
    eprintln!(
        "ESCAPE terminal-injection {what}: tried TIOCSTI of {LINE:?} into the caller's terminal, saw exit {:?}, \
         pending input {:?}",
        t.code, t.typed
    );
    assert!(!t.typed.contains("INJECTED"), "{what}: the caller's shell would now run {:?}\n{}", t.typed, t.output);
}

/// A foreground `run` of a program that tries TIOCSTI on its stdin, the caller's terminal.
#[test]
fn run_cannot_type_into_the_callers_terminal() {
    require_root!();
    require_tiocsti!();
    let rt = Runtime::new("ttyinjrun");
    let b = rt.bundle(&["/bin/probe", "tiocsti", LINE]);
    let t = on_terminal(rt.command(&["run", "--bundle", b.path(), &b.id]), "", |_| {});
    assert_not_injected("run", &t);
    assert_eq!(t.code, Some(0), "{}", t.output);
    assert_refused(&rt, &t);
    rt.assert_nothing_left(&b.id);
}

/// `exec` into a running container, from a terminal: the exec'd process has its own session
/// too, and the container's init, seen from the host, has no controlling terminal.
#[test]
fn exec_cannot_type_into_the_callers_terminal() {
    require_root!();
    require_tiocsti!();
    let rt = Runtime::new("ttyinjexec");
    let b = rt.bundle(&["/bin/probe", "sleep", "600"]);
    // The container itself is started from a terminal as well.
    let t = on_terminal(rt.command(&["run", "-d", "--bundle", b.path(), &b.id]), "", |_| {});
    assert_eq!(t.code, Some(0), "run -d: {}", t.output);
    let pid = rt.wait_status(&b.id, "running")["pid"].as_i64().expect("pid") as i32;
    assert_eq!(tty_nr(pid), Some(0), "the container's init holds a controlling terminal");
    let mut exec_tty = None;
    let t = on_terminal(
        rt.command(&["exec", &b.id, "sh", "-c", "echo started; sleep 1; /bin/probe tiocsti 'echo INJECTED'"]),
        "started",
        |runtime| {
            // The exec'd shell is the runtime's child (it waits for it).
            let children =
                std::fs::read_to_string(format!("/proc/{runtime}/task/{runtime}/children")).unwrap_or_default();
            let child = children.split_whitespace().next().and_then(|c| c.parse().ok()).unwrap_or(0);
            exec_tty = tty_nr(child);
        },
    );
    assert_not_injected("exec", &t);
    if rt.is_runc() {
        // runc's exec'd process is not the runtime's child (runc init forks it).
        eprintln!("runc: the exec'd process's terminal is not looked up");
    } else {
        assert_eq!(exec_tty, Some(0), "the exec'd process holds a controlling terminal\n{}", t.output);
    }
    assert_refused(&rt, &t);
    rt.run(&["delete", "--force", &b.id]).expect_ok("delete");
    rt.assert_nothing_left(&b.id);
}
