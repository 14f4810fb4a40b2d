use tinyrun::{parse_signal, Runtime, RuntimeError};

use crate::args::KillArgs;

pub(crate) fn run(rt: &Runtime, a: &KillArgs) -> anyhow::Result<u8> {
    let sig = parse_signal(&a.signal)?;
    match rt.load(&a.id)?.kill(sig, a.all) {
        // runc swallows "not running" for --all: callers send it after the
        // init has exited, to sweep up stragglers.
        Err(RuntimeError::NotRunning) if a.all => Ok(0),
        r => r.map(|_| 0).map_err(Into::into),
    }
}
