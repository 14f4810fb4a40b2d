//! `features`: the runtime-spec features document, indented 4 spaces like runc's.

pub(crate) fn run() -> anyhow::Result<u8> {
    out!("{}", tinyrun::features::features().to_json());
    Ok(0)
}
