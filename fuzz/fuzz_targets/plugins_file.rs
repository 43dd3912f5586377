#![no_main]
//! The plugins file parser of the `host` binary (`plugins_file::fuzz_target`), included from
//! its source: the binary crate has no library to link.

use libfuzzer_sys::fuzz_target;

#[path = "../../host/src/plugins_file.rs"]
#[allow(dead_code)]
mod plugins_file;

fuzz_target!(|data: &[u8]| plugins_file::fuzz_target(data));
