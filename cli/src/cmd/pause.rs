use tinyrun::Runtime;

use crate::args::IdArg;

pub(crate) fn pause(_rt: &Runtime, _a: &IdArg) -> anyhow::Result<u8> {
    anyhow::bail!("pause is not implemented yet")
}

pub(crate) fn resume(_rt: &Runtime, _a: &IdArg) -> anyhow::Result<u8> {
    anyhow::bail!("resume is not implemented yet")
}
