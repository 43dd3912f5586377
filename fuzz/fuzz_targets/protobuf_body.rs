#![no_main]
//! `kwh_emulator::fuzzing::protobuf_body`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| kwh_emulator::fuzzing::protobuf_body(data));
