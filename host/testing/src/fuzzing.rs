//! The fuzz target for scenario files (what `host test` reads from users). The cargo-fuzz
//! binary in `fuzz/` calls it; the unit test below runs it on its seeds and a few thousand
//! mutations on stable Rust. Not part of the crate's API.

use kwh_client::fuzzing::names_absolute_path;

use crate::scenario;

/// A scenario file's text: parsing never panics, and each step of a parsed scenario describes
/// itself. Files naming absolute paths are skipped (`givenFiles` are read); relative
/// ones resolve against a directory that does not exist.
pub fn scenario_file(input: &[u8]) {
    let Ok(text) = std::str::from_utf8(input) else {
        return;
    };
    if let Ok(v) = yaml_serde::from_str::<yaml_serde::Value>(text) {
        if names_absolute_path(&v) {
            return;
        }
    }
    let file = std::env::temp_dir()
        .join("kwh-fuzz-no-such-directory")
        .join("scenario.yaml");
    if let Ok(s) = scenario::parse(&file, text) {
        for step in &s.steps {
            let _ = step.action.describe();
        }
    }
}

#[cfg(test)]
mod tests {
    use kwh_client::fuzzing::{exercise, target_seeds};

    #[test]
    fn fuzz_scenario_file() {
        exercise(
            &target_seeds("scenario_file"),
            2000,
            21,
            super::scenario_file,
        );
    }
}
