use tinyrun::Runtime;

use crate::args::IdArg;

/// Pretty JSON, two-space indent, no trailing newline: runc's exact shape.
pub(crate) fn run(rt: &Runtime, a: &IdArg) -> anyhow::Result<u8> {
    let st = rt.peek(&a.id)?.state();
    out!("{}", serde_json::to_string_pretty(&st)?);
    Ok(0)
}
