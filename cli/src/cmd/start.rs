use tinyrun::Runtime;

use crate::args::IdArg;

pub(crate) fn run(rt: &Runtime, a: &IdArg) -> anyhow::Result<u8> {
    rt.load(&a.id)?.start()?;
    Ok(0)
}
