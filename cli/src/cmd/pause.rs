use tinyrun::Runtime;

use crate::args::IdArg;

pub(crate) fn pause(rt: &Runtime, a: &IdArg) -> anyhow::Result<u8> {
    rt.load(&a.id)?.pause()?;
    Ok(0)
}

pub(crate) fn resume(rt: &Runtime, a: &IdArg) -> anyhow::Result<u8> {
    rt.load(&a.id)?.resume()?;
    Ok(0)
}
