//! Making the container's init process: the clone, the conversation with
//! it, and the script it runs.

pub(crate) mod exec_init;
pub(crate) mod finalize;
pub(crate) mod foreground;
pub(crate) mod init;
pub(crate) mod launch;
pub(crate) mod program;
pub(crate) mod resident;
pub(crate) mod sync;
pub(crate) mod title;

/// Refuses to go on in a multi-threaded process. Every operation that
/// clones (create, run, exec) calls this first: the child of a clone gets
/// only the calling thread, so a lock (malloc's, stdio's) held by another
/// thread at that moment stays locked in the child forever, and the child
/// runs Rust code between the clone and execve.
pub(crate) fn ensure_single_threaded() -> crate::error::Result<()> {
    use procfs::FromRead;
    let threads = std::fs::File::open("/proc/self/stat")
        .ok()
        .and_then(|f| procfs::process::Stat::from_read(f).ok())
        .map_or(1, |s| u64::try_from(s.num_threads).unwrap_or(u64::MAX));
    if threads > 1 {
        return Err(crate::error::RuntimeError::NotSingleThreaded(threads));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_second_thread_is_refused() {
        // The test harness runs tests on threads of its own: this process
        // has several already, and one more makes sure of it.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || rx.recv());
        let err = super::ensure_single_threaded().unwrap_err().to_string();
        assert!(err.contains("single-threaded"), "{err}");
        drop(tx);
        let _ = t.join();
    }
}
