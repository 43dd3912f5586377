//! Text from outside the process, shortened where a log line or an error message quotes it.
//!
//! Why: a name, key, URL, resourceVersion or server message is as long as the server or the
//! user made it. Quoted whole in a line logged once per event, one object with a 200 MiB name
//! made a gigabyte of log in ten seconds. What identifies the text is at its start.

use std::fmt;

/// How many bytes of a string a log line or an error message quotes.
pub const QUOTED_MAX: usize = 256;

/// `s` as a log line or error quotes it: whole when it is at most [`QUOTED_MAX`] bytes, else
/// its start and how many bytes were left out. `Display` writes the text, `Debug` quotes it.
pub fn clip(s: &str) -> Clipped<'_> {
    Clipped(s)
}

/// See [`clip`].
#[derive(Clone, Copy)]
pub struct Clipped<'a>(&'a str);

impl Clipped<'_> {
    fn parts(&self) -> (&str, usize) {
        let cut = floor_char_boundary(self.0, QUOTED_MAX);
        (&self.0[..cut], self.0.len() - cut)
    }
}

impl fmt::Display for Clipped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.parts() {
            (all, 0) => f.write_str(all),
            (head, rest) => write!(f, "{head}… ({rest} more bytes)"),
        }
    }
}

impl fmt::Debug for Clipped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.parts() {
            (all, 0) => write!(f, "{all:?}"),
            (head, rest) => write!(f, "{head:?}… ({rest} more bytes)"),
        }
    }
}

/// The largest index of `s` at most `max` that starts a character (or ends `s`).
pub fn floor_char_boundary(s: &str, max: usize) -> usize {
    if max >= s.len() {
        return s.len();
    }
    (0..=max)
        .rev()
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_quoted_whole_and_long_text_by_its_start() {
        assert_eq!(clip("web-1").to_string(), "web-1");
        assert_eq!(format!("{:?}", clip("a\"b")), r#""a\"b""#);
        let long = format!("{}é{}", "x".repeat(QUOTED_MAX - 1), "y".repeat(1000));
        let shown = clip(&long).to_string();
        // The two-byte character straddles the limit: the cut falls before it.
        assert_eq!(
            shown,
            format!("{}… (1002 more bytes)", "x".repeat(QUOTED_MAX - 1))
        );
        assert!(format!("{:?}", clip(&long)).ends_with("\"… (1002 more bytes)"));
        assert_eq!(floor_char_boundary("é", 1), 0);
        assert_eq!(floor_char_boundary("ab", 5), 2);
    }
}
