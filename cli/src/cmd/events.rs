use tinyrun::Runtime;

use crate::args::EventsArgs;

pub(crate) fn run(_rt: &Runtime, _a: &EventsArgs) -> anyhow::Result<u8> {
    anyhow::bail!("events is not implemented yet")
}
