//! A process's title: what `ps` and `/proc/PID/cmdline` show of it.
//!
//! A process forked from `tinyrun` keeps its caller's command line, and
//! that can hold secrets (`sandbox launch --env API_KEY=...`) that every
//! local user could read in `/proc/PID/cmdline` for as long as the process
//! lives: a box's resident init, the sandbox's reaper and pool refills.
//! Those overwrite it with a fixed title first thing. It is done through
//! `/proc/self/mem` (prctl(PR_SET_MM) would need CAP_SYS_RESOURCE), while
//! the process is still the host's root: the file is then still its own to
//! open.

use std::ffi::CStr;
use std::io;

/// Replaces our command line with `title` (cut to fit, the rest zeroed)
/// and our name (`comm`) with its first 15 bytes.
pub fn conceal_cmdline(title: &CStr) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // Fields 48 and 49, arg_start and arg_end, counted after the command
    // name (field 2), which is in parentheses and may hold anything.
    let mut after = stat.get(stat.rfind(')').unwrap_or(0) + 1..).unwrap_or_default().split_whitespace().skip(45);
    let mut field = || after.next().and_then(|f| f.parse::<u64>().ok());
    let (Some(start), Some(end)) = (field(), field()) else {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "no arg_start and arg_end in /proc/self/stat"));
    };
    let len = usize::try_from(end.saturating_sub(start)).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let text = title.to_bytes();
    let mut buf = vec![0u8; len];
    let n = text.len().min(len.saturating_sub(1));
    if let (Some(dst), Some(src)) = (buf.get_mut(..n), text.get(..n)) {
        dst.copy_from_slice(src);
    }
    nix::sys::prctl::set_name(title)?;
    let mem = std::fs::OpenOptions::new().write(true).open("/proc/self/mem")?;
    mem.write_all_at(&buf, start)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_is_overwritten() {
        // This test process's own command line: nothing else reads it.
        super::conceal_cmdline(c"tinyrun-test").unwrap();
        let cmdline = std::fs::read("/proc/self/cmdline").unwrap();
        let shown: Vec<u8> = cmdline.iter().copied().take_while(|b| *b != 0).collect();
        assert_eq!(shown, b"tinyrun-test");
        assert!(cmdline.iter().skip(shown.len()).all(|b| *b == 0), "{cmdline:?}");
    }
}
