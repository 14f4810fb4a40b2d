use std::process::Command;

use tinyrun::Runtime;

use crate::args::{ListFormat, PsArgs};

/// `--format json`: the host pids as a JSON array and a newline. Table: the
/// host's `ps` (default `-ef`), keeping the header and the rows whose PID
/// column is one of the container's (runc's `ps`).
pub(crate) fn run(rt: &Runtime, a: &PsArgs) -> anyhow::Result<u8> {
    let pids = rt.load(&a.id)?.pids()?;
    if a.format == ListFormat::Json {
        outln!("{}", serde_json::to_string(&pids)?);
        return Ok(0);
    }
    let args: Vec<&str> =
        if a.ps_args.is_empty() { vec!["-ef"] } else { a.ps_args.iter().map(String::as_str).collect() };
    let out = Command::new("ps").args(&args).output().map_err(|e| anyhow::anyhow!("run ps: {e}"))?;
    if !out.status.success() {
        anyhow::bail!("ps {}: {}: {}", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    let col = header
        .split_whitespace()
        .position(|f| f == "PID")
        .ok_or_else(|| anyhow::anyhow!("couldn't find PID field in ps output"))?;
    outln!("{header}");
    for line in lines {
        let pid = line.split_whitespace().nth(col).and_then(|f| f.parse::<i32>().ok());
        if pid.is_some_and(|p| pids.contains(&p)) {
            outln!("{line}");
        }
    }
    Ok(0)
}
