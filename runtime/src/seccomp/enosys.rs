//! ENOSYS for system calls newer than the profile.
//!
//! A profile is written against the system calls of its day. Under a
//! refusing default action (ERRNO, KILL, TRAP, ...) a call the kernel added
//! later gets that refusal, typically EPERM, and programs that try a new
//! call and fall back when it is missing (glibc's `clone3`, `faccessat2`)
//! take EPERM as a real failure. Like runc, tinyrun answers ENOSYS for any
//! native call numbered above the highest one the profile names, with a few
//! BPF instructions run before libseccomp's program:
//!
//! ```text
//!   ld  [arch]
//!   jne NATIVE            -> filter      other architectures: unchanged
//!   ld  [nr]
//!   jset X32_BIT          -> filter      (x86_64) x32 calls: unchanged
//!   jgt MAX               -> enosys
//!   ja                    -> filter
//! enosys:
//!   ret ERRNO(ENOSYS)
//! filter:
//!   ... libseccomp's program ...
//! ```
//!
//! Only the native architecture gets the stub; calls made through another
//! ABI the profile lists (i386 on x86_64) keep the default action.

use libc::sock_filter;
use libseccomp::{ScmpAction, ScmpSyscall};
use oci_spec::runtime::LinuxSyscall;

/// `AUDIT_ARCH_*` of the architecture tinyrun runs on (what the kernel puts
/// in `seccomp_data.arch`); `None` where no stub is made.
#[cfg(target_arch = "x86_64")]
const NATIVE_ARCH: Option<u32> = Some(0xC000_003E); // EM_X86_64 | 64-bit | little-endian
#[cfg(target_arch = "aarch64")]
const NATIVE_ARCH: Option<u32> = Some(0xC000_00B7); // EM_AARCH64 | 64-bit | little-endian
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const NATIVE_ARCH: Option<u32> = None;

/// x32 calls come in through the x86_64 entry with this bit set.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Offsets in `struct seccomp_data`.
const NR: u32 = 0;
const ARCH: u32 = 4;

/// The stub for a profile with default action `default`, or `None` when
/// there is nothing to add: a permissive default lets unknown calls through
/// anyway, a default of ERRNO(ENOSYS) already answers so, and a profile that
/// names no native call has no "newer than".
pub(super) fn stub(default: ScmpAction, calls: &[LinuxSyscall]) -> Option<Vec<sock_filter>> {
    if matches!(default, ScmpAction::Allow | ScmpAction::Log | ScmpAction::Errno(libc::ENOSYS)) {
        return None;
    }
    let arch = NATIVE_ARCH?;
    let max = calls
        .iter()
        .flat_map(|c| c.names())
        .filter_map(|n| ScmpSyscall::from_name(n).ok())
        .filter_map(|s| u32::try_from(s.as_raw_syscall()).ok())
        .max()?;
    Some(program(arch, max, cfg!(target_arch = "x86_64")))
}

fn program(arch: u32, max: u32, x32: bool) -> Vec<sock_filter> {
    // Jumps are counted from the next instruction; the filter starts right
    // after the stub, whose length is known up front.
    let len: u8 = if x32 { 7 } else { 6 };
    let to_filter = |at: u8| len - at - 1;
    let mut p = vec![load(ARCH), jump(libc::BPF_JEQ, arch, 0, to_filter(1)), load(NR)];
    if x32 {
        p.push(jump(libc::BPF_JSET, X32_SYSCALL_BIT, to_filter(3), 0));
    }
    let at = len - 3;
    p.push(jump(libc::BPF_JGT, max, 1, 0));
    p.push(jump(libc::BPF_JA, to_filter(at + 1).into(), 0, 0));
    #[allow(clippy::cast_sign_loss, reason = "ENOSYS is a small positive errno")]
    let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    p.push(insn(libc::BPF_RET | libc::BPF_K, enosys, 0, 0));
    debug_assert_eq!(p.len(), usize::from(len));
    p
}

fn load(offset: u32) -> sock_filter {
    insn(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, offset, 0, 0)
}

fn jump(op: u32, k: u32, jt: u8, jf: u8) -> sock_filter {
    insn(libc::BPF_JMP | op | libc::BPF_K, k, jt, jf)
}

fn insn(code: u32, k: u32, jt: u8, jf: u8) -> sock_filter {
    #[allow(clippy::cast_possible_truncation, reason = "BPF opcodes fit in 16 bits")]
    let code = code as u16;
    sock_filter { code, jt, jf, k }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the stub as the kernel would, for one call; `None` means "fell
    /// through to the filter".
    fn eval(p: &[sock_filter], arch: u32, nr: u32) -> Option<u32> {
        let (mut pc, mut a) = (0usize, 0u32);
        loop {
            let i = p.get(pc)?;
            let code = u32::from(i.code);
            pc += 1;
            if code == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS {
                a = if i.k == ARCH { arch } else { nr };
            } else if code == libc::BPF_RET | libc::BPF_K {
                return Some(i.k);
            } else {
                let taken = match code & 0xf0 {
                    c if c == libc::BPF_JEQ => a == i.k,
                    c if c == libc::BPF_JGT => a > i.k,
                    c if c == libc::BPF_JSET => a & i.k != 0,
                    _ => {
                        pc += i.k as usize; // BPF_JA
                        continue;
                    }
                };
                pc += usize::from(if taken { i.jt } else { i.jf });
            }
        }
    }

    #[test]
    fn newer_native_calls_get_enosys_and_the_rest_fall_through() {
        const ENOSYS: u32 = libc::SECCOMP_RET_ERRNO | 38;
        for x32 in [false, true] {
            let p = program(0xAA, 300, x32);
            assert_eq!(eval(&p, 0xAA, 301), Some(ENOSYS), "x32={x32}");
            assert_eq!(eval(&p, 0xAA, 300), None, "the highest named call goes to the filter");
            assert_eq!(eval(&p, 0xAA, 0), None);
            assert_eq!(eval(&p, 0xBB, 1000), None, "another architecture goes to the filter");
            if x32 {
                assert_eq!(eval(&p, 0xAA, X32_SYSCALL_BIT | 1000), None, "x32 calls go to the filter");
            }
        }
    }

    #[test]
    fn no_stub_where_it_would_change_nothing() {
        let calls: Vec<LinuxSyscall> =
            serde_json::from_value(serde_json::json!([{"names": ["read", "write"], "action": "SCMP_ACT_ALLOW"}]))
                .unwrap();
        assert!(stub(ScmpAction::Allow, &calls).is_none());
        assert!(stub(ScmpAction::Log, &calls).is_none());
        assert!(stub(ScmpAction::Errno(libc::ENOSYS), &calls).is_none());
        assert!(stub(ScmpAction::Errno(libc::EPERM), &[]).is_none(), "no named call, no maximum");
        assert_eq!(stub(ScmpAction::Errno(libc::EPERM), &calls).is_some(), NATIVE_ARCH.is_some());
    }
}
