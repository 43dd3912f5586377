//! Scenario files (YAML): given objects, steps, expectations.
