#![no_main]
//! `kwh_emulator::fuzzing::patch`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| kwh_emulator::fuzzing::patch(data));
