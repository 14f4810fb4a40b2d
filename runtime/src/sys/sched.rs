//! How the program runs rather than what it sees: execution domain, memory
//! placement, CPU scheduling and I/O priority. Each is set on the calling
//! process between fork and exec from values the parent computed, so
//! nothing here allocates.
#![allow(unsafe_code)]

use nix::errno::Errno;

/// personality(2): sets the execution domain (and its flag bits) of this
/// process, which its program inherits.
pub(crate) fn set_personality(persona: libc::c_ulong) -> Result<(), Errno> {
    // SAFETY: personality takes a plain integer and touches no memory of ours.
    let r = unsafe { libc::personality(persona) };
    if r == -1 {
        return Err(Errno::last());
    }
    Ok(())
}

/// set_mempolicy(2) with `mode` (flags or'ed in) over the nodes set in
/// `mask`. Nothing is allocated: the mask is built by the runtime.
pub(crate) fn set_mempolicy(mode: i32, mask: &[libc::c_ulong]) -> Result<(), Errno> {
    // The kernel reads `maxnode - 1` bits (it decrements it first), so one
    // more than the mask holds makes it read exactly the mask.
    let bits = mask.len() * libc::c_ulong::BITS as usize;
    let (ptr, maxnode) = if mask.is_empty() { (std::ptr::null(), 0) } else { (mask.as_ptr(), bits + 1) };
    // SAFETY: the kernel reads (maxnode - 1) bits from `ptr`, which is
    // `mask`'s buffer of exactly that many bits (or null with 0 bits).
    let r = unsafe { libc::syscall(libc::SYS_set_mempolicy, mode, ptr, maxnode as libc::c_ulong) };
    if r == -1 {
        return Err(Errno::last());
    }
    Ok(())
}

/// `struct sched_attr` (SCHED_ATTR_SIZE_VER1), as sched_setattr(2) reads it.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SchedAttr {
    pub size: u32,
    pub policy: u32,
    pub flags: u64,
    pub nice: i32,
    pub priority: u32,
    pub runtime: u64,
    pub deadline: u64,
    pub period: u64,
    pub util_min: u32,
    pub util_max: u32,
}

/// sched_setattr(2) on the calling thread (a single-threaded process).
pub(crate) fn sched_setattr(attr: &SchedAttr) -> Result<(), Errno> {
    // SAFETY: `attr` is a live, properly laid out sched_attr whose `size`
    // says how much of it the kernel may read; it writes nothing.
    let r = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, std::ptr::from_ref(attr), 0) };
    if r == -1 {
        return Err(Errno::last());
    }
    Ok(())
}

/// ioprio_set(2) for the calling process (IOPRIO_WHO_PROCESS, 0).
pub(crate) fn ioprio_set(ioprio: i32) -> Result<(), Errno> {
    const IOPRIO_WHO_PROCESS: libc::c_int = 1;
    // SAFETY: integers only; no memory is passed.
    let r = unsafe { libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, ioprio) };
    if r == -1 {
        return Err(Errno::last());
    }
    Ok(())
}
