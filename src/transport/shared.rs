//! [`SharedTransport`]: the transport behind a mutex, for several threads at once
//! (MPI_THREAD_MULTIPLE). Every call takes the lock for its duration; callbacks run inside
//! `progress` with the lock held, so they must not call the transport. A callback that panics
//! makes that thread's `progress` panic after the batch is finished; the transport stays usable
//! from every handle.

use super::{Completion, EndpointState, Handler, RemoteRegion, Tag, Transport, TransportError};
use openib_sys::MemoryRegion;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Writes, for each listed [`Transport`] method, a method of [`SharedTransport`] with the same
/// name and arguments that takes the lock for the duration of the call.
macro_rules! forward_locked {
    ($( fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty; )*) => {
        impl SharedTransport {
            $(
                #[doc = concat!("[`Transport::", stringify!($name), "`], under the lock.")]
                #[allow(clippy::too_many_arguments)]
                pub fn $name(&self $(, $arg: $ty)*) -> $ret {
                    self.lock().$name($($arg),*)
                }
            )*
        }
    };
}

// One line per method: the table of what every thread may call directly.
#[rustfmt::skip]
forward_locked! {
    fn rank(&self) -> u32;
    fn size(&self) -> u32;
    fn on_tag(&self, tag: Tag, h: Handler) -> Result<(), TransportError>;
    fn register(&self, len: usize) -> Result<Arc<MemoryRegion>, TransportError>;
    fn send(&self, peer: u32, tag: Tag, data: &[u8]) -> Result<u64, TransportError>;
    fn send_shared(&self, peer: u32, tag: Tag, data: &Arc<[u8]>) -> Result<u64, TransportError>;
    fn put(&self, peer: u32, local: &Arc<MemoryRegion>, offset: usize, remote: RemoteRegion, roffset: u64, len: usize) -> Result<u64, TransportError>;
    fn get(&self, peer: u32, local: &Arc<MemoryRegion>, offset: usize, remote: RemoteRegion, roffset: u64, len: usize) -> Result<u64, TransportError>;
    fn fetch_add(&self, peer: u32, local: &Arc<MemoryRegion>, offset: usize, remote: RemoteRegion, roffset: u64, add: u64) -> Result<u64, TransportError>;
    fn compare_swap(&self, peer: u32, local: &Arc<MemoryRegion>, offset: usize, remote: RemoteRegion, roffset: u64, compare: u64, swap: u64) -> Result<u64, TransportError>;
    fn progress(&self) -> Result<usize, TransportError>;
    fn take_completions(&self) -> Vec<Completion>;
    fn endpoint_state(&self, peer: u32) -> Option<EndpointState>;
}

/// A cloneable, thread-safe handle to one [`Transport`].
#[derive(Clone)]
pub struct SharedTransport {
    inner: Arc<Mutex<Transport>>,
}

impl SharedTransport {
    pub fn new(t: Transport) -> SharedTransport {
        SharedTransport {
            inner: Arc::new(Mutex::new(t)),
        }
    }

    /// The shared transport, for taking it back when every other handle is gone
    /// (`Arc::try_unwrap`, then `Mutex::into_inner`, then [`Transport::finalize`]).
    pub fn into_inner(self) -> Arc<Mutex<Transport>> {
        self.inner
    }

    /// The transport itself, locked (for calls this wrapper does not forward).
    ///
    /// A receive callback's panic comes out of the `progress` call that ran it (see
    /// [`Transport::progress`]) and poisons the lock on its way; the transport finished its
    /// batch first, so it is consistent and the poison is cleared here. A panic in the
    /// transport's own code during progress (a bug) leaves it [`Transport::interrupted`]:
    /// then this panics, naming why, on every later call (drop the transport).
    pub fn lock(&self) -> MutexGuard<'_, Transport> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => {
                let g = p.into_inner();
                if g.interrupted() {
                    panic!(
                        "SharedTransport: an earlier progress call panicked inside the \
                         transport's own code (not in a receive callback); its state is not \
                         consistent and it can only be dropped"
                    );
                }
                self.inner.clear_poison();
                g
            }
        }
    }

    /// Progresses (taking and releasing the lock each round, so other threads get in) until
    /// `done()` holds or `timeout`.
    pub fn progress_until(
        &self,
        timeout: Duration,
        what: &str,
        mut done: impl FnMut() -> bool,
    ) -> Result<(), TransportError> {
        let deadline = Instant::now() + timeout;
        let mut backoff = super::IdleBackoff::default();
        let wait_polls = self.lock().config().wait_polls;
        let mut rounds = 0u32;
        while !done() {
            rounds = rounds.wrapping_add(1);
            let n = self.progress()?;
            backoff.count(n);
            if backoff.should_sleep(wait_polls) {
                // Armed under the lock, slept on without it: other threads go on meanwhile.
                let (n, sleeper) = self.lock().arm_sleep()?;
                match sleeper {
                    Some(s) => s.sleep(backoff.nap())?,
                    None => {
                        backoff.count(n);
                    }
                }
            }
            // The clock only now and then (a system call in TCG guests).
            if rounds % 64 == 0 && Instant::now() > deadline {
                return Err(TransportError::Timeout {
                    what: what.to_string(),
                    timeout,
                });
            }
            std::thread::yield_now();
        }
        Ok(())
    }
}
