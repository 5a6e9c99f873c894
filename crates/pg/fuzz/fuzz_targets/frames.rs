//! Arbitrary bytes through the message guard; whatever it lets through
//! must decode exactly with pgwire (see `aqueduct_pg::frame::fuzz_check`).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    aqueduct_pg::frame::fuzz_check(data);
});
