//! The GNU build id of the running program: the linker's hash of the
//! whole linked image (`ld --build-id`), so any change to the code gives
//! another id, and a copy of the binary (the sealed one `exe` re-executes)
//! keeps it. Read from the program's own mapped `PT_NOTE` segments, not
//! from the file: no system call, and nothing the file system can swap.
#![allow(unsafe_code)]

use std::ffi::c_void;

/// `NT_GNU_BUILD_ID` from elf.h: the note type of a build id.
const NT_GNU_BUILD_ID: u32 = 3;

/// The build id of the main program, if the linker wrote one.
pub(crate) fn build_id() -> Option<Vec<u8>> {
    let mut found: Option<Vec<u8>> = None;
    // SAFETY: `dl_iterate_phdr` calls `main_program_notes` with a valid
    // `dl_phdr_info` for each loaded object while holding the loader's
    // lock; `found` outlives the call, and the callback only reads.
    unsafe {
        libc::dl_iterate_phdr(Some(main_program_notes), (&raw mut found).cast::<c_void>());
    }
    found
}

/// The callback for `dl_iterate_phdr`: the first object reported is the
/// main program, the only one looked at (1 stops the walk).
unsafe extern "C" fn main_program_notes(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> libc::c_int {
    // SAFETY: `data` is the `Option<Vec<u8>>` `build_id` passed, and `info`
    // points at the loader's description of the object, valid during the
    // callback.
    let (found, info) = unsafe { (&mut *data.cast::<Option<Vec<u8>>>(), &*info) };
    if info.dlpi_phdr.is_null() {
        return 1;
    }
    // SAFETY: `dlpi_phdr` points at `dlpi_phnum` program headers, mapped
    // for as long as the object is loaded (the main program: always).
    let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
    for h in headers.iter().filter(|h| h.p_type == libc::PT_NOTE) {
        let (Ok(vaddr), Ok(len)) = (usize::try_from(h.p_vaddr), usize::try_from(h.p_memsz)) else { continue };
        let at = usize::try_from(info.dlpi_addr).ok().and_then(|base| base.checked_add(vaddr));
        let Some(at) = at else { continue };
        // SAFETY: a PT_NOTE segment lies inside a loaded, readable segment
        // of the object, at its load address plus `p_vaddr`, `p_memsz`
        // bytes long.
        let notes = unsafe { std::slice::from_raw_parts(at as *const u8, len) };
        if let Some(id) = gnu_build_id(notes) {
            *found = Some(id.to_vec());
            break;
        }
    }
    1
}

/// The build id in a run of ELF notes, each a header of three native
/// u32s (name size, descriptor size, type), then the name and the
/// descriptor, each padded to 4 bytes.
pub(crate) fn gnu_build_id(mut notes: &[u8]) -> Option<&[u8]> {
    let word = |b: &[u8], i: usize| b.get(i * 4..i * 4 + 4).map(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]));
    let pad = |n: usize| n.checked_add(3).map(|n| n & !3);
    while notes.len() >= 12 {
        let (namesz, descsz, kind) = (word(notes, 0)?, word(notes, 1)?, word(notes, 2)?);
        let (namesz, descsz) = (usize::try_from(namesz).ok()?, usize::try_from(descsz).ok()?);
        let name_end = 12usize.checked_add(pad(namesz)?)?;
        let desc_end = name_end.checked_add(pad(descsz)?)?;
        let name = notes.get(12..12 + namesz)?;
        let desc = notes.get(name_end..name_end.checked_add(descsz)?)?;
        if kind == NT_GNU_BUILD_ID && name == b"GNU\0" && !desc.is_empty() {
            return Some(desc);
        }
        notes = notes.get(desc_end..)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        for w in [u32::try_from(name.len()).unwrap(), u32::try_from(desc.len()).unwrap(), kind] {
            b.extend_from_slice(&w.to_ne_bytes());
        }
        for part in [name, desc] {
            b.extend_from_slice(part);
            b.resize(b.len().next_multiple_of(4), 0);
        }
        b
    }

    #[test]
    fn the_build_id_note_is_found_among_others() {
        let mut notes = note(b"GNU\0", 1, &[0, 0, 0, 0, 3, 2, 0, 0]);
        notes.extend(note(b"GNU\0", NT_GNU_BUILD_ID, &[0xab; 20]));
        assert_eq!(gnu_build_id(&notes), Some(&[0xab; 20][..]));
        assert_eq!(gnu_build_id(&notes[..notes.len() - 4]), None, "a cut note is no id");
        assert_eq!(gnu_build_id(&note(b"Go\0\0", NT_GNU_BUILD_ID, &[1; 20])), None);
    }

    #[test]
    fn this_test_program_has_a_build_id() {
        let id = build_id().expect("the linker writes a build id");
        assert!(id.len() >= 8, "{id:?}");
    }
}
