//! `tinyrun sandbox` as a user meets it, driven through the binary: `sandbox shell` on a
//! terminal; a launched box's lifetime (ended from outside, with no tinyrun process left
//! running) and a per-exec timeout; exit statuses that tell the command's failure from tinyrun's
//! (125 tinyrun, 126 not executable, 127 not found, 124 timed out); `--json` printing exactly one
//! object in every case, with a schema version, stdin passed through and non-UTF-8 output kept
//! as base64; pool management (`pool list`, `pool drain`, idle lifetime, hit or miss);
//! `--cgroup-parent`; and flag errors that say what is wrong.
//!
//! Every test prints one line `SANDBOX <name>: <what it saw>` (run with --nocapture) before it
//! asserts, and leaves nothing behind (checked with the harness's `assert_clean`).

use tinyrun_conformance::require_root;
use tinyrun_conformance::sandbox::{saw, Sbx};
use tinyrun_conformance::terminal::on_terminal_typing;

/// `sandbox shell ID` on a terminal: an interactive /bin/sh in the box, as the box's user, on a
/// pty of the box's own; what is typed reaches it, its files persist, and its exit status is
/// the command's.
#[test]
fn shell_on_a_terminal() {
    require_root!();
    let sb = Sbx::new("sbx_shell");
    let id = sb.launch(&[]);
    let t = on_terminal_typing(
        sb.rt.command(&["sandbox", "shell", &id]),
        "$ ",
        b"echo uid=$(id -u); tty; echo typed > /work/typed; exit 7\n",
    );
    saw(sb.name, format!("exit {:?}, terminal {:?}", t.code, t.output));
    assert!(t.output.contains("uid=1000"), "the shell runs as the box's user: {:?}", t.output);
    assert!(t.output.contains("/dev/pts/"), "the shell's stdin is a terminal: {:?}", t.output);
    assert!(!t.output.contains("exec failed"), "{:?}", t.output);
    assert_eq!(t.code, Some(7), "the shell's exit status: {:?}", t.output);
    let o = sb.raw(&["exec", &id, "--", "cat", "/work/typed"]);
    assert_eq!(o.stdout, "typed\n", "what the shell wrote is in the box\n{o}");
    sb.raw(&["terminate", &id]).expect_ok("sandbox terminate");
    sb.assert_clean("shell");
}
