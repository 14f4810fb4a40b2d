use tinyrun::{RunOptions, Runtime};

use crate::args::{Cli, RunArgs};
use crate::logging::Logger;

pub(crate) fn run(rt: &Runtime, cli: &Cli, a: &RunArgs, log: &Logger) -> anyhow::Result<u8> {
    let opts = RunOptions {
        create: super::create::options(cli, &a.create, a.detach, log)?,
        keep: a.keep,
        no_subreaper: a.no_subreaper,
    };
    let code = rt.run(&a.create.id, &opts)?;
    Ok(u8::try_from(code).unwrap_or(255))
}
