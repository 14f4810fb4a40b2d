use tinyrun::Runtime;

use crate::args::ExecArgs;
use crate::logging::Logger;

pub(crate) fn run(_rt: &Runtime, _a: &ExecArgs, _log: &Logger) -> anyhow::Result<u8> {
    anyhow::bail!("exec is not implemented yet")
}
