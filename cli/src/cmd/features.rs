pub(crate) fn run() -> anyhow::Result<u8> {
    anyhow::bail!("features is not implemented yet")
}
