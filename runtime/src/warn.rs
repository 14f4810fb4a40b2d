//! Warnings: config the runtime went on past instead of refusing, as runc
//! logs them at `level=warning` (an ignored `memory.kernel`, a failing
//! poststart hook). The caller chooses where they go; until it does they go
//! to stderr, so a warning is never lost.
//!
//! Only the parent process warns: nothing here runs between fork and exec.

use std::sync::OnceLock;

type Sink = Box<dyn Fn(&str) + Send + Sync>;

static SINK: OnceLock<Sink> = OnceLock::new();

/// Sends every later warning to `sink`. The first call wins; a library user
/// sets it once at start-up, as `tinyrun` points it at its `--log`.
pub fn set_warning_sink(sink: impl Fn(&str) + Send + Sync + 'static) {
    let _ = SINK.set(Box::new(sink));
}

/// Sends `msg` where [`set_warning_sink`] said (stderr until then). For
/// what a caller asked that was honoured only in part, never for an error.
pub fn warn(msg: &str) {
    match SINK.get() {
        Some(sink) => sink(msg),
        None => eprintln!("warning: {msg}"),
    }
}
