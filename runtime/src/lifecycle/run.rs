//! `run`: create + start, and in the foreground wait for the program,
//! forwarding signals, then delete.
//!
//! Every signal is blocked *before* init is cloned, so a program that exits
//! at once can't slip its SIGCHLD past us: it stays pending until the wait
//! loop below takes it.

use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::{CreateOptions, Runtime};
use crate::error::{Result, RuntimeError};

/// What `run` takes besides the create options.
#[derive(Debug, Default, Clone)]
pub struct RunOptions {
    pub create: CreateOptions,
    /// Don't delete the container when its program exits.
    pub keep: bool,
    /// Don't become a child subreaper.
    pub no_subreaper: bool,
}

impl Runtime {
    /// Runs `id`. Detached, returns 0 once it runs; in the foreground,
    /// returns the program's exit status (128+N when killed by signal N).
    pub fn run(&self, id: &str, opts: &RunOptions) -> Result<i32> {
        if opts.create.detach {
            let mut c = self.create(id, &opts.create)?;
            return self.start_or_delete(&mut c, id).map(|_| 0);
        }
        let all = SigSet::all();
        let mut old = SigSet::empty();
        nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&all), Some(&mut old))
            .map_err(|e| RuntimeError::Sys(crate::error::SysError::bare("sigprocmask", e)))?;
        if !opts.no_subreaper {
            // Processes the program leaves behind (no pid namespace) are
            // reparented to us and reaped here, not by the host's init.
            let _ = nix::sys::prctl::set_child_subreaper(true);
        }
        let result = (|| {
            let mut c = self.create(id, &opts.create)?;
            let pid = Pid::from_raw(c.pid());
            self.start_or_delete(&mut c, id)?;
            drop(c);
            let code = wait_forwarding(pid);
            if !opts.keep {
                self.delete(id, true)?;
            }
            Ok(code)
        })();
        let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
        result
    }

    fn start_or_delete(&self, c: &mut super::Container, id: &str) -> Result<()> {
        if let Err(e) = c.start() {
            let _ = self.delete(id, true);
            return Err(e);
        }
        Ok(())
    }
}

/// Waits for `init`, forwarding every signal we get to it, reaping any other
/// child on the way.
fn wait_forwarding(init: Pid) -> i32 {
    let all = SigSet::all();
    loop {
        // Reap first: the SIGCHLD may already have been taken by an earlier
        // turn while init's status was not yet there.
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(p, code)) if p == init => return code,
                Ok(WaitStatus::Signaled(p, sig, _)) if p == init => return 128 + sig as i32,
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(_) => continue,
            }
        }
        match all.wait() {
            Ok(Signal::SIGCHLD) | Ok(Signal::SIGWINCH) | Ok(Signal::SIGURG) => {}
            Ok(sig) => {
                let _ = nix::sys::signal::kill(init, sig);
            }
            Err(_) => {}
        }
    }
}
