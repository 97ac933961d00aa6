//! Network interfaces and their addresses (`getifaddrs`), for RoCE subnet derivation.

use std::net::IpAddr;

/// One network interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub index: u32,
    /// `IFF_UP` is set.
    pub up: bool,
    /// Addresses with their prefix lengths.
    pub addrs: Vec<(IpAddr, u8)>,
}

/// Every interface of this network namespace, in `getifaddrs` order (one entry per name).
pub fn interfaces() -> std::io::Result<Vec<Interface>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: valid out pointer; the list is freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out: Vec<Interface> = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        // SAFETY: ifa_name is a NUL-terminated string.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let pos = match out.iter().position(|i| i.name == name) {
            Some(p) => p,
            None => {
                // SAFETY: ifa_name is a valid C string.
                let index = unsafe { libc::if_nametoindex(ifa.ifa_name) };
                out.push(Interface {
                    name,
                    index,
                    up: ifa.ifa_flags & libc::IFF_UP as u32 != 0,
                    addrs: Vec::new(),
                });
                out.len() - 1
            }
        };
        // SAFETY: addr/netmask are NULL or point to sockaddrs of the family they state.
        if let Some(a) = unsafe { sockaddr_ip(ifa.ifa_addr) } {
            let prefix = unsafe { sockaddr_ip(ifa.ifa_netmask) }
                .map(prefix_len)
                .unwrap_or(0);
            out[pos].addrs.push((a, prefix));
        }
    }
    // SAFETY: frees the list once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// # Safety
/// `sa` must be NULL or point to a valid sockaddr whose `sa_family` describes its real type.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    match (*sa).sa_family as i32 {
        libc::AF_INET => {
            let sin = &*(sa as *const libc::sockaddr_in);
            Some(IpAddr::V4(u32::from_be(sin.sin_addr.s_addr).into()))
        }
        libc::AF_INET6 => {
            let sin6 = &*(sa as *const libc::sockaddr_in6);
            Some(IpAddr::V6(sin6.sin6_addr.s6_addr.into()))
        }
        _ => None,
    }
}

fn prefix_len(mask: IpAddr) -> u8 {
    match mask {
        IpAddr::V4(m) => u32::from(m).count_ones() as u8,
        IpAddr::V6(m) => u128::from(m).count_ones() as u8,
    }
}

/// The name of interface `index`, if it exists.
pub fn name_of(index: u32) -> Option<String> {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: `buf` has IF_NAMESIZE bytes, as if_indextoname requires.
    let p = unsafe { libc::if_indextoname(index, buf.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: on success `buf` holds a NUL-terminated name.
    Some(
        unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned(),
    )
}
