#![no_main]
//! `kwh_client::fuzzing::selectors`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| kwh_client::fuzzing::selectors(data));
