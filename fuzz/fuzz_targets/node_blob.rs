//! Fuzzes the node-blob decoder: any input, and for accepted ones the canonical-form contract
//! (openib::modex::oracle).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = openib::modex::oracle::check_node(data);
});
