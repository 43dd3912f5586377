#![no_main]
//! The metadata scanner against serde_json (`kwh_client::fuzzing::json_object_with`).

use libfuzzer_sys::fuzz_target;

fn deep(data: &[u8]) -> Result<serde_json::Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(data);
    de.disable_recursion_limit();
    let v: kwh_client::fuzzing::OracleValue = serde::Deserialize::deserialize(&mut de)?;
    de.end()?;
    Ok(v.0)
}

fuzz_target!(|data: &[u8]| kwh_client::fuzzing::json_object_with(data, Some(deep)));
