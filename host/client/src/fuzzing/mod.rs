//! Fuzz targets for the code that reads bytes from the network and from users, and a small
//! mutator that runs them on stable Rust.
//!
//! Why here and not only in the `fuzz/` workspace: a target checks properties that need the
//! crate's internals (what the scanner found, where a cut was made), and each target also runs
//! as a bounded unit test (seeds plus a few thousand mutations from a fixed-seed generator), so
//! the ordinary `cargo test` exercises every target without a nightly toolchain. The cargo-fuzz
//! binaries in `fuzz/` call the same functions. Not part of the crate's API.
//!
//! Each target takes arbitrary bytes and panics when a property fails; a panic is a finding.

mod config;
mod object;
mod streams;

use std::path::Path;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub use config::{kubeconfig, names_absolute_path, selectors};
pub use object::{json_object, json_object_with, DeepParse};
pub use streams::{list_body, watch_stream};

/// The settings a target reads off the front of its input, and the rest of it.
///
/// Why in the input: the fuzzer then searches chunkings and options along with the bytes.
/// Four bytes: option flags, then three chunk sizes that the body is cut into, in turn.
#[derive(Debug, Clone, Copy)]
pub struct Settings<'a> {
    pub flags: u8,
    pub cuts: [u8; 3],
    pub body: &'a [u8],
}

impl<'a> Settings<'a> {
    /// Splits `input` (shorter inputs read as zero settings and an empty body).
    pub fn read(input: &'a [u8]) -> Self {
        match input {
            [flags, a, b, c, body @ ..] => Settings {
                flags: *flags,
                cuts: [*a, *b, *c],
                body,
            },
            _ => Settings {
                flags: 0,
                cuts: [0; 3],
                body: &[],
            },
        }
    }

    /// The body cut into chunks of the sizes the settings name (1 to 256 bytes; sixteen
    /// times that when the flags' top bit is set), in turn.
    pub fn chunks(&self) -> Vec<&'a [u8]> {
        let scale = if self.flags & 0x80 != 0 { 16 } else { 1 };
        let mut out = Vec::new();
        let mut rest = self.body;
        let mut i = 0;
        while !rest.is_empty() {
            let n = ((usize::from(self.cuts[i % 3]) + 1) * scale).min(rest.len());
            let (head, tail) = rest.split_at(n);
            out.push(head);
            rest = tail;
            i += 1;
        }
        out
    }
}

/// The committed seeds of the cargo-fuzz target `target` (`fuzz/seeds/<target>`), for the
/// bounded stable tests of every crate; panics when there are none, so a moved directory fails
/// the tests instead of leaving them nothing to run.
pub fn target_seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(target);
    let s = seeds(&dir);
    assert!(!s.is_empty(), "no seeds for {target} in {}", dir.display());
    s
}

/// The files of a seed directory, in name order (none if it does not exist).
pub fn seeds(dir: &Path) -> Vec<Vec<u8>> {
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    paths.sort();
    paths
        .iter()
        .filter(|p| p.is_file())
        .filter_map(|p| std::fs::read(p).ok())
        .collect()
}

/// Byte strings worth splicing into inputs: JSON structure, escapes the scanner treats
/// specially, metadata keys, numbers at the edges of what parsers represent, YAML syntax.
const TOKENS: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b"\\",
    b",",
    b":",
    b"\n",
    b" ",
    b"null",
    b"true",
    b"-0",
    b"1e400",
    b"18446744073709551616",
    b"\\u0000",
    b"\\ud800",
    b"\\udc00",
    b"\\ud83d\\ude00",
    b"\\u006e",
    b"\xc3\xa9",
    b"\xff",
    b"\"metadata\":",
    b"\"name\":",
    b"\"namespace\":",
    b"\"resourceVersion\":",
    b"\"managedFields\":",
    b"\"labels\":",
    b"\"generation\":",
    b"\"ownerReferences\":",
    b"\"items\":",
    b"\"kind\":",
    b"\"continue\":",
    b"\"type\":\"BOOKMARK\"",
    b"\"type\":\"ERROR\"",
    b"k8s.io/initial-events-end",
    b"- ",
    b": ",
    b"&a ",
    b"*a",
    b"!!",
    b"---\n",
    b" in (",
    b"!=",
    b"\\,",
];

/// Runs `target` on every seed, then on `rounds` inputs made by mutating seeds (one to four
/// edits each: bit flips, byte changes, inserted tokens, deleted or repeated ranges, splices
/// of two seeds, truncation), drawn from a generator seeded with `seed`. The stable stand-in
/// for a fuzzer: deterministic, bounded, and a failure names the input that caused it.
pub fn exercise(seeds: &[Vec<u8>], rounds: usize, seed: u64, mut target: impl FnMut(&[u8])) {
    assert!(!seeds.is_empty(), "no seeds");
    for s in seeds {
        run_one(&mut target, s);
    }
    let mut rng = StdRng::seed_from_u64(seed);
    for _ in 0..rounds {
        let mut input = seeds[rng.gen_range(0..seeds.len())].clone();
        for _ in 0..rng.gen_range(1..=4) {
            mutate(&mut rng, &mut input, seeds);
        }
        run_one(&mut target, &input);
    }
}

fn run_one(target: &mut impl FnMut(&[u8]), input: &[u8]) {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| target(input)));
    if let Err(p) = r {
        panic!(
            "target failed on input {:?}: {}",
            String::from_utf8_lossy(input),
            p.downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| p.downcast_ref::<&str>().copied())
                .unwrap_or("(panic)")
        );
    }
}

fn mutate(rng: &mut StdRng, v: &mut Vec<u8>, seeds: &[Vec<u8>]) {
    let at = |rng: &mut StdRng, v: &Vec<u8>| rng.gen_range(0..=v.len());
    match rng.gen_range(0..8) {
        0 if !v.is_empty() => {
            let i = rng.gen_range(0..v.len());
            v[i] ^= 1 << rng.gen_range(0..8);
        }
        1 if !v.is_empty() => {
            let i = rng.gen_range(0..v.len());
            v[i] = rng.gen();
        }
        2 | 3 => {
            let i = at(rng, v);
            let t = TOKENS[rng.gen_range(0..TOKENS.len())];
            v.splice(i..i, t.iter().copied());
        }
        4 if !v.is_empty() => {
            let a = rng.gen_range(0..v.len());
            let b = (a + rng.gen_range(1..=16)).min(v.len());
            v.drain(a..b);
        }
        5 if !v.is_empty() => {
            let a = rng.gen_range(0..v.len());
            let b = (a + rng.gen_range(1..=32)).min(v.len());
            let piece = v[a..b].to_vec();
            let i = at(rng, v);
            v.splice(i..i, piece);
        }
        6 => {
            let other = &seeds[rng.gen_range(0..seeds.len())];
            let cut = rng.gen_range(0..=other.len());
            let i = at(rng, v);
            v.truncate(i);
            v.extend_from_slice(&other[cut..]);
        }
        _ => {
            let i = at(rng, v);
            v.truncate(i);
        }
    }
}

/// A JSON document as the oracle reads it: serde_json's [`Value`](serde_json::Value), built by
/// a visitor of this module rather than `Value`'s own.
///
/// Why: with its `raw_value` feature (the workspace enables it) serde_json's `Value` takes an
/// object whose first key is `$serde_json::private::RawValue` for its own raw-value marker: it
/// refuses `{"$serde_json::private::RawValue":{}}` and reads `{"$…RawValue":"1"}` as the
/// number 1. Go's decoder and the API server read that key as any other, and so does the
/// scanner (found by the fuzz target `json_object`). This visitor sees only keys and values.
pub struct OracleValue(pub serde_json::Value);

impl<'de> serde::Deserialize<'de> for OracleValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{MapAccess, SeqAccess, Visitor};
        use serde_json::{Map, Number, Value};
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OracleValue;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E>(self, b: bool) -> Result<OracleValue, E> {
                Ok(OracleValue(Value::Bool(b)))
            }
            fn visit_i64<E>(self, n: i64) -> Result<OracleValue, E> {
                Ok(OracleValue(n.into()))
            }
            fn visit_u64<E>(self, n: u64) -> Result<OracleValue, E> {
                Ok(OracleValue(n.into()))
            }
            fn visit_f64<E>(self, n: f64) -> Result<OracleValue, E> {
                Ok(OracleValue(
                    Number::from_f64(n).map_or(Value::Null, Value::Number),
                ))
            }
            fn visit_str<E>(self, s: &str) -> Result<OracleValue, E> {
                Ok(OracleValue(Value::String(s.to_owned())))
            }
            fn visit_string<E>(self, s: String) -> Result<OracleValue, E> {
                Ok(OracleValue(Value::String(s)))
            }
            fn visit_unit<E>(self) -> Result<OracleValue, E> {
                Ok(OracleValue(Value::Null))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<OracleValue, A::Error> {
                let mut v = Vec::new();
                while let Some(OracleValue(x)) = a.next_element()? {
                    v.push(x);
                }
                Ok(OracleValue(Value::Array(v)))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<OracleValue, A::Error> {
                // A repeated key keeps its last value, as `Value` does.
                let mut m = Map::new();
                while let Some((k, OracleValue(x))) = a.next_entry::<String, OracleValue>()? {
                    m.insert(k, x);
                }
                Ok(OracleValue(Value::Object(m)))
            }
        }
        d.deserialize_any(V)
    }
}

/// `text` as the oracle reads it ([`OracleValue`]), with serde_json's nesting limit.
pub(crate) fn oracle_parse(text: &[u8]) -> Result<serde_json::Value, serde_json::Error> {
    serde_json::from_slice::<OracleValue>(text).map(|v| v.0)
}

/// Whether serde_json refused `text` only for a reason the scanner does not share by design:
/// a number out of the range of an `f64` (the scanner checks the grammar of numbers, never
/// their value: no JSON grammar bounds them), or nesting past serde_json's own limit of 128.
fn serde_only_limit(e: &serde_json::Error) -> SerdeLimit {
    let m = e.to_string();
    if m.starts_with("number out of range") {
        SerdeLimit::Number
    } else if m.starts_with("recursion limit exceeded") {
        SerdeLimit::Depth
    } else {
        SerdeLimit::None
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SerdeLimit {
    None,
    Number,
    Depth,
}

#[cfg(test)]
mod tests {
    use super::*;

    // Each target on its seeds and a few thousand mutations (`fuzz/` runs them for hours).

    #[test]
    fn fuzz_json_object() {
        exercise(&target_seeds("json_object"), 6000, 1, json_object);
    }

    #[test]
    fn fuzz_watch_stream() {
        exercise(&target_seeds("watch_stream"), 2000, 2, watch_stream);
    }

    #[test]
    fn fuzz_list_body() {
        exercise(&target_seeds("list_body"), 1500, 3, list_body);
    }

    #[test]
    fn fuzz_selectors() {
        exercise(&target_seeds("selectors"), 6000, 4, selectors);
    }

    #[test]
    fn fuzz_kubeconfig() {
        exercise(&target_seeds("kubeconfig"), 2000, 5, kubeconfig);
    }

    #[test]
    fn settings_cut_the_body_in_turn() {
        let s = Settings::read(b"\x00\x01\x00\x02abcdefgh");
        assert_eq!(s.chunks(), [&b"ab"[..], b"c", b"def", b"gh"]);
        assert!(Settings::read(b"ab").body.is_empty());
    }
}
