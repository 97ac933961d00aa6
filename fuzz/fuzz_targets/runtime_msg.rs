//! Fuzzes the runtime msg decoder against its contract (openib::wire_oracle::check_runtime_msg).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    openib::wire_oracle::check_runtime_msg(data);
});
