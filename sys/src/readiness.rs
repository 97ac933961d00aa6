//! Readiness of file descriptors by one `poll(2)`.
//!
//! Waiting loops check their service sockets this way rather than by trying the operation:
//! in TCG guests a non-blocking `accept4` that finds nothing costs about 20 us (the kernel
//! allocates the new socket before it looks), a `poll` about 1.7 us.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

/// How many of `fds` are readable (or have hung up or failed, which a read reports), waiting
/// up to `timeout` for the first (`None`: for ever; `Some(ZERO)`: just looks; a partial
/// millisecond rounds up, so a short wait sleeps rather than spins). A signal that ends the
/// wait counts as nothing ready.
pub fn readable(fds: &[BorrowedFd<'_>], timeout: Option<Duration>) -> std::io::Result<usize> {
    let ms = match timeout {
        None => -1,
        Some(t) => t.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32,
    };
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `pfds` is a live array of `pfds.len()` pollfds whose descriptors are borrowed
    // (open) for the duration of the call.
    let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn reports_only_descriptors_with_data() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let (c, _d) = UnixStream::pair().unwrap();
        let look = Some(Duration::ZERO);
        assert_eq!(readable(&[b.as_fd(), c.as_fd()], look).unwrap(), 0);
        a.write_all(b"x").unwrap();
        assert_eq!(readable(&[b.as_fd(), c.as_fd()], look).unwrap(), 1);
        assert_eq!(readable(&[c.as_fd()], look).unwrap(), 0);
    }

    #[test]
    fn a_closed_peer_counts_as_readable() {
        let (a, b) = UnixStream::pair().unwrap();
        drop(a);
        assert_eq!(readable(&[b.as_fd()], Some(Duration::ZERO)).unwrap(), 1);
    }

    #[test]
    fn a_short_timeout_waits_at_least_that_long() {
        let (_a, b) = UnixStream::pair().unwrap();
        let t0 = std::time::Instant::now();
        assert_eq!(
            readable(&[b.as_fd()], Some(Duration::from_micros(300))).unwrap(),
            0
        );
        assert!(t0.elapsed() >= Duration::from_micros(300));
    }
}
