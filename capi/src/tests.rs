//! Unit tests of the entry points that need no device (null pointers, codes, messages).

use super::*;
use std::ptr::{null, null_mut};

fn last() -> String {
    // SAFETY: openib_last_error returns a NUL-terminated string.
    unsafe { CStr::from_ptr(openib_last_error()) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn null_pointers_are_invalid_with_a_message() {
    // SAFETY: every pointer is NULL or points to a local; NULL is what is tested.
    unsafe {
        assert_eq!(openib_open(null_mut()), OPENIB_ERR_INVALID);
        assert_eq!(last(), "openib_open: out is NULL");
        assert_eq!(openib_rank(null()), OPENIB_ERR_INVALID);
        assert_eq!(last(), "openib_rank: t is NULL");
        assert_eq!(openib_size(null()), OPENIB_ERR_INVALID);
        assert_eq!(openib_eager_limit(null()), OPENIB_ERR_INVALID);
        assert_eq!(
            openib_send(null_mut(), 1, 1, null(), 0, null_mut()),
            OPENIB_ERR_INVALID
        );
        assert_eq!(openib_progress(null_mut()), OPENIB_ERR_INVALID);
        assert_eq!(openib_flush(null_mut(), 0), OPENIB_ERR_INVALID);
        assert_eq!(openib_quiesce(null_mut(), 0), OPENIB_ERR_INVALID);
        assert_eq!(openib_connect_all(null_mut(), 0), OPENIB_ERR_INVALID);
        let mut c = openib_completion_t {
            peer: 0,
            token: 0,
            status: 0,
        };
        assert_eq!(
            openib_poll_completion(null_mut(), &mut c),
            OPENIB_ERR_INVALID
        );
        let mut taken = 7usize;
        assert_eq!(
            openib_progress_poll(null_mut(), &mut c, 1, &mut taken),
            OPENIB_ERR_INVALID
        );
        assert_eq!(taken, 0, "nothing taken on a failure");
        assert_eq!(last(), "openib_progress_poll: t is NULL");
        assert_eq!(
            openib_set_handler(null_mut(), 1, None, null_mut()),
            OPENIB_ERR_INVALID
        );
        let mut m = null_mut();
        assert_eq!(openib_mem_alloc(null_mut(), 8, &mut m), OPENIB_ERR_INVALID);
        assert!(m.is_null());
        assert_eq!(
            openib_mem_alloc(null_mut(), 8, null_mut()),
            OPENIB_ERR_INVALID
        );
        assert_eq!(last(), "openib_mem_alloc: out is NULL");
        assert!(openib_mem_ptr(null()).is_null());
        assert_eq!(openib_mem_len(null()), 0);
        let mut r = openib_remote_t {
            addr: 0,
            rkey: 0,
            reserved: 0,
            len: 0,
        };
        assert_eq!(openib_mem_remote(null(), &mut r), OPENIB_ERR_INVALID);
        for f in [openib_put, openib_get] {
            assert_eq!(
                f(null_mut(), 0, null_mut(), 0, &r, 0, 0, null_mut()),
                OPENIB_ERR_INVALID
            );
        }
        assert_eq!(
            openib_send_mem(null_mut(), 1, 1, null_mut(), 0, 0, null_mut()),
            OPENIB_ERR_INVALID
        );
        assert_eq!(last(), "openib_send_mem: t is NULL");
        assert_eq!(
            openib_sendi(null_mut(), 1, 1, null(), 0),
            OPENIB_ERR_INVALID
        );
        assert_eq!(last(), "openib_sendi: t is NULL");
        assert_eq!(
            openib_fetch_add(null_mut(), 1, null_mut(), 0, &r, 0, 1, null_mut()),
            OPENIB_ERR_INVALID
        );
        assert_eq!(last(), "openib_fetch_add: t is NULL");
        assert_eq!(
            openib_compare_swap(null_mut(), 1, null_mut(), 0, &r, 0, 0, 1, null_mut()),
            OPENIB_ERR_INVALID
        );
        assert_eq!(last(), "openib_compare_swap: t is NULL");
        assert_eq!(openib_del_procs(null_mut(), null(), 0), OPENIB_ERR_INVALID);
        assert_eq!(last(), "openib_del_procs: t is NULL");
        assert_eq!(openib_add_procs(null_mut(), null(), 0), OPENIB_ERR_INVALID);
        assert_eq!(last(), "openib_add_procs: t is NULL");
        assert_eq!(openib_close(null_mut()), OPENIB_OK);
        assert_eq!(openib_mem_free(null_mut()), OPENIB_OK);
    }
}

#[test]
fn rank_lists_are_checked() {
    // SAFETY: every pointer is NULL or points to a local array of the length given.
    unsafe {
        assert_eq!(ranks(null(), 0).unwrap(), &[] as &[u32]);
        assert_eq!(ranks(null(), 1).unwrap_err().code, OPENIB_ERR_INVALID);
        let a = [3u32, 1, 2];
        assert_eq!(ranks(a.as_ptr(), 3).unwrap(), &a);
        // A pointer into the middle of a u32 is misaligned.
        let p = a.as_ptr().cast::<u8>().wrapping_add(1).cast::<u32>();
        assert_eq!(ranks(p, 1).unwrap_err().code, OPENIB_ERR_INVALID);
    }
}

#[test]
fn a_panic_becomes_an_error_code() {
    let code = call("openib_test", || panic!("boom"));
    assert_eq!(code, OPENIB_ERR_PANIC);
    assert_eq!(last(), "openib_test: internal panic: boom");
    let code = call("openib_test", || Err(Fail::new(OPENIB_ERR_RANGE, "a\0b")));
    assert_eq!(code, OPENIB_ERR_RANGE);
    assert_eq!(last(), "openib_test: a b");
}

#[test]
fn last_error_is_per_thread() {
    call("openib_here", || Err(Fail::new(OPENIB_ERR_INVALID, "here")));
    std::thread::spawn(|| {
        assert_eq!(last(), "");
        call("openib_there", || {
            Err(Fail::new(OPENIB_ERR_INVALID, "there"))
        });
        assert_eq!(last(), "openib_there: there");
    })
    .join()
    .unwrap();
    assert_eq!(last(), "openib_here: here");
}

#[test]
fn every_code_has_a_distinct_description() {
    let mut seen = std::collections::HashSet::new();
    for (code, _, s) in CODES {
        assert!(seen.insert(s.to_bytes()), "{code}");
        // SAFETY: openib_strerror returns a static NUL-terminated string.
        assert_eq!(unsafe { CStr::from_ptr(openib_strerror(*code)) }, *s);
    }
    assert_eq!(
        // SAFETY: as above.
        unsafe { CStr::from_ptr(openib_strerror(12345)) },
        c"unknown error code"
    );
}

/// The header's `enum openib_error` lists exactly the codes of this crate.
#[test]
fn header_error_codes_match() {
    let header =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../include/openib.h"))
            .expect("include/openib.h");
    let mut found = Vec::new();
    for line in header.lines() {
        let l = line.trim();
        if let Some((name, rest)) = l.split_once('=') {
            let name = name.trim();
            if name.starts_with("OPENIB_") && !name.contains(' ') {
                let v: c_int = rest
                    .split([',', '/'])
                    .next()
                    .unwrap_or("")
                    .trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("bad enum line {l:?}"));
                found.push((name.to_string(), v));
            }
        }
    }
    let want: Vec<(String, c_int)> = CODES.iter().map(|(c, n, _)| (n.to_string(), *c)).collect();
    assert_eq!(found, want);
}

#[test]
fn code_of_maps_transport_errors() {
    let cases = [
        (TransportError::ReservedTag, OPENIB_ERR_INVALID),
        (
            TransportError::TooLarge { len: 9, limit: 8 },
            OPENIB_ERR_TOO_LARGE,
        ),
        (
            TransportError::BadPeer { peer: 9, size: 2 },
            OPENIB_ERR_BAD_PEER,
        ),
        (
            TransportError::Range {
                offset: 1,
                len: 2,
                size: 2,
            },
            OPENIB_ERR_RANGE,
        ),
        (
            TransportError::Timeout {
                what: "x".into(),
                timeout: Duration::from_secs(1),
            },
            OPENIB_ERR_TIMEOUT,
        ),
        (
            TransportError::NoPath {
                peer: 1,
                why: "x".into(),
            },
            OPENIB_ERR_NO_PATH,
        ),
        (
            TransportError::EndpointFailed {
                peer: 1,
                why: "x".into(),
            },
            OPENIB_ERR_ENDPOINT_FAILED,
        ),
        (
            TransportError::Wireup(PingError::Setup("x".into())),
            OPENIB_ERR_SETUP,
        ),
        (TransportError::Busy { why: "no credit" }, OPENIB_ERR_BUSY),
        (
            TransportError::Misaligned { addr: 0x1004 },
            OPENIB_ERR_INVALID,
        ),
        (
            TransportError::Setting(openib_rs::config::ConfigError {
                name: "OPENIB_EAGER_LIMIT",
                value: "1".into(),
                origin: openib_rs::config::Source::Env,
                problem: "out of range".into(),
                allowed: "an integer from 64 to 65535".into(),
            }),
            OPENIB_ERR_SETUP,
        ),
    ];
    for (e, code) in cases {
        assert_eq!(code_of(&e), code, "{e}");
    }
}

/// The caller-memory and by-address entry points check their pointers before anything else.
#[test]
fn register_and_by_address_calls_check_their_pointers() {
    let r = openib_remote_t {
        addr: 0x1000,
        rkey: 1,
        reserved: 0,
        len: 64,
    };
    let mut buf = [0u64; 8];
    let p = buf.as_mut_ptr().cast::<c_void>();
    // SAFETY: every pointer is NULL or points to a local; NULL is what is tested.
    unsafe {
        let mut m = std::ptr::dangling_mut::<openib_mem_t>();
        assert_eq!(
            openib_mem_register(null_mut(), p, 64, &mut m),
            OPENIB_ERR_INVALID
        );
        assert!(m.is_null(), "*out is NULL on failure");
        assert_eq!(last(), "openib_mem_register: t is NULL");
        assert_eq!(
            openib_mem_register(null_mut(), p, 64, null_mut()),
            OPENIB_ERR_INVALID
        );
        assert_eq!(last(), "openib_mem_register: out is NULL");
        assert_eq!(
            openib_put_addr(null_mut(), 1, p, null_mut(), 0x1000, &r, 8, null_mut()),
            OPENIB_ERR_INVALID
        );
        assert_eq!(last(), "openib_put_addr: t is NULL");
        assert_eq!(
            openib_get_addr(null_mut(), 1, p, null_mut(), 0x1000, &r, 8, null_mut()),
            OPENIB_ERR_INVALID
        );
        assert_eq!(last(), "openib_get_addr: t is NULL");
        assert_eq!(
            openib_fetch_add_addr(null_mut(), 1, p, null_mut(), 0x1000, &r, 1, null_mut()),
            OPENIB_ERR_INVALID
        );
        assert_eq!(last(), "openib_fetch_add_addr: t is NULL");
        assert_eq!(
            openib_compare_swap_addr(null_mut(), 1, p, null_mut(), 0x1000, &r, 0, 1, null_mut()),
            OPENIB_ERR_INVALID
        );
        assert_eq!(last(), "openib_compare_swap_addr: t is NULL");
    }
}

/// Offsets of by-address calls: both ranges must lie inside their regions, and the error
/// names the side that does not.
#[test]
fn by_address_ranges_are_checked_on_both_sides() {
    assert_eq!(check_range_of(64, 56, 8).unwrap(), ());
    assert_eq!(
        check_range_of(64, 57, 8).unwrap_err().code,
        OPENIB_ERR_RANGE
    );
    assert_eq!(
        check_range_of(64, usize::MAX, 2).unwrap_err().code,
        OPENIB_ERR_RANGE
    );
    let r = RemoteRegion {
        addr: 0x2000,
        rkey: 1,
        len: 32,
    };
    let f = |local: u64, remote: u64, len: usize| offsets(0x1000, 64, local, &r, remote, len);
    assert_eq!(f(0x1008, 0x2010, 16).unwrap(), (8, 0x10));
    let e = f(0x0fff, 0x2000, 8).unwrap_err();
    assert_eq!(e.code, OPENIB_ERR_RANGE);
    assert!(e.msg.starts_with("local: "), "{}", e.msg);
    let e = f(0x1000, 0x2019, 8).unwrap_err();
    assert!(e.msg.starts_with("remote: "), "{}", e.msg);
}

/// A fake in-process host runtime: a store of (rank, key) -> value and call counters.
mod fake_host {
    use super::*;
    use std::collections::HashMap;

    #[derive(Default)]
    pub struct Store {
        pub values: Mutex<HashMap<(u32, String), Vec<u8>>>,
        pub me: u32,
        pub puts: AtomicUsize,
        pub commits: AtomicUsize,
        pub gets: AtomicUsize,
        pub releases: AtomicUsize,
    }

    pub unsafe extern "C" fn put(
        ctx: *mut c_void,
        key: *const c_char,
        value: *const c_void,
        len: usize,
    ) -> c_int {
        // SAFETY: ctx is a &Store the test passed; key and value are valid for the call.
        let s = unsafe { &*(ctx as *const Store) };
        // SAFETY: key is NUL-terminated for the call.
        let k = unsafe { CStr::from_ptr(key) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: value holds len bytes for the call.
        let v = unsafe { std::slice::from_raw_parts(value.cast::<u8>(), len) }.to_vec();
        s.values.lock().unwrap().insert((s.me, k), v);
        s.puts.fetch_add(1, Ordering::SeqCst);
        0
    }

    pub unsafe extern "C" fn commit(ctx: *mut c_void) -> c_int {
        // SAFETY: as above.
        let s = unsafe { &*(ctx as *const Store) };
        s.commits.fetch_add(1, Ordering::SeqCst);
        0
    }

    pub unsafe extern "C" fn get(
        ctx: *mut c_void,
        rank: u32,
        key: *const c_char,
        value_out: *mut *mut c_void,
        len_out: *mut usize,
    ) -> c_int {
        // SAFETY: as above; the out-pointers are the transport's locals.
        let s = unsafe { &*(ctx as *const Store) };
        s.gets.fetch_add(1, Ordering::SeqCst);
        // SAFETY: key is NUL-terminated for the call.
        let k = unsafe { CStr::from_ptr(key) }
            .to_string_lossy()
            .into_owned();
        match s.values.lock().unwrap().get(&(rank, k)) {
            None => OPENIB_RUNTIME_NOT_FOUND,
            Some(v) => {
                let n = v.len();
                let b = Box::into_raw(v.clone().into_boxed_slice());
                // SAFETY: the out-pointers are writable (the transport's locals).
                unsafe {
                    *len_out = n;
                    *value_out = b.cast::<c_void>();
                }
                0
            }
        }
    }

    pub unsafe extern "C" fn release(ctx: *mut c_void, _value: *mut c_void) {
        // SAFETY: as above. (The test leaks the value: release only counts.)
        let s = unsafe { &*(ctx as *const Store) };
        s.releases.fetch_add(1, Ordering::SeqCst);
    }

    pub fn ops(s: &Store, rank: u32, size: u32) -> openib_runtime_ops_t {
        openib_runtime_ops_t {
            version: OPENIB_RUNTIME_OPS_VERSION,
            rank,
            size,
            reserved: 0,
            node: c"fake-node".as_ptr(),
            ctx: s as *const Store as *mut c_void,
            put: Some(put),
            commit: Some(commit),
            get: Some(get),
            release: Some(release),
        }
    }
}

#[test]
fn open_runtime_checks_its_ops() {
    let s = fake_host::Store::default();
    let mut t = null_mut();
    // SAFETY: every pointer is NULL or points to a local.
    unsafe {
        assert_eq!(openib_open_runtime(null(), &mut t), OPENIB_ERR_INVALID);
        assert_eq!(last(), "openib_open_runtime: ops is NULL");
        let ok = fake_host::ops(&s, 0, 2);
        assert_eq!(openib_open_runtime(&ok, null_mut()), OPENIB_ERR_INVALID);
        assert_eq!(last(), "openib_open_runtime: out is NULL");
        let bad = openib_runtime_ops_t { version: 2, ..ok };
        assert_eq!(openib_open_runtime(&bad, &mut t), OPENIB_ERR_INVALID);
        assert!(last().contains("version is 2"), "{}", last());
        let bad = openib_runtime_ops_t { put: None, ..ok };
        assert_eq!(openib_open_runtime(&bad, &mut t), OPENIB_ERR_INVALID);
        assert_eq!(last(), "openib_open_runtime: ops->put is NULL");
        let bad = openib_runtime_ops_t { get: None, ..ok };
        assert_eq!(openib_open_runtime(&bad, &mut t), OPENIB_ERR_INVALID);
        assert_eq!(last(), "openib_open_runtime: ops->get is NULL");
        let bad = openib_runtime_ops_t { rank: 2, ..ok };
        assert_eq!(openib_open_runtime(&bad, &mut t), OPENIB_ERR_INVALID);
        assert!(last().contains("rank 2 is out of range"), "{}", last());
        assert!(t.is_null());
        assert_eq!(openib_reachable(null_mut(), 1), OPENIB_ERR_INVALID);
        assert_eq!(last(), "openib_reachable: t is NULL");
    }
    // Nothing was published by the refused opens.
    assert_eq!(s.puts.load(Ordering::SeqCst), 0);
}

/// Without an RDMA device (the host) the open fails as openib_open does, names why, and
/// publishes nothing, so peers find this rank unreachable instead of waiting for it.
#[test]
fn open_runtime_without_a_port_publishes_nothing() {
    if openib_ports::hw::read_topology()
        .map(|s| s.topology.devices.iter().any(|d| !d.ports.is_empty()))
        .unwrap_or(false)
    {
        eprintln!(
            "open_runtime_without_a_port_publishes_nothing: skipped: this machine has an RDMA port"
        );
        return;
    }
    let s = fake_host::Store::default();
    let ops = fake_host::ops(&s, 0, 2);
    let mut t = null_mut();
    // SAFETY: `ops` and its ctx (`s`) outlive the call; `t` is a local.
    let rc = unsafe { openib_open_runtime(&ops, &mut t) };
    assert!(
        matches!(
            rc,
            OPENIB_ERR_NO_DEVICE | OPENIB_ERR_NO_VERBS | OPENIB_ERR_SETUP
        ),
        "{rc}: {}",
        last()
    );
    assert!(t.is_null());
    assert!(last().starts_with("openib_open_runtime: "), "{}", last());
    assert_eq!(
        s.puts.load(Ordering::SeqCst),
        0,
        "a rank without a port publishes nothing"
    );
    assert_eq!(s.gets.load(Ordering::SeqCst), 0);

    // The port filter of the environment is read (btl_oib_if_include becomes
    // OPENIB_IF_INCLUDE): both lists at once are refused by name, before any device is looked
    // at. (Before, the C ABI derived ports with the default filter and ignored both.)
    // SAFETY: no other test of this crate reads these two variables.
    unsafe {
        std::env::set_var("OPENIB_IF_INCLUDE", "nonexistent0");
        std::env::set_var("OPENIB_IF_EXCLUDE", "rxe0");
    }
    // SAFETY: as above.
    let rc = unsafe { openib_open_runtime(&ops, &mut t) };
    let msg = last();
    // SAFETY: as above.
    unsafe {
        std::env::remove_var("OPENIB_IF_INCLUDE");
        std::env::remove_var("OPENIB_IF_EXCLUDE");
    }
    assert_eq!(rc, OPENIB_ERR_SETUP, "{msg}");
    assert!(msg.contains("OPENIB_IF_INCLUDE"), "{msg}");
    assert_eq!(s.puts.load(Ordering::SeqCst), 0);
}

/// The runtime over the fake host's callbacks: put/get round trip, a rank that published
/// nothing is NotFound (not a wait), the value is released, and the fence is refused.
#[test]
fn host_runtime_over_c_callbacks() {
    use openib_rs::runtime::host::HostRuntime;
    use openib_rs::runtime::{Runtime, RuntimeError, Scope};
    let s = Box::leak(Box::new(fake_host::Store {
        me: 1,
        ..Default::default()
    }));
    let ops = fake_host::ops(s, 1, 3);
    let rt = HostRuntime::new(1, 3, "n".into(), Box::new(host::test_ops(ops))).unwrap();
    assert_eq!(rt.info().backend, "host");
    rt.put(Scope::Global, "k", b"value").unwrap();
    rt.commit().unwrap();
    assert_eq!(s.commits.load(Ordering::SeqCst), 1);
    assert_eq!(rt.get(1, "k", Duration::ZERO).unwrap(), b"value");
    assert_eq!(s.releases.load(Ordering::SeqCst), 1);
    assert!(matches!(
        rt.get(2, "k", Duration::ZERO),
        Err(RuntimeError::NotFound { rank: 2, .. })
    ));
    assert!(matches!(
        rt.get(3, "k", Duration::ZERO),
        Err(RuntimeError::BadRank { rank: 3, size: 3 })
    ));
    let e = rt.fence(true, Duration::ZERO).unwrap_err().to_string();
    assert!(e.contains("the host runs the fence"), "{e}");
}

/// openib_usable_ports and openib_port_name refuse NULL by name; without an RDMA device (the
/// host) the count fails as an open does (no verbs or no device), or is 0.
#[test]
fn usable_ports_and_port_name_check_their_arguments() {
    let mut buf = [1 as std::ffi::c_char; 16];
    // SAFETY: every pointer is NULL or points to a local of the given size.
    unsafe {
        assert_eq!(openib_usable_ports(null_mut()), OPENIB_ERR_INVALID);
        assert_eq!(last(), "openib_usable_ports: count is NULL");
        assert_eq!(
            openib_port_name(null_mut(), buf.as_mut_ptr(), buf.len()),
            OPENIB_ERR_INVALID
        );
        assert_eq!(last(), "openib_port_name: t is NULL");
        let mut n = 7u32;
        let rc = openib_usable_ports(&mut n);
        let has_port = openib_ports::hw::read_topology()
            .map(|s| s.topology.devices.iter().any(|d| !d.ports.is_empty()))
            .unwrap_or(false);
        if !has_port {
            assert!(
                matches!(rc, OPENIB_OK | OPENIB_ERR_NO_DEVICE | OPENIB_ERR_NO_VERBS),
                "{rc}: {}",
                last()
            );
            assert_eq!(n, 0);
        }
    }
}
