//! Log lines as runc writes them: logrus text (`time="…" level=error msg="…"`)
//! or one JSON object per line (`{"level","msg","time"}`), to `--log` or
//! stderr. containerd keeps the last `error` line of a JSON log and podman
//! reads the whole file as one object, so a failure writes exactly one line
//! and nothing else is logged unless `--debug` asks for it. The sandbox's
//! commands, which no runc caller parses, tell a person what failed in
//! one sentence instead (`Logger::sentence`).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

use anyhow::Context;

use crate::args::{Cli, LogFormat};

pub(crate) struct Logger {
    file: Option<File>,
    json: bool,
    debug: bool,
}

impl Logger {
    pub(crate) fn new(cli: &Cli) -> anyhow::Result<Logger> {
        let file = match &cli.log {
            Some(p) if !p.as_os_str().is_empty() => Some(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .custom_flags(libc::O_SYNC)
                    .mode(0o644)
                    .open(p)
                    .with_context(|| format!("open log file {}", p.display()))?,
            ),
            _ => None,
        };
        Ok(Logger { file, json: cli.log_format == LogFormat::Json, debug: cli.debug })
    }

    fn line(&self, level: &str, msg: &str) -> String {
        let time = humantime::format_rfc3339_nanos(std::time::SystemTime::now()).to_string();
        if self.json {
            serde_json::json!({"level": level, "msg": msg, "time": time}).to_string()
        } else {
            format!("time={time:?} level={level} msg={msg:?}")
        }
    }

    /// The one error line of a failed command. It goes to the log and, as
    /// runc does, to stderr too when the log is a file.
    pub(crate) fn error(&self, msg: &str) {
        let line = self.line("error", msg);
        match &self.file {
            Some(f) => {
                let mut f: &File = f;
                let _ = writeln!(f, "{line}");
                eprintln!(
                    "time={:?} level=error msg={msg:?}",
                    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
                );
            }
            None => eprintln!("{line}"),
        }
    }

    /// The failure of a command of tinyrun's own (not runc's), for a person
    /// to read: `PREFIX: MSG` on stderr; the log file, if any, still gets
    /// its line in the log's format.
    pub(crate) fn sentence(&self, prefix: &str, msg: &str) {
        if let Some(f) = &self.file {
            let mut f: &File = f;
            let _ = writeln!(f, "{}", self.line("error", msg));
        }
        eprintln!("{prefix}: {msg}");
    }

    /// Config the runtime went on past, logged as runc logs it: to the log
    /// file, or to stderr without one.
    pub(crate) fn warn(&self, msg: &str) {
        self.write("warning", msg);
    }

    /// A second handle on the same log, for the runtime library's warnings.
    pub(crate) fn try_clone(&self) -> anyhow::Result<Logger> {
        let file = self.file.as_ref().map(File::try_clone).transpose().context("duplicate the log file")?;
        Ok(Logger { file, json: self.json, debug: self.debug })
    }

    pub(crate) fn debug(&self, msg: &str) {
        if self.debug {
            self.write("debug", msg);
        }
    }

    fn write(&self, level: &str, msg: &str) {
        let line = self.line(level, msg);
        match &self.file {
            Some(f) => {
                let mut f: &File = f;
                let _ = writeln!(f, "{line}");
            }
            None => eprintln!("{line}"),
        }
    }
}
