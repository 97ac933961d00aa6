//! Fuzzes the proc-blob decoder: the input is `u16 LE node length, node blob, proc blob`; when
//! the node blob decodes, the proc blob is decoded against it and checked
//! (openib::modex::oracle).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    openib::modex::oracle::check_proc_input(data);
});
