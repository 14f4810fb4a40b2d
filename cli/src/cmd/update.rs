use tinyrun::Runtime;

use crate::args::UpdateArgs;

pub(crate) fn run(_rt: &Runtime, _a: &UpdateArgs) -> anyhow::Result<u8> {
    anyhow::bail!("update is not implemented yet")
}
