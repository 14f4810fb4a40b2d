use tinyrun::Runtime;

use crate::args::PsArgs;

pub(crate) fn run(_rt: &Runtime, _a: &PsArgs) -> anyhow::Result<u8> {
    anyhow::bail!("ps is not implemented yet")
}
