#![no_main]
//! `kwh_client::fuzzing::watch_stream`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| kwh_client::fuzzing::watch_stream(data));
