#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| flynn_fuzz::discord(data));
