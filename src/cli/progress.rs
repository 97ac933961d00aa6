//! Progress of long commands on a terminal (indicatif): drawn to stderr only when stderr is a
//! terminal and the command prints no JSON; otherwise a [`Progress`] draws nothing and the
//! command's output is byte for byte what it is without one.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressFinish, ProgressStyle};
use std::borrow::Cow;
use std::io::IsTerminal;

/// A progress bar, or nothing. Cloning shares the bar (threads may advance it).
#[derive(Clone, Default)]
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A bar of `len` steps named `what`, drawn to stderr when stderr is a terminal and
    /// `json` is false; [`Progress::none`] otherwise.
    pub fn new(len: u64, what: &str, json: bool) -> Progress {
        if json || !std::io::stderr().is_terminal() {
            return Progress::none();
        }
        // Cleared when the last clone is dropped, on success or error alike.
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr())
            .with_finish(ProgressFinish::AndClear);
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix} [{bar:30.cyan/blue}] {pos}/{len} {msg} ({elapsed}, about {eta} left)",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        bar.set_prefix(what.to_string());
        // Drawn at once (later updates are rate-limited): even a short run shows it started.
        bar.tick();
        Progress { bar: Some(bar) }
    }

    /// Draws nothing.
    pub fn none() -> Progress {
        Progress { bar: None }
    }

    pub fn inc(&self, n: u64) {
        if let Some(b) = &self.bar {
            b.inc(n);
        }
    }

    /// The text after the counts (e.g. the size or seed at hand).
    pub fn set_message(&self, msg: impl Into<Cow<'static, str>>) {
        if let Some(b) = &self.bar {
            b.set_message(msg);
        }
    }

    /// Runs `f` (which prints) with the bar hidden, so lines do not mix with it.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.bar {
            Some(b) => b.suspend(f),
            None => f(),
        }
    }

    /// Removes the bar from the terminal (as dropping the last clone does).
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
