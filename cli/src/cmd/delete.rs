use tinyrun::Runtime;

use crate::args::DeleteArgs;

pub(crate) fn run(rt: &Runtime, a: &DeleteArgs) -> anyhow::Result<u8> {
    rt.delete(&a.id, a.force)?;
    Ok(0)
}
