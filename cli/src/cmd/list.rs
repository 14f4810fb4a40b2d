use std::io::Write;

use tinyrun::Runtime;

use crate::args::{ListArgs, ListFormat};

pub(crate) fn run(rt: &Runtime, a: &ListArgs) -> anyhow::Result<u8> {
    let all = rt.list()?;
    let mut out = std::io::stdout().lock();
    if a.quiet {
        for c in &all {
            writeln!(out, "{}", c.id)?;
        }
        return Ok(0);
    }
    match a.format {
        // runc prints `null` for an empty list (a nil Go slice).
        ListFormat::Json if all.is_empty() => writeln!(out, "null")?,
        ListFormat::Json => writeln!(out, "{}", serde_json::to_string(&all)?)?,
        ListFormat::Table => {
            let rows: Vec<[String; 6]> = all
                .iter()
                .map(|c| {
                    [
                        c.id.clone(),
                        c.pid.to_string(),
                        c.status.to_string(),
                        c.bundle.display().to_string(),
                        c.created.clone(),
                        c.owner.clone(),
                    ]
                })
                .collect();
            let head = ["ID", "PID", "STATUS", "BUNDLE", "CREATED", "OWNER"].map(String::from);
            let mut width = head.clone().map(|h| h.len());
            for r in &rows {
                for (w, c) in width.iter_mut().zip(r) {
                    *w = (*w).max(c.len());
                }
            }
            for r in std::iter::once(&head).chain(rows.iter()) {
                let line: Vec<String> = r.iter().zip(width).map(|(c, w)| format!("{c:<w$}")).collect();
                writeln!(out, "{}", line.join("   ").trim_end())?;
            }
        }
    }
    Ok(0)
}
