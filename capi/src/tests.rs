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
