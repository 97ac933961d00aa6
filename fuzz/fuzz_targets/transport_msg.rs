//! Fuzzes the transport msg decoder against its contract (openib::wire_oracle::check_transport_msg).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    openib::wire_oracle::check_transport_msg(data);
});
