//! See apf_monitor::fuzzing::scenario for what one input must satisfy.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| apf_monitor::fuzzing::scenario(data));
