//! `events`: the container's statistics and OOM kills as runc prints them,
//! one JSON object per line: `{"type":"stats","id":…,"data":{…}}` every
//! interval, and `{"type":"oom","id":…}` when the kernel's OOM killer kills
//! a process of the container. Runs in the runtime process; the CLI prints.
//!
//! OOM kills are seen by polling the cgroup's `oom_kill` counter (v1
//! `memory.oom_control`, v2 `memory.events`) every 100 ms, not by eventfd:
//! the counter can't miss a kill that happened between two looks.

use std::time::{Duration, Instant};

use serde::Serialize;

use super::state::Status;
use super::Container;
use crate::cgroups::StatsData;
use crate::error::{Result, RuntimeError};
use crate::state::proc_start_time;

#[derive(Serialize)]
struct Event<'a> {
    #[serde(rename = "type")]
    typ: &'a str,
    id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a StatsData>,
}

/// How often the OOM counter and the container's liveness are looked at.
const POLL: Duration = Duration::from_millis(100);

impl Container {
    fn running_or_err(&self) -> Result<()> {
        if self.status() == Status::Stopped {
            return Err(RuntimeError::InvalidState(format!("container with id {} is not running", self.rec.id)));
        }
        Ok(())
    }

    /// One stats event line (`events --stats`).
    pub fn stats_event(&self) -> Result<String> {
        self.running_or_err()?;
        let data = self.cgroup_required()?.stats()?;
        Ok(self.line("stats", Some(&data)))
    }

    fn line(&self, typ: &str, data: Option<&StatsData>) -> String {
        serde_json::to_string(&Event { typ, id: &self.rec.id, data }).unwrap_or_default()
    }

    /// Streams events to `emit` until the container stops (`Ok`) or `emit`
    /// returns false (the reader went away). A stats event comes every
    /// `interval`, an oom event as soon as the kill is seen. Takes the
    /// container by value and lets go of its lock first: a stream may run
    /// for days while `kill`, `update` or `delete` need the container.
    pub fn events(self, interval: Duration, emit: &mut dyn FnMut(&str) -> bool) -> Result<()> {
        self.running_or_err()?;
        if interval.is_zero() {
            return Err(RuntimeError::InvalidArgument("events: the interval must be greater than 0".into()));
        }
        let cg = self.cgroup_required()?;
        let Container { lock, rec, .. } = self;
        drop(lock);
        let line = |typ: &str, data: Option<&StatsData>| {
            serde_json::to_string(&Event { typ, id: &rec.id, data }).unwrap_or_default()
        };
        let alive = || matches!(proc_start_time(rec.pid), Some((t, false)) if t == rec.start_time);
        let mut ooms = cg.oom_kills();
        let mut next = Instant::now() + interval;
        loop {
            std::thread::sleep(POLL.min(next.saturating_duration_since(Instant::now())));
            let now = cg.oom_kills();
            if now > ooms {
                ooms = now;
                if !emit(&line("oom", None)) {
                    return Ok(());
                }
            }
            if !alive() {
                return Ok(());
            }
            if Instant::now() >= next {
                next += interval;
                // The container may stop between the check and the read.
                let Ok(data) = cg.stats() else { continue };
                if !emit(&line("stats", Some(&data))) {
                    return Ok(());
                }
            }
        }
    }
}
