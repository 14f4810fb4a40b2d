//! `linux.seccomp` → checks → libseccomp filter → BPF program. Runs in the
//! runtime process, before init is cloned.

use std::io::{Read, Seek};

use libseccomp::{ScmpAction, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall};
use oci_spec::runtime::{
    LinuxSeccomp, LinuxSeccompAction as Act, LinuxSeccompArg, LinuxSeccompOperator as Op, LinuxSyscall,
};

use super::{action_name, flag_name, flag_supported, invalid, Filter, Listener, ARCHS};
use crate::error::{Result, RuntimeError};

/// The syscalls init makes to hand the notification fd to the runtime; a
/// NOTIFY rule on them would leave init waiting for an agent that never
/// got the fd.
const HANDOVER_SYSCALLS: &[&str] = &["sendto", "sendmsg"];

/// Syscall arguments are numbered 0 to 5.
const MAX_ARG_INDEX: usize = 5;

/// The flag bits as `seccomp(2)` takes them (libc declares them `c_ulong`).
#[allow(clippy::cast_possible_truncation, reason = "single low bits")]
pub(super) const NEW_LISTENER: u32 = libc::SECCOMP_FILTER_FLAG_NEW_LISTENER as u32;
#[allow(clippy::cast_possible_truncation, reason = "single low bits")]
const SPEC_ALLOW: u32 = libc::SECCOMP_FILTER_FLAG_SPEC_ALLOW as u32;

/// An argument's index for libseccomp (checked against MAX_ARG_INDEX).
fn arg_index(a: &LinuxSeccompArg) -> u32 {
    u32::try_from(a.index()).unwrap_or(u32::MAX)
}

/// Structural checks that need neither libseccomp nor the kernel (run by
/// config validation, and again by [`compile`]).
pub(crate) fn check(s: &LinuxSeccomp) -> Result<()> {
    let calls = s.syscalls().as_deref().unwrap_or(&[]);
    if s.default_action() == Act::ScmpActNotify {
        return Err(invalid("linux.seccomp.defaultAction", "SCMP_ACT_NOTIFY cannot be the default action"));
    }
    check_errno("linux.seccomp.defaultErrnoRet", s.default_action(), s.default_errno_ret())?;
    for (i, call) in calls.iter().enumerate() {
        check_call(i, call)?;
    }
    let notify = calls.iter().any(|c| c.action() == Act::ScmpActNotify);
    match (s.listener_path(), notify) {
        (None, true) => {
            return Err(invalid("linux.seccomp.listenerPath", "must be set when SCMP_ACT_NOTIFY is used"));
        }
        (Some(p), _) if !p.is_absolute() => {
            return Err(invalid("linux.seccomp.listenerPath", format_args!("{p:?} is not an absolute path")));
        }
        _ => {}
    }
    if s.listener_metadata().is_some() && s.listener_path().is_none() {
        return Err(invalid("linux.seccomp.listenerMetadata", "must not be set without listenerPath"));
    }
    let killable = s.flags().iter().flatten().any(|f| flag_name(*f) == "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV");
    if killable && !notify {
        return Err(invalid(
            "linux.seccomp.flags",
            "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV needs an SCMP_ACT_NOTIFY rule",
        ));
    }
    Ok(())
}

fn check_call(i: usize, call: &LinuxSyscall) -> Result<()> {
    let field = format!("linux.seccomp.syscalls[{i}]");
    if call.names().is_empty() {
        return Err(invalid(format_args!("{field}.names"), "must contain at least one syscall name"));
    }
    if call.names().iter().any(|n| n.is_empty()) {
        return Err(invalid(format_args!("{field}.names"), "an empty string is not a syscall name"));
    }
    check_errno(&format!("{field}.errnoRet"), call.action(), call.errno_ret())?;
    if call.action() == Act::ScmpActNotify {
        if let Some(n) = call.names().iter().find(|n| HANDOVER_SYSCALLS.contains(&n.as_str())) {
            return Err(invalid(
                format_args!("{field}"),
                format_args!("SCMP_ACT_NOTIFY cannot be used for {n}: init needs it to hand the notification fd over"),
            ));
        }
    }
    for (j, arg) in call.args().iter().flatten().enumerate() {
        if arg.index() > MAX_ARG_INDEX {
            return Err(invalid(
                format_args!("{field}.args[{j}].index"),
                format_args!("{} is out of range (syscalls have arguments 0 to {MAX_ARG_INDEX})", arg.index()),
            ));
        }
    }
    Ok(())
}

/// The spec: "When the action doesn't support an errno, the runtime MUST
/// print an error and fail."
fn check_errno(field: &str, action: Act, errno: Option<u32>) -> Result<()> {
    let Some(e) = errno else { return Ok(()) };
    if !matches!(action, Act::ScmpActErrno | Act::ScmpActTrace) {
        return Err(invalid(field, format_args!("{} takes no errno", action_name(action))));
    }
    if e > u32::from(u16::MAX) {
        return Err(invalid(field, format_args!("{e} does not fit the 16 bits seccomp returns")));
    }
    Ok(())
}

/// The libseccomp action for a spec action (errnoRet checked already).
fn action(a: Act, errno: Option<u32>) -> ScmpAction {
    let ret = errno.and_then(|e| i32::try_from(e).ok()).unwrap_or(libc::EPERM);
    match a {
        Act::ScmpActKill | Act::ScmpActKillThread => ScmpAction::KillThread,
        Act::ScmpActKillProcess => ScmpAction::KillProcess,
        Act::ScmpActTrap => ScmpAction::Trap,
        Act::ScmpActErrno => ScmpAction::Errno(ret),
        Act::ScmpActTrace => ScmpAction::Trace(u16::try_from(ret).unwrap_or(u16::MAX)),
        Act::ScmpActNotify => ScmpAction::Notify,
        Act::ScmpActLog => ScmpAction::Log,
        Act::ScmpActAllow => ScmpAction::Allow,
    }
}

/// The `seccomp(2)` flag bits for a spec flag name; TSYNC maps to none.
pub(super) fn flag_bits(name: &str) -> Option<u32> {
    let bits = match name {
        "SECCOMP_FILTER_FLAG_TSYNC" => 0,
        "SECCOMP_FILTER_FLAG_LOG" => libc::SECCOMP_FILTER_FLAG_LOG,
        "SECCOMP_FILTER_FLAG_SPEC_ALLOW" => libc::SECCOMP_FILTER_FLAG_SPEC_ALLOW,
        "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV" => {
            libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV | libc::SECCOMP_FILTER_FLAG_NEW_LISTENER
        }
        _ => return None,
    };
    u32::try_from(bits).ok()
}

/// Checks, compiles and exports the filter.
pub(super) fn compile(s: &LinuxSeccomp) -> Result<Filter> {
    check(s)?;
    let lib = |field: &str, e: libseccomp::error::SeccompError| {
        RuntimeError::unsupported(field, format!("libseccomp {}: {e}", super::libseccomp_version().unwrap_or_default()))
    };
    let default = action(s.default_action(), s.default_errno_ret());
    let mut ctx = ScmpFilterContext::new(default).map_err(|e| lib("linux.seccomp.defaultAction", e))?;
    for (i, arch) in s.architectures().iter().flatten().enumerate() {
        let name = serde_json::to_value(arch).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
        let field = format!("linux.seccomp.architectures[{i}]");
        let token = ARCHS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, a)| *a)
            .ok_or_else(|| RuntimeError::unsupported(&field, format!("architecture {name} is not supported")))?;
        ctx.add_arch(token).map_err(|e| lib(&field, e))?;
    }
    let flags = filter_flags(s)?;
    let calls = s.syscalls().as_deref().unwrap_or(&[]);
    if calls.len() > 32 {
        // Binary-tree dispatch for long profiles, as runc asks for; an older
        // libseccomp without it just produces a linear filter.
        let _ = ctx.set_ctl_optimize(2);
    }
    for (i, call) in calls.iter().enumerate() {
        add_rules(&mut ctx, i, call, default)?;
    }
    let mut program = export(&ctx)?;
    if let Some(stub) = super::enosys::stub(default, calls) {
        program.splice(0..0, stub);
    }
    let listener = calls.iter().any(|c| c.action() == Act::ScmpActNotify).then(|| Listener {
        path: s.listener_path().clone().unwrap_or_default(),
        metadata: s.listener_metadata().clone(),
    });
    let flags = if listener.is_some() { flags | NEW_LISTENER } else { flags };
    Ok(Filter { program, flags, listener, shared: None, recording: None })
}

/// `flags` as `seccomp(2)` bits, each checked against the kernel. Absent
/// `flags` means SPEC_ALLOW when the kernel has it (runc's default).
fn filter_flags(s: &LinuxSeccomp) -> Result<u32> {
    let Some(list) = s.flags() else {
        let spec_allow = SPEC_ALLOW;
        return Ok(if flag_supported(spec_allow) { spec_allow } else { 0 });
    };
    let mut bits = 0;
    for (i, f) in list.iter().enumerate() {
        let name = flag_name(*f);
        let field = format!("linux.seccomp.flags[{i}]");
        let b = flag_bits(&name)
            .ok_or_else(|| RuntimeError::unsupported(&field, format!("{name} is not known to tinyrun")))?;
        if !flag_supported(b) {
            return Err(RuntimeError::unsupported(field, format!("{name} is not supported by this kernel")));
        }
        bits |= b;
    }
    Ok(bits)
}

fn add_rules(ctx: &mut ScmpFilterContext, i: usize, call: &LinuxSyscall, default: ScmpAction) -> Result<()> {
    let act = action(call.action(), call.errno_ret());
    if act == default {
        // Redundant, and libseccomp refuses it.
        return Ok(());
    }
    let args = call.args().as_deref().unwrap_or(&[]);
    let conds: Vec<ScmpArgCompare> = args.iter().map(condition).collect();
    let mut seen = [0usize; MAX_ARG_INDEX + 1];
    args.iter().for_each(|a| seen[a.index()] += 1);
    // The same argument twice can't be ANDed in libseccomp: one rule each.
    let groups: Vec<Vec<ScmpArgCompare>> =
        if seen.iter().any(|n| *n > 1) { conds.iter().map(|c| vec![*c]).collect() } else { vec![conds] };
    for name in call.names() {
        // Unknown to libseccomp for this architecture: not in this kernel
        // or library, so nothing can call it (runc's rule).
        let Ok(nr) = ScmpSyscall::from_name(name) else { continue };
        for g in &groups {
            let r = if g.is_empty() { ctx.add_rule(act, nr) } else { ctx.add_rule_conditional(act, nr, g) };
            r.map_err(|e| invalid(format_args!("linux.seccomp.syscalls[{i}]"), format_args!("rule for {name}: {e}")))?;
        }
    }
    Ok(())
}

/// MASKED_EQ takes the mask from `value` and compares with `valueTwo`,
/// as runc (libseccomp-golang's MakeCondition) does.
fn condition(a: &LinuxSeccompArg) -> ScmpArgCompare {
    let op = match a.op() {
        Op::ScmpCmpNe => ScmpCompareOp::NotEqual,
        Op::ScmpCmpLt => ScmpCompareOp::Less,
        Op::ScmpCmpLe => ScmpCompareOp::LessOrEqual,
        Op::ScmpCmpEq => ScmpCompareOp::Equal,
        Op::ScmpCmpGe => ScmpCompareOp::GreaterEqual,
        Op::ScmpCmpGt => ScmpCompareOp::Greater,
        Op::ScmpCmpMaskedEq => {
            return ScmpArgCompare::new(arg_index(a), ScmpCompareOp::MaskedEqual(a.value()), a.value_two().unwrap_or(0))
        }
    };
    ScmpArgCompare::new(arg_index(a), op, a.value())
}

/// libseccomp writes the program to an fd; read it back from a memfd.
fn export(ctx: &ScmpFilterContext) -> Result<Vec<libc::sock_filter>> {
    let sys = |op: &'static str, e: std::io::Error| RuntimeError::io(op, "seccomp program (memfd)", e);
    let fd = nix::sys::memfd::memfd_create(c"tinyrun-seccomp", nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC)
        .map_err(|e| sys("memfd_create", e.into()))?;
    let mut file = std::fs::File::from(fd);
    ctx.export_bpf(&file).map_err(|e| invalid("linux.seccomp", format_args!("export the BPF program: {e}")))?;
    let mut bytes = Vec::new();
    file.rewind().and_then(|()| file.read_to_end(&mut bytes)).map_err(|e| sys("read", e))?;
    const INSN: usize = std::mem::size_of::<libc::sock_filter>();
    if bytes.is_empty() || bytes.len() % INSN != 0 {
        return Err(invalid("linux.seccomp", format_args!("libseccomp produced a {}-byte program", bytes.len())));
    }
    Ok(bytes
        .chunks_exact(INSN)
        .map(|c| libc::sock_filter {
            code: u16::from_ne_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect())
}
