//! Fuzzes the transport's receive path: the input as one message against the decoder's
//! contract, and as a script of peer messages and local steps against the receive checks and
//! bookkeeping of a verbs-free endpoint (openib::wire_oracle::check_transport_input).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    openib::wire_oracle::check_transport_input(data);
});
