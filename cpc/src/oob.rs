//! oob: the handshake's Hellos travel over a TCP side channel whose address (IP and port) is
//! the per-process part of oob's modex data. Queue pair numbers, PSNs, LIDs and GIDs are what
//! the Hellos carry, so it works on RoCE as on InfiniBand (Open MPI's oob sent no GID).
//!
//! Streams are non-blocking and only touched from [`OobService::poll`] and
//! [`OobService::send`], so the service fits a single progress loop.

use crate::handshake::Hello;
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

/// One process's oob side channel.
pub struct OobService {
    listener: TcpListener,
    addr: SocketAddr,
    outbound: HashMap<SocketAddr, TcpStream>,
    inbound: Vec<(TcpStream, Vec<u8>)>,
}

fn io_err(what: &'static str) -> impl FnOnce(std::io::Error) -> openib_sys::Error {
    move |e| openib_sys::Error::Verb {
        verb: what,
        context: String::new(),
        source: e,
    }
}

impl OobService {
    /// Listens on `ip` (the port's IP address; loopback when the port has none) on a free port.
    pub fn bind(ip: IpAddr) -> Result<OobService, openib_sys::Error> {
        let listener = TcpListener::bind(SocketAddr::new(ip, 0)).map_err(io_err("oob: bind"))?;
        listener
            .set_nonblocking(true)
            .map_err(io_err("oob: set_nonblocking"))?;
        let addr = listener.local_addr().map_err(io_err("oob: local_addr"))?;
        Ok(OobService {
            listener,
            addr,
            outbound: HashMap::new(),
            inbound: Vec::new(),
        })
    }

    /// Where peers reach this service.
    pub fn address(&self) -> SocketAddr {
        self.addr
    }

    pub fn send(&mut self, to: &SocketAddr, hello: &Hello) -> Result<(), openib_sys::Error> {
        if !self.outbound.contains_key(to) {
            let s = TcpStream::connect_timeout(to, Duration::from_secs(2))
                .map_err(io_err("oob: connect"))?;
            s.set_nodelay(true).map_err(io_err("oob: nodelay"))?;
            self.outbound.insert(*to, s);
        }
        let s = self.outbound.get_mut(to).expect("inserted above");
        if let Err(e) = s.write_all(&hello.encode()) {
            self.outbound.remove(to);
            return Err(io_err("oob: write")(e));
        }
        Ok(())
    }

    /// Takes new streams and the Hellos that arrived. Looks first, with one `poll(2)` over the
    /// listener and the streams, and does nothing more when none is readable: this runs in
    /// every service round of an idle process, where a failing `accept4` is dear.
    pub fn poll(&mut self) -> Result<Vec<Hello>, openib_sys::Error> {
        let fds: Vec<BorrowedFd<'_>> = std::iter::once(self.listener.as_fd())
            .chain(self.inbound.iter().map(|(s, _)| s.as_fd()))
            .collect();
        if openib_sys::readiness::readable(&fds, Some(Duration::ZERO))
            .map_err(io_err("oob: poll"))?
            == 0
        {
            return Ok(Vec::new());
        }
        loop {
            match self.listener.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(true)
                        .map_err(io_err("oob: set_nonblocking"))?;
                    self.inbound.push((s, Vec::new()));
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => return Err(io_err("oob: accept")(e)),
            }
        }
        let mut out = Vec::new();
        let mut buf = [0u8; 1024];
        self.inbound.retain_mut(|(s, pending)| {
            loop {
                match s.read(&mut buf) {
                    Ok(0) => return false,
                    Ok(n) => pending.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(_) => return false,
                }
            }
            while pending.len() >= Hello::LEN {
                let frame: Vec<u8> = pending.drain(..Hello::LEN).collect();
                match Hello::decode(&frame) {
                    Some(h) => out.push(h),
                    None => {
                        tracing::debug!("malformed oob frame: closing the stream");
                        return false;
                    }
                }
            }
            true
        });
        Ok(out)
    }
}

impl crate::manager::HelloTransport for OobService {
    type Addr = SocketAddr;
    fn send(&mut self, to: &SocketAddr, hello: &Hello) -> Result<(), openib_sys::Error> {
        OobService::send(self, to, hello)
    }
    fn poll(&mut self) -> Result<Vec<Hello>, openib_sys::Error> {
        OobService::poll(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handshake::QpAddress;

    #[test]
    fn hellos_cross_the_side_channel() {
        let mut a = OobService::bind("127.0.0.1".parse().unwrap()).unwrap();
        let mut b = OobService::bind("127.0.0.1".parse().unwrap()).unwrap();
        let h = Hello {
            from: 0,
            to: 1,
            pair: 0,
            addr: QpAddress {
                qp_num: 9,
                psn: 1,
                lid: 0,
                gid: [1; 16],
                mtu: 3,
            },
            ack: false,
            fin: false,
        };
        a.send(&b.address(), &h).unwrap();
        a.send(&b.address(), &Hello { ack: true, ..h }).unwrap();
        let mut got = Vec::new();
        for _ in 0..200 {
            got.extend(b.poll().unwrap());
            if got.len() == 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(got, vec![h, Hello { ack: true, ..h }]);
        assert!(a.poll().unwrap().is_empty());
    }
}
