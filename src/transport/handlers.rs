//! The receive callbacks of the 255 tags, and what becomes of a callback that panics.
//!
//! Contract: a callback that panics is caught where it ran ([`Handlers::call`]); the message
//! counts as delivered, and the transport finishes the batch it was handling (every other
//! message is delivered, every receive buffer reposted, every completion recorded). Then
//! [`Handlers::raise`], at the end of the progress call, re-raises the first panic of the batch
//! to the caller (later ones of the same batch are logged and counted). The transport stays
//! usable: the next progress call goes on where this one stopped.
//!
//! A callback registered with the transport ([`TransportHandler`]) gets the transport itself
//! and may send, put, get and run atomics from inside (ob1 answers a rendezvous from its
//! receive callback). While it runs, its slot of the table is empty
//! ([`Handlers::take_callback`]) and
//! the transport counts the depth of callbacks ([`super::Transport::in_callback`]): progress
//! called from inside a callback returns at once without receiving (so messages of one peer
//! never overtake a callback still running), and calls that wait on progress (flush,
//! connect_all) are refused.

use super::{Handler, Tag, TransportHandler};
use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

/// The callback of one tag.
pub(super) enum Callback {
    /// Sees the message only.
    Plain(Handler),
    /// Sees the transport too, and may call it.
    WithTransport(TransportHandler),
}

pub(super) struct Handlers {
    table: Vec<Option<Callback>>,
    /// The first panic of the current batch.
    caught: Option<Box<dyn Any + Send>>,
    /// Callback panics caught since the transport opened.
    panics: u64,
}

impl Default for Handlers {
    fn default() -> Self {
        Handlers {
            table: (0..=255).map(|_| None).collect(),
            caught: None,
            panics: 0,
        }
    }
}

/// The message of a panic payload, when it has one.
pub(super) fn panic_text(p: &(dyn Any + Send)) -> &str {
    p.downcast_ref::<&str>()
        .copied()
        .or_else(|| p.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

impl Handlers {
    pub fn set(&mut self, tag: Tag, h: Handler) {
        self.table[tag as usize] = Some(Callback::Plain(h));
    }

    pub fn set_with_transport(&mut self, tag: Tag, h: TransportHandler) {
        self.table[tag as usize] = Some(Callback::WithTransport(h));
    }

    /// Whether `tag` has a callback.
    pub fn is_set(&self, tag: Tag) -> bool {
        self.table[tag as usize].is_some()
    }

    /// Whether the callback of `tag` wants the transport (then the caller takes it out with
    /// [`Handlers::take_callback`] and calls it itself).
    pub fn wants_transport(&self, tag: Tag) -> bool {
        matches!(self.table[tag as usize], Some(Callback::WithTransport(_)))
    }

    /// Takes the callback of `tag` out of the table while it runs.
    pub fn take_callback(&mut self, tag: Tag) -> Option<Callback> {
        self.table[tag as usize].take()
    }

    /// Puts a callback taken by [`Handlers::take_callback`] back, unless another was set for
    /// its tag meanwhile (by the callback itself: the newer one stays).
    pub fn put_back(&mut self, tag: Tag, cb: Callback) {
        let slot = &mut self.table[tag as usize];
        if slot.is_none() {
            *slot = Some(cb);
        }
    }

    /// Runs the callback of `tag` on a message of `peer`; a panic is caught and kept (the
    /// first of the batch) or logged. A callback that wants the transport is not called here
    /// (see [`Handlers::wants_transport`]).
    pub fn call(&mut self, peer: u32, tag: Tag, data: &[u8]) {
        let h = match self.table[tag as usize].as_mut() {
            Some(Callback::Plain(h)) => h,
            Some(Callback::WithTransport(_)) => {
                debug_assert!(false, "a transport callback is called by the transport");
                return;
            }
            None => {
                tracing::warn!(peer, tag, "message for a tag with no handler dropped");
                return;
            }
        };
        // AssertUnwindSafe: after a panic the callback (and what it captured) is still called
        // for later messages; whether its own state is usable is the callback's affair, as it
        // is for a panic caught anywhere else. The transport's state is not touched by it.
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| h(peer, data))) {
            self.caught(peer, tag, payload);
        }
    }

    /// Counts and keeps (or logs) the panic of a callback of `tag` on a message of `peer`.
    pub fn caught(&mut self, peer: u32, tag: Tag, payload: Box<dyn Any + Send>) {
        self.panics += 1;
        tracing::error!(
            peer,
            tag,
            panic = panic_text(payload.as_ref()),
            "a receive callback panicked; the batch is finished, then the panic goes to the \
             caller of progress"
        );
        if self.caught.is_none() {
            self.caught = Some(payload);
        }
    }

    /// Callback panics caught since the transport opened.
    pub fn panics(&self) -> u64 {
        self.panics
    }

    /// Takes the first panic of the batch, if a callback panicked.
    pub fn take(&mut self) -> Option<Box<dyn Any + Send>> {
        self.caught.take()
    }

    /// Re-raises the first panic of the batch (call once the batch is consistent).
    pub fn raise(&mut self) {
        if let Some(p) = self.take() {
            resume_unwind(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A batch of five messages whose third callback panics: the other four still run, and
    /// the panic comes out of `raise` (once), with its message.
    #[test]
    fn a_panicking_callback_is_caught_and_the_batch_goes_on() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut hs = Handlers::default();
        let s = seen.clone();
        hs.set(
            7,
            Box::new(move |peer, data: &[u8]| {
                if data == b"2" {
                    panic!("callback panic on message 2");
                }
                s.lock().unwrap().push((peer, data.to_vec()));
            }),
        );
        for i in 0..5u8 {
            hs.call(1, 7, &[b'0' + i]);
        }
        let got: Vec<Vec<u8>> = seen.lock().unwrap().iter().map(|x| x.1.clone()).collect();
        assert_eq!(got, [b"0", b"1", b"3", b"4"].map(|b| b.to_vec()));
        assert_eq!(hs.panics(), 1);
        let p = std::panic::catch_unwind(AssertUnwindSafe(|| hs.raise())).unwrap_err();
        assert_eq!(panic_text(p.as_ref()), "callback panic on message 2");
        // Raised once: the next batch starts clean.
        hs.raise();
        // The callback still runs after its panic.
        hs.call(2, 7, b"5");
        assert_eq!(seen.lock().unwrap().last().unwrap(), &(2, b"5".to_vec()));
    }

    #[test]
    fn only_the_first_panic_of_a_batch_is_kept() {
        let mut hs = Handlers::default();
        hs.set(1, Box::new(|_, d: &[u8]| panic!("panic {}", d[0])));
        hs.call(0, 1, &[1]);
        hs.call(0, 1, &[2]);
        assert_eq!(hs.panics(), 2);
        let p = hs.take().expect("a panic kept");
        assert_eq!(panic_text(p.as_ref()), "panic 1");
        assert!(hs.take().is_none());
    }
}
