//! Fuzzes the fence msg decoder against its contract (openib::wire_oracle::check_fence_msg).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    openib::wire_oracle::check_fence_msg(data);
});
