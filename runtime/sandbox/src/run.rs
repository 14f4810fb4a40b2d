//! A one-shot run: a fresh box made for one command and removed once the
//! command is done, its timeout enforced from outside (module `wait`), with
//! a structured result. Runs in the runtime process, which supervises the
//! box: the box dies with it.

use std::path::Path;
use std::time::Instant;

use nix::unistd::Pid;
use tinyrun::Init;

use crate::error::Result;
use crate::layout;
use crate::make;
use crate::options::SandboxOptions;
use crate::result::{not_run_as_result, with_writes, SandboxResult};
use crate::spec;
use crate::stdio::Stdio;
use crate::wait::{finish, Child, Interrupts, Scope, Watch};

/// Runs `cmd` in a fresh sandbox and removes it. With `capture`, output is
/// collected into the result; otherwise it goes to our stdout/stderr.
/// The caller has validated `opts`.
pub(crate) fn run(root: &Path, opts: &SandboxOptions, cmd: &[String], capture: bool) -> Result<SandboxResult> {
    let id = layout::new_id(layout::ONE_SHOT)?;
    let bundle = layout::bundle(root, &id);
    let started = Instant::now();
    let _signals = Interrupts::block()?;
    // Held until the box is removed: the garbage collection leaves it.
    let lock = crate::boxlock::lock(root, &id)?;
    let result = (|| {
        let ids = make::provision(root, &id, opts)?;
        spec::write_bundle(&bundle, &id, opts, spec::Program::Command(cmd), ids)?;
        let watch = make::files_in(&bundle, opts)?;
        let mut io = Stdio::direct(capture, opts.interactive)?;
        let mut c = make::create(root, &id, opts, io.fds(), Init::Program)?;
        io.started();
        let pid = Pid::from_raw(c.pid());
        make::egress(root, &id, c.pid(), opts)?;
        // We answer the box's refused calls from here on. Its network
        // record starts empty: the box is new.
        let net = capture.then(|| (crate::net::NetWatch::open(root, &id, c.pid()), Default::default()));
        let recorded = Watch { refusals: c.refusals(), net, report: capture, ..Watch::default() };
        c.start()?;
        drop(c);
        let rt = layout::runtime(root);
        let deadline = started + opts.timeout;
        let res = finish(&rt, &id, Child::Own(pid), started, deadline, &mut io, opts.output_cap, Scope::Box, recorded)?;
        with_writes(res, watch, &bundle)
    })();
    let result = not_run_as_result(result, capture, started);
    let cleanup = crate::teardown::remove_box(root, &id, &lock);
    match (result, cleanup) {
        (Ok(r), Ok(())) => Ok(r),
        (Err(e), _) => Err(e),
        (Ok(_), Err(e)) => Err(e),
    }
}
