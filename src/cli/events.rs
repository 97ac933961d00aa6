//! `openib events`: prints the asynchronous events of a device (port up/down, QP errors).

use super::exit;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct EventsArgs {
    /// Device to watch (default: the first device).
    #[arg(long, short = 'd')]
    pub device: Option<String>,
    /// Stop after this many events (default: run until --timeout).
    #[arg(long)]
    pub count: Option<usize>,
    /// Stop after this many seconds.
    #[arg(long, default_value_t = 60.0)]
    pub timeout: f64,
    /// One JSON object per line instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: &EventsArgs) -> i32 {
    let list = match openib_sys::devices() {
        Ok(l) => l,
        Err(e @ openib_sys::Error::LibraryNotFound { .. }) => {
            eprintln!("openib events: {e}");
            return exit::NO_VERBS;
        }
        Err(e) => {
            eprintln!("openib events: {e}; {}", super::ports::NO_DEVICE_HINT);
            return exit::NO_DEVICE;
        }
    };
    let names: Vec<String> = list.iter().map(|d| d.name()).collect();
    let Some(info) = list
        .iter()
        .find(|d| a.device.as_ref().is_none_or(|want| *want == d.name()))
    else {
        eprintln!(
            "openib events: {}",
            match &a.device {
                Some(d) => format!("no device named {d} (devices: {})", names.join(", ")),
                None => super::ports::NO_DEVICE_HINT.to_string(),
            }
        );
        return exit::NO_DEVICE;
    };
    let ctx = match info.open() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("openib events: {e}");
            return exit::ERROR;
        }
    };
    drop(list);
    let deadline = Instant::now() + Duration::from_secs_f64(a.timeout.max(0.0));
    let mut seen = 0usize;
    while a.count.is_none_or(|c| seen < c) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match ctx.poll_async_event(left) {
            Ok(Some(ev)) => {
                seen += 1;
                if a.json {
                    println!(
                        "{}",
                        serde_json::json!({"device": ctx.name(), "event": format!("{:?}", ev.kind), "description": ev.description})
                    );
                } else {
                    println!("{}: {} ({:?})", ctx.name(), ev.description, ev.kind);
                }
            }
            Ok(None) => break,
            Err(e) => {
                eprintln!("openib events: {e}");
                return exit::ERROR;
            }
        }
    }
    if a.count.is_some_and(|c| seen < c) {
        eprintln!(
            "openib events: {seen} of {} event(s) within {} s",
            a.count.unwrap_or(0),
            a.timeout
        );
        return exit::ERROR;
    }
    exit::OK
}
