//! `linux.personality`: the execution domain of every container process
//! (personality(2)), decided by the runtime and set by the process itself
//! before its program, init and `exec` alike, as runc does.

use oci_spec::runtime::{LinuxPersonalityDomain, Spec};

use crate::error::InitError;

// <linux/personality.h>
const PER_LINUX: libc::c_ulong = 0x0000;
const PER_LINUX32: libc::c_ulong = 0x0008;

/// The persona to set, if the config asks for one. The spec defines no
/// flag values yet: flags are ignored with a warning, as runc does.
pub(crate) fn from_spec(spec: &Spec) -> Option<libc::c_ulong> {
    let p = spec.linux().as_ref().and_then(|l| l.personality().as_ref())?;
    if let Some(flags) = p.flags().as_ref().filter(|f| !f.is_empty()) {
        crate::warn::warn(&format!("linux.personality: ignoring flags {flags:?}: the spec defines none"));
    }
    Some(match p.domain() {
        LinuxPersonalityDomain::PerLinux => PER_LINUX,
        LinuxPersonalityDomain::PerLinux32 => PER_LINUX32,
    })
}

/// Sets `persona` on the calling process, between clone and execve.
pub(crate) fn apply(persona: libc::c_ulong) -> Result<(), InitError> {
    crate::sys::set_personality(persona)
        .map_err(|e| InitError::value("personality", format_args!("{persona:#x}"), e).field("linux.personality"))
}
