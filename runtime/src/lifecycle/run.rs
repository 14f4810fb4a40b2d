//! `run`: create + start, and in the foreground wait for the program,
//! forwarding signals, then delete.
//!
//! Every signal is blocked *before* init is cloned, so a program that exits
//! at once can't slip its SIGCHLD past us: it stays pending until the wait
//! loop below takes it.

use std::os::fd::AsRawFd;

use nix::sys::signal::{SigSet, SigmaskHow};
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
        super::check_id(id)?;
        let bundle = crate::spec::load(&opts.create.bundle)?;
        if opts.create.detach {
            let c = self.create_from(id, &bundle, &opts.create, &Default::default(), None)?;
            return self.start_or_delete(c, id).map(|_| 0);
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
            // A foreground terminal: init sends the pty master to us.
            let terminal = bundle.spec.process().as_ref().and_then(|p| p.terminal()).unwrap_or(false);
            let pair =
                if opts.create.console_socket.is_none() && terminal { Some(crate::tty::console_pair()?) } else { None };
            let c = self.create_from(id, &bundle, &opts.create, &Default::default(), pair.as_ref().map(|p| &p.1))?;
            let master = match &pair {
                Some((ours, _)) => match crate::tty::recv_fd(ours) {
                    Ok(m) => Some(m),
                    Err(e) => {
                        drop(c);
                        let _ = self.delete(id, true);
                        return Err(e.into());
                    }
                },
                None => None,
            };
            drop(pair);
            // The program must see our window size from its first instant.
            if let Some(m) = &master {
                crate::tty::copy_winsize(0, m.as_raw_fd());
            }
            let pid = Pid::from_raw(c.pid());
            self.start_or_delete(c, id)?;
            let code = crate::process::foreground::wait(pid, master);
            if !opts.keep {
                self.delete(id, true)?;
            }
            Ok(code)
        })();
        let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
        result
    }

    /// Starts `c`; if that fails, deletes it. Takes the container (and so
    /// its lock) and lets go of it before deleting, which locks it again.
    fn start_or_delete(&self, mut c: super::Container, id: &str) -> Result<()> {
        let started = c.start();
        drop(c);
        if let Err(e) = started {
            let _ = self.delete(id, true);
            return Err(e);
        }
        Ok(())
    }
}
