//! A cheap tick counter for hot loops. Reading the time through `clock_gettime` is a system
//! call where the clock source has no vDSO path (hpet, as in TCG guests: a few microseconds
//! each, and an occasional millisecond), so per-message timing and periodic checks read the
//! CPU's time-stamp counter instead, as perftest does, and convert with a [`TickRate`]
//! measured against [`std::time::Instant`].

use std::time::{Duration, Instant};

/// The tick counter: the time-stamp counter on x86_64, nanoseconds since the first call
/// elsewhere. Monotonic enough for intervals on one machine (invariant TSC; under TCG the
/// host's counter); callers treat a backwards step as zero elapsed.
#[inline]
pub fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no preconditions and touches no memory.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Ticks per second, measured between two (instant, ticks) readings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TickRate {
    per_sec: f64,
}

impl TickRate {
    /// The rate between `start` and `end` (taken later); `None` when less than 1 ms or no
    /// tick passed between them (too short to measure).
    pub fn between(start: (Instant, u64), end: (Instant, u64)) -> Option<TickRate> {
        let secs = end.0.saturating_duration_since(start.0).as_secs_f64();
        let t = end.1.saturating_sub(start.1);
        (secs >= 1e-3 && t > 0).then(|| TickRate {
            per_sec: t as f64 / secs,
        })
    }

    /// Measures the rate over at least `min` (sleeping in quarter steps; meant for start-up).
    pub fn measure(min: Duration) -> TickRate {
        let start = (Instant::now(), ticks());
        loop {
            std::thread::sleep(min / 4);
            if let Some(r) = TickRate::between(start, (Instant::now(), ticks())) {
                if start.0.elapsed() >= min {
                    return r;
                }
            }
        }
    }

    /// Ticks in `d`.
    pub fn ticks_in(&self, d: Duration) -> u64 {
        (d.as_secs_f64() * self.per_sec) as u64
    }

    /// Microseconds in `t` ticks.
    pub fn micros(&self, t: u64) -> f64 {
        t as f64 * 1e6 / self.per_sec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_converts_back_to_the_time_measured() {
        let r = TickRate::measure(Duration::from_millis(20));
        let start = (Instant::now(), ticks());
        std::thread::sleep(Duration::from_millis(30));
        let (i, t) = (Instant::now(), ticks());
        let by_clock = i.duration_since(start.0).as_secs_f64() * 1e6;
        let by_ticks = r.micros(t - start.1);
        // Loose: a loaded test machine may stretch either reading a little.
        assert!(
            (by_ticks / by_clock - 1.0).abs() < 0.2,
            "ticks say {by_ticks} us, the clock {by_clock} us"
        );
        assert_eq!(r.ticks_in(Duration::ZERO), 0);
    }

    #[test]
    fn too_short_an_interval_is_not_a_rate() {
        let now = (Instant::now(), ticks());
        assert_eq!(TickRate::between(now, now), None);
    }
}
