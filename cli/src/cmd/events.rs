use std::io::Write;
use std::time::Duration;

use tinyrun::Runtime;

use crate::args::EventsArgs;

/// `--stats`: one stats line. Otherwise a stream until the container stops.
pub(crate) fn run(rt: &Runtime, a: &EventsArgs) -> anyhow::Result<u8> {
    let interval = parse_go_duration(&a.interval).map_err(|e| anyhow::anyhow!("--interval: {e}"))?;
    if interval.is_zero() {
        anyhow::bail!("duration interval must be greater than 0");
    }
    let c = rt.load(&a.id)?;
    if a.stats {
        outln!("{}", c.stats_event()?);
        return Ok(0);
    }
    let mut out = std::io::stdout().lock();
    c.events(interval, &mut |line| writeln!(out, "{line}").and_then(|()| out.flush()).is_ok())?;
    Ok(0)
}

/// A Go `time.Duration` string: `5s`, `100ms`, `1m30s`, `1.5s`, `0`.
pub(crate) fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("invalid duration {s:?}");
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.starts_with('-') {
        return Err(format!("duration {s:?} is negative"));
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let n = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(bad)?;
        let num: f64 = rest[..n].parse().map_err(|_| bad())?;
        rest = &rest[n..];
        let u = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..u] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += num * scale;
        rest = &rest[u..];
    }
    Ok(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_go_duration("100ms").unwrap(), Duration::from_millis(100));
        assert_eq!(parse_go_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_go_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_go_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_go_duration("5").is_err());
        assert!(parse_go_duration("-1s").is_err());
        assert!(parse_go_duration("3x").is_err());
    }
}
