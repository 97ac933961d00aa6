//! Fuzzes the group-creation message decoder (issue 32's `GcMsg`) against its contract
//! (openib::wire_oracle::check_gc_msg): no panic, and what it accepts re-encodes to the same
//! bytes.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    openib::wire_oracle::check_gc_msg(data);
});
