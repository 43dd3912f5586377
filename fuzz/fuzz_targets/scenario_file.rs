#![no_main]
//! `kwh_testing::fuzzing::scenario_file`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| kwh_testing::fuzzing::scenario_file(data));
