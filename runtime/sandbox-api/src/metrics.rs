//! `GET /metrics`: Prometheus text. Counted in the server as requests are
//! answered; the live boxes are counted from the owner records.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use axum::http::StatusCode;

/// Upper bounds of the start-latency histogram, in seconds.
const BUCKETS: [f64; 10] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

#[derive(Default)]
pub(crate) struct Metrics {
    commands: AtomicU64,
    pool_hits: AtomicU64,
    pool_misses: AtomicU64,
    /// Requests answered by status class (1xx..5xx).
    by_class: [AtomicU64; 5],
    /// Box starts: count per bucket (cumulative at render), the sum in µs.
    starts: [AtomicU64; BUCKETS.len() + 1],
    start_sum_us: AtomicU64,
}

impl Metrics {
    pub(crate) fn request(&self, s: StatusCode) {
        let class = usize::from(s.as_u16() / 100).clamp(1, 5) - 1;
        self.by_class[class].fetch_add(1, Relaxed);
    }

    pub(crate) fn command(&self) {
        self.commands.fetch_add(1, Relaxed);
    }

    pub(crate) fn pool(&self, hit: bool) {
        match hit {
            true => self.pool_hits.fetch_add(1, Relaxed),
            false => self.pool_misses.fetch_add(1, Relaxed),
        };
    }

    pub(crate) fn started(&self, took: Duration) {
        let s = took.as_secs_f64();
        let i = BUCKETS.iter().position(|b| s <= *b).unwrap_or(BUCKETS.len());
        self.starts[i].fetch_add(1, Relaxed);
        self.start_sum_us.fetch_add(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Relaxed);
    }

    pub(crate) fn render(&self, live: usize) -> String {
        let mut t = String::new();
        let _ = writeln!(t, "# HELP tinyrun_api_boxes_live Boxes clients made that are live.");
        let _ = writeln!(t, "# TYPE tinyrun_api_boxes_live gauge\ntinyrun_api_boxes_live {live}");
        let counters = [
            ("tinyrun_api_commands_total", "Commands run in boxes.", &self.commands),
            ("tinyrun_api_pool_hits_total", "Runs that took a pool's box.", &self.pool_hits),
            ("tinyrun_api_pool_misses_total", "Runs that found the pool empty.", &self.pool_misses),
        ];
        for (name, help, v) in counters {
            let _ = writeln!(t, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}", v.load(Relaxed));
        }
        let _ = writeln!(t, "# HELP tinyrun_api_requests_total Requests answered, by status class.");
        let _ = writeln!(t, "# TYPE tinyrun_api_requests_total counter");
        for (i, v) in self.by_class.iter().enumerate() {
            let _ = writeln!(t, "tinyrun_api_requests_total{{code=\"{}xx\"}} {}", i + 1, v.load(Relaxed));
        }
        let name = "tinyrun_api_box_start_seconds";
        let _ = writeln!(t, "# HELP {name} Time to make a box (launch) or to run a command in a fresh one.");
        let _ = writeln!(t, "# TYPE {name} histogram");
        let mut total = 0;
        for (i, b) in BUCKETS.iter().enumerate() {
            total += self.starts[i].load(Relaxed);
            let _ = writeln!(t, "{name}_bucket{{le=\"{b}\"}} {total}");
        }
        total += self.starts[BUCKETS.len()].load(Relaxed);
        let _ = writeln!(t, "{name}_bucket{{le=\"+Inf\"}} {total}");
        #[allow(clippy::cast_precision_loss, reason = "microseconds, shown as seconds")]
        let sum = self.start_sum_us.load(Relaxed) as f64 / 1e6;
        let _ = writeln!(t, "{name}_sum {sum}\n{name}_count {total}");
        t
    }
}
