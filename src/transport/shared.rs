//! [`SharedTransport`]: the transport behind a mutex, for several threads at once
//! (MPI_THREAD_MULTIPLE). Every call takes the lock for its duration; callbacks run inside
//! `progress` with the lock held, so they must not call the transport. A callback that panics
//! makes that thread's `progress` panic after the batch is finished; the transport stays usable
//! from every handle.

use super::{Completion, EndpointState, Handler, RemoteRegion, Tag, Transport, TransportError};
use openib_sys::MemoryRegion;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

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

    pub fn rank(&self) -> u32 {
        self.lock().rank()
    }

    pub fn size(&self) -> u32 {
        self.lock().size()
    }

    pub fn on_tag(&self, tag: Tag, h: Handler) -> Result<(), TransportError> {
        self.lock().on_tag(tag, h)
    }

    pub fn register(&self, len: usize) -> Result<Arc<MemoryRegion>, TransportError> {
        self.lock().register(len)
    }

    pub fn send(&self, peer: u32, tag: Tag, data: &[u8]) -> Result<u64, TransportError> {
        self.lock().send(peer, tag, data)
    }

    pub fn send_shared(
        &self,
        peer: u32,
        tag: Tag,
        data: &Arc<[u8]>,
    ) -> Result<u64, TransportError> {
        self.lock().send_shared(peer, tag, data)
    }

    pub fn put(
        &self,
        peer: u32,
        local: &Arc<MemoryRegion>,
        offset: usize,
        remote: RemoteRegion,
        roffset: u64,
        len: usize,
    ) -> Result<u64, TransportError> {
        self.lock().put(peer, local, offset, remote, roffset, len)
    }

    pub fn get(
        &self,
        peer: u32,
        local: &Arc<MemoryRegion>,
        offset: usize,
        remote: RemoteRegion,
        roffset: u64,
        len: usize,
    ) -> Result<u64, TransportError> {
        self.lock().get(peer, local, offset, remote, roffset, len)
    }

    pub fn fetch_add(
        &self,
        peer: u32,
        local: &Arc<MemoryRegion>,
        offset: usize,
        remote: RemoteRegion,
        roffset: u64,
        add: u64,
    ) -> Result<u64, TransportError> {
        self.lock()
            .fetch_add(peer, local, offset, remote, roffset, add)
    }

    pub fn progress(&self) -> Result<usize, TransportError> {
        self.lock().progress()
    }

    pub fn take_completions(&self) -> Vec<Completion> {
        self.lock().take_completions()
    }

    pub fn endpoint_state(&self, peer: u32) -> Option<EndpointState> {
        self.lock().endpoint_state(peer)
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
