//! A small borrowing JSON scanner for the ingest hot path.
//!
//! Why not serde: the pipeline needs a handful of metadata fields and the byte spans of values
//! (the watch event's `object`, list `items`, `managedFields`), and must validate the rest
//! without allocating. serde_json can skip values, but cannot report where they were.

use std::fmt;

mod blocks;

/// Malformed or truncated JSON, with the byte offset where it was noticed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    pub offset: usize,
    pub message: &'static str,
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.message, self.offset)
    }
}

impl std::error::Error for SyntaxError {}

/// Bytes that end the fast path inside a string: quote, backslash, control characters, and
/// the bytes of non-ASCII characters (checked as UTF-8 one character at a time).
static SPECIAL_IN_STRING: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    let mut i = 0x80;
    while i < 0x100 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// The index of the first quote, backslash, control character or non-ASCII byte at or after
/// `i`, or `b.len()`. Why it is fast: string values (a ConfigMap's data, a Pod's env) are most
/// of an object's bytes, and this scan runs on every byte of every watch event and list item;
/// it is also what makes the text's UTF-8 check free for ASCII, which Kubernetes objects
/// nearly always are (outside strings the scanner accepts ASCII only).
fn plain_until(b: &[u8], i: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    let i = plain_until_sse2(b, i);
    // The vector steps stop at a special byte, or short of the end: only the tail takes the
    // word steps (most strings are short, and their end is found in the first vector step).
    if b.get(i).is_some_and(|&c| SPECIAL_IN_STRING[c as usize]) {
        return i;
    }
    plain_until_swar(b, i)
}

/// Sixteen bytes per step with SSE2, which every x86_64 processor has.
#[cfg(target_arch = "x86_64")]
fn plain_until_sse2(b: &[u8], mut i: usize) -> usize {
    while let Some(chunk) = b.get(i..).and_then(<[u8]>::first_chunk::<16>) {
        let (_, special) = quotes_and_specials(chunk);
        if special != 0 {
            return i + special.trailing_zeros() as usize;
        }
        i += 16;
    }
    i
}

/// The closing quote of a string starting at `i`, if it is within the sixteen bytes from `i`
/// and nothing before it needs a closer look (an escape, a control or non-ASCII byte).
#[cfg(target_arch = "x86_64")]
#[inline]
fn short_plain_string(b: &[u8], i: usize) -> Option<usize> {
    let (quotes, special) = quotes_and_specials(b.get(i..)?.first_chunk::<16>()?);
    // The first special byte is a quote.
    let first = special.trailing_zeros();
    (special != 0 && quotes.trailing_zeros() == first).then_some(i + first as usize)
}

/// Bit masks of sixteen bytes: the quotes, and every byte that ends the fast path inside a
/// string (quote, backslash, control character, non-ASCII byte).
#[cfg(target_arch = "x86_64")]
#[inline]
fn quotes_and_specials(chunk: &[u8; 16]) -> (i32, i32) {
    use std::arch::x86_64::{
        _mm_cmpeq_epi8, _mm_cmpgt_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8,
    };
    // SAFETY: SSE2 is part of the x86_64 baseline; the unaligned load reads the sixteen bytes
    // of `chunk`.
    unsafe {
        let v = _mm_loadu_si128(chunk.as_ptr().cast());
        let quotes = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
        // A signed compare: bytes from 0x80 up are negative, so `0x20 > v` flags control
        // characters and non-ASCII bytes alike.
        let special = _mm_or_si128(
            _mm_or_si128(quotes, _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8))),
            _mm_cmpgt_epi8(_mm_set1_epi8(0x20), v),
        );
        (_mm_movemask_epi8(quotes), _mm_movemask_epi8(special))
    }
}

/// Eight bytes per step in a general-purpose register (the tail, and other architectures).
fn plain_until_swar(b: &[u8], mut i: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    while let Some(chunk) = b.get(i..i + 8) {
        let Ok(bytes) = <[u8; 8]>::try_from(chunk) else {
            break;
        };
        let w = u64::from_le_bytes(bytes);
        let quote = w ^ (ONES * u64::from(b'"'));
        let backslash = w ^ (ONES * u64::from(b'\\'));
        // A byte's high bit is set where it was zero (or, for the third term, below 0x20),
        // or, for the last, where it is non-ASCII; borrows can only flag bytes above a true
        // match, so the lowest flag is exact.
        let flags = (quote.wrapping_sub(ONES) & !quote
            | backslash.wrapping_sub(ONES) & !backslash
            | w.wrapping_sub(ONES * 0x20) & !w
            | w)
            & HIGH;
        if flags != 0 {
            return i + (flags.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while b.get(i).is_some_and(|&c| !SPECIAL_IN_STRING[c as usize]) {
        i += 1;
    }
    i
}

/// The length of the UTF-8 character starting at `b[i]` (a non-ASCII byte), if it is a valid
/// one: the only place non-ASCII text is checked.
fn utf8_char_len(b: &[u8], i: usize) -> Option<usize> {
    let n = match b.get(i)? {
        0xc2..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf4 => 4,
        _ => return None,
    };
    // The standard check rejects overlong forms, surrogates and code points past U+10FFFF.
    std::str::from_utf8(b.get(i..i + n)?).ok().map(|_| n)
}

/// The UTF-16 code unit of the `\uXXXX` escape at `b[i]`, if it is one.
fn escaped_code_unit(b: &[u8], i: usize) -> Option<u32> {
    let hex = b.get(i..i + 6)?.strip_prefix(b"\\u")?;
    if !hex.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    u32::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
}

/// Nesting deeper than this is rejected rather than risking the stack.
const MAX_DEPTH: u32 = 512;

pub(crate) fn skip_ws(b: &[u8], mut pos: usize) -> usize {
    while let Some(c) = b.get(pos) {
        match c {
            b' ' | b'\n' | b'\r' | b'\t' => pos += 1,
            _ => break,
        }
    }
    pos
}

/// Resumable search for the end of one JSON value in a growing buffer: chunks from the network
/// split values anywhere, and rescanning from the value's start on every chunk would be
/// quadratic for large values. Only brackets, quotes and escapes are tracked; the complete
/// value is then validated by [`Scanner`]. Shared by the watch and LIST decoders.
#[derive(Debug, Default, Clone)]
pub(crate) struct ValueEnd {
    depth: u32,
    in_string: bool,
    escape: bool,
    scalar: bool,
}

impl ValueEnd {
    /// Start at a value whose first (non-whitespace) byte is `first`; scanning resumes just
    /// after it.
    pub(crate) fn begin(first: u8) -> Self {
        let mut v = ValueEnd::default();
        match first {
            b'{' | b'[' => v.depth = 1,
            b'"' => v.in_string = true,
            _ => v.scalar = true,
        }
        v
    }

    /// Continue scanning `b` from `i`: `Ok(end)` when the value ends at `end` (exclusive),
    /// `Err(scanned)` when more input is needed (resume from `scanned`). A number or literal
    /// ends at the first delimiter, so one at the very end of the buffer needs more input.
    pub(crate) fn resume(&mut self, b: &[u8], mut i: usize) -> Result<usize, usize> {
        if self.scalar {
            return match b[i..]
                .iter()
                .position(|c| matches!(c, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t'))
            {
                Some(p) => Ok(i + p),
                None => Err(b.len()),
            };
        }
        while i < b.len() {
            if self.in_string {
                if self.escape {
                    self.escape = false;
                    i += 1;
                    continue;
                }
                // Fast path: jump to the next quote or backslash (the search also stops at
                // control and non-ASCII bytes, which are stepped over here; the scan of the
                // complete value checks them).
                i = plain_until(b, i);
                match b.get(i) {
                    None => break,
                    Some(b'\\') => self.escape = true,
                    Some(b'"') => {
                        self.in_string = false;
                        if self.depth == 0 {
                            return Ok(i + 1);
                        }
                    }
                    Some(_) => {}
                }
                i += 1;
                continue;
            }
            match b[i] {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 0 {
                        return Ok(i + 1);
                    }
                }
                _ => {}
            }
            i += 1;
        }
        Err(i)
    }
}

/// A cursor over one JSON text.
pub(crate) struct Scanner<'a> {
    b: &'a [u8],
    pos: usize,
    depth: u32,
    last_key: (usize, usize, bool),
}

impl<'a> Scanner<'a> {
    pub(crate) fn new(b: &'a [u8]) -> Self {
        Scanner {
            b,
            pos: 0,
            depth: 0,
            last_key: (0, 0, false),
        }
    }
    pub(crate) fn bytes(&self) -> &'a [u8] {
        self.b
    }
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }
    pub(crate) fn seek(&mut self, pos: usize) {
        self.pos = pos;
    }
    pub(crate) fn error_at(&self, offset: usize, message: &'static str) -> SyntaxError {
        SyntaxError { offset, message }
    }
    fn err(&self, message: &'static str) -> SyntaxError {
        let message = if self.pos >= self.b.len() {
            "unexpected end of input"
        } else {
            message
        };
        self.error_at(self.pos, message)
    }
    /// Inlined for its common case: API servers write compact JSON, so the next byte is
    /// rarely whitespace.
    #[inline(always)]
    fn ws(&mut self) {
        if matches!(self.b.get(self.pos), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            self.pos = skip_ws(self.b, self.pos);
        }
    }
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.pos).copied()
    }
    fn eat(&mut self, c: u8, message: &'static str) -> Result<(), SyntaxError> {
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.err(message))
        }
    }

    /// Only whitespace remains.
    pub(crate) fn end(&mut self) -> Result<(), SyntaxError> {
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(self.err("trailing data after JSON value")),
        }
    }

    /// The next value is `null`.
    pub(crate) fn peek_null(&self) -> bool {
        self.b.get(skip_ws(self.b, self.pos)) == Some(&b'n')
    }

    /// Consume `null` if it is next.
    pub(crate) fn null(&mut self) -> Result<bool, SyntaxError> {
        if self.peek() == Some(b'n') {
            self.literal(b"null")?;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    fn literal(&mut self, lit: &[u8]) -> Result<(), SyntaxError> {
        if self.b.get(self.pos..self.pos + lit.len()) == Some(lit) {
            self.pos += lit.len();
            Ok(())
        } else {
            Err(self.err("invalid literal"))
        }
    }

    /// A string; returns the byte range of its contents (without quotes) and whether it
    /// contains escapes.
    #[inline]
    pub(crate) fn string(&mut self) -> Result<(usize, usize, bool), SyntaxError> {
        // Keys and values follow their `{`, `,` or `:` directly in what API servers write:
        // the whitespace skip is for the rest.
        if self.b.get(self.pos) == Some(&b'"') {
            self.pos += 1;
        } else {
            self.eat(b'"', "expected a string")?;
        }
        // Most strings (keys, names, label values) end within sixteen bytes of plain ASCII:
        // found here, inline in the caller, without the general loop's set-up.
        #[cfg(target_arch = "x86_64")]
        if let Some(end) = short_plain_string(self.b, self.pos) {
            let start = self.pos;
            self.pos = end + 1;
            return Ok((start, end, false));
        }
        self.string_rest()
    }

    /// [`string`](Self::string) after its opening quote, in general.
    fn string_rest(&mut self) -> Result<(usize, usize, bool), SyntaxError> {
        let start = self.pos;
        let mut escaped = false;
        let b = self.b;
        let mut i = self.pos;
        loop {
            i = plain_until(b, i);
            let Some(&c) = b.get(i) else {
                self.pos = i;
                return Err(self.err("unterminated string"));
            };
            match c {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    match b.get(i + 1) {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                        Some(b'u') => match escaped_code_unit(b, i) {
                            // A surrogate half only as the first of a pair: text with a lone
                            // one is not Unicode, and every later reader (serde_json in
                            // guests, the emulator) would refuse the object we stored.
                            Some(0xD800..=0xDBFF)
                                if matches!(escaped_code_unit(b, i + 6), Some(0xDC00..=0xDFFF)) =>
                            {
                                i += 12
                            }
                            Some(0xD800..=0xDFFF) => {
                                self.pos = i;
                                return Err(self.err("unpaired surrogate in string"));
                            }
                            Some(_) => i += 6,
                            None => {
                                self.pos = i;
                                return Err(self.err("invalid \\u escape"));
                            }
                        },
                        _ => {
                            self.pos = i;
                            return Err(self.err("invalid escape"));
                        }
                    }
                }
                0..=0x1f => {
                    self.pos = i;
                    return Err(self.err("control character in string"));
                }
                0x80.. => match utf8_char_len(b, i) {
                    Some(n) => i += n,
                    None => {
                        self.pos = i;
                        return Err(self.err("invalid UTF-8 in string"));
                    }
                },
                _ => i += 1,
            }
        }
        self.pos = i + 1;
        Ok((start, i, escaped))
    }

    /// The range of the key most recently read by [`Scanner::object`].
    pub(crate) fn last_key(&self) -> (usize, usize, bool) {
        self.last_key
    }

    /// Walk an object, calling `f(scanner, key, key_start)` with the scanner positioned at
    /// each member's value; `f` must consume the value.
    pub(crate) fn object<F>(&mut self, mut f: F) -> Result<(), SyntaxError>
    where
        F: FnMut(&mut Self, &'a [u8], usize) -> Result<(), SyntaxError>,
    {
        self.eat(b'{', "expected an object")?;
        self.enter()?;
        if self.peek() == Some(b'}') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(());
        }
        loop {
            self.ws();
            let key_start = self.pos;
            let (a, e, esc) = self.string()?;
            self.last_key = (a, e, esc);
            self.eat(b':', "expected ':'")?;
            self.ws();
            let b = self.b;
            f(self, &b[a..e], key_start)?;
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(self.err("expected ',' or '}'")),
            }
        }
        self.depth -= 1;
        Ok(())
    }

    /// Walk an array, calling `f` with the scanner positioned at each element.
    pub(crate) fn array<F>(&mut self, mut f: F) -> Result<(), SyntaxError>
    where
        F: FnMut(&mut Self) -> Result<(), SyntaxError>,
    {
        self.eat(b'[', "expected an array")?;
        self.enter()?;
        if self.peek() == Some(b']') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(());
        }
        loop {
            self.ws();
            f(self)?;
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(self.err("expected ',' or ']'")),
            }
        }
        self.depth -= 1;
        Ok(())
    }

    fn enter(&mut self) -> Result<(), SyntaxError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err("nesting too deep"));
        }
        Ok(())
    }

    /// Validate and step over any value; returns its byte range.
    pub(crate) fn skip_value(&mut self) -> Result<(usize, usize), SyntaxError> {
        let start = skip_ws(self.b, self.pos);
        match self.peek() {
            Some(b'{') => self.object(|sc, _, _| sc.skip_value().map(drop))?,
            Some(b'[') => self.array(|sc| sc.skip_value().map(drop))?,
            Some(b'"') => {
                self.string()?;
            }
            Some(b't') => self.literal(b"true")?,
            Some(b'f') => self.literal(b"false")?,
            Some(b'n') => self.literal(b"null")?,
            Some(b'-' | b'0'..=b'9') => {
                self.number()?;
            }
            _ => return Err(self.err("expected a value")),
        }
        Ok((start, self.pos))
    }

    /// Skips the value at the cursor by its brackets and strings alone, its grammar and text
    /// unchecked: for a value that is cut out of what is stored (`managedFields`), so that
    /// nothing unchecked is ever kept. The value must end inside the text. A value that is not
    /// an array or object (never `managedFields` in practice) is checked as any other: its end
    /// is then the one [`ValueEnd`] finds around it too, whatever its bytes, so an item ends
    /// in the same place whether a read holds it whole or it was delimited first.
    pub(crate) fn skip_dropped_value(&mut self) -> Result<(usize, usize), SyntaxError> {
        let start = skip_ws(self.b, self.pos);
        let Some(&first) = self.b.get(start) else {
            return Err(self.error_at(start, "expected a value"));
        };
        let end = match first {
            b'{' | b'[' => blocks::container_end(self.b, start),
            _ => return self.skip_value(),
        };
        match end {
            Some(end) => {
                self.pos = end;
                Ok((start, end))
            }
            None => Err(self.error_at(start, "unterminated value")),
        }
    }

    fn digits(&mut self) -> usize {
        let s = self.pos;
        while self.b.get(self.pos).is_some_and(u8::is_ascii_digit) {
            self.pos += 1;
        }
        self.pos - s
    }

    /// A number per the JSON grammar; returns its range and whether it is an integer.
    fn number(&mut self) -> Result<(usize, usize, bool), SyntaxError> {
        let start = self.pos;
        if self.b.get(self.pos) == Some(&b'-') {
            self.pos += 1;
        }
        match self.b.get(self.pos) {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.err("invalid number")),
        }
        let mut integer = true;
        if self.b.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            integer = false;
            if self.digits() == 0 {
                return Err(self.err("invalid number"));
            }
        }
        if matches!(self.b.get(self.pos), Some(b'e' | b'E')) {
            self.pos += 1;
            integer = false;
            if matches!(self.b.get(self.pos), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.err("invalid number"));
            }
        }
        Ok((start, self.pos, integer))
    }

    /// An integer or null.
    pub(crate) fn opt_i64(&mut self) -> Result<Option<i64>, SyntaxError> {
        if self.null()? {
            return Ok(None);
        }
        if !matches!(self.peek(), Some(b'-' | b'0'..=b'9')) {
            return Err(self.err("expected an integer"));
        }
        let (a, e, integer) = self.number()?;
        let text = std::str::from_utf8(&self.b[a..e]).unwrap_or_default();
        match text.parse::<i64>() {
            Ok(n) if integer => Ok(Some(n)),
            _ => Err(self.error_at(a, "expected an integer")),
        }
    }

    /// A boolean or null.
    pub(crate) fn opt_bool(&mut self) -> Result<Option<bool>, SyntaxError> {
        match self.peek() {
            Some(b't') => self.literal(b"true").map(|_| Some(true)),
            Some(b'f') => self.literal(b"false").map(|_| Some(false)),
            Some(b'n') => self.literal(b"null").map(|_| None),
            _ => Err(self.err("expected a boolean")),
        }
    }
}

/// Decode the contents of a JSON string (already validated by [`Scanner::string`]).
pub(crate) fn unescape_into(s: &[u8], out: &mut String) -> Result<(), &'static str> {
    let mut i = 0;
    let mut plain = 0;
    let flush = |out: &mut String, a: usize, b: usize| -> Result<(), &'static str> {
        out.push_str(std::str::from_utf8(&s[a..b]).map_err(|_| "invalid UTF-8 in string")?);
        Ok(())
    };
    while i < s.len() {
        if s[i] != b'\\' {
            i += 1;
            continue;
        }
        flush(out, plain, i)?;
        let c = *s.get(i + 1).ok_or("invalid escape")?;
        i += 2;
        match c {
            b'"' => out.push('"'),
            b'\\' => out.push('\\'),
            b'/' => out.push('/'),
            b'b' => out.push('\u{8}'),
            b'f' => out.push('\u{c}'),
            b'n' => out.push('\n'),
            b'r' => out.push('\r'),
            b't' => out.push('\t'),
            b'u' => {
                let hi = hex4(s, i)?;
                i += 4;
                let cp = if (0xD800..0xDC00).contains(&hi) {
                    if s.get(i..i + 2) != Some(b"\\u") {
                        return Err("unpaired surrogate in string");
                    }
                    let lo = hex4(s, i + 2)?;
                    if !(0xDC00..0xE000).contains(&lo) {
                        return Err("unpaired surrogate in string");
                    }
                    i += 6;
                    0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                } else {
                    hi
                };
                out.push(char::from_u32(cp).ok_or("unpaired surrogate in string")?);
            }
            _ => return Err("invalid escape"),
        }
        plain = i;
    }
    flush(out, plain, s.len())
}

fn hex4(s: &[u8], at: usize) -> Result<u32, &'static str> {
    let h = s.get(at..at + 4).ok_or("invalid \\u escape")?;
    let h = std::str::from_utf8(h).map_err(|_| "invalid \\u escape")?;
    u32::from_str_radix(h, 16).map_err(|_| "invalid \\u escape")
}

/// Append `s` as a JSON string literal.
pub(crate) fn push_quoted(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_until_finds_the_first_special_byte_at_every_offset() {
        // Every special byte (non-ASCII ones included) and neighbours that trip naive bit
        // tricks (0x20, 0x21, 0x23, 0x5b, 0x5d, 0x7e, 0x7f), at every position of a 1..=48-byte
        // run: the SSE2 steps, the SWAR steps and the byte-wise tail all see each. Under Miri
        // (which interprets each step) runs up to 20 bytes (one SSE2 block, a SWAR step and a
        // tail still), a few bytes of each kind, and scans from the run's start and the byte.
        let miri = cfg!(miri);
        let specials: Vec<u8> = if miri {
            vec![0x00, 0x1f, b'"', b'\\', 0x80, 0xff]
        } else {
            (0..0x20)
                .chain([b'"', b'\\', 0x80, 0xa2, 0xc3, 0xdc, 0xff])
                .collect()
        };
        let plain: &[u8] = if miri {
            &[b'a', 0x7f]
        } else {
            &[b'a', 0x20, 0x21, 0x23, 0x5b, 0x5d, 0x7e, 0x7f]
        };
        let longest = if miri { 20 } else { 48 };
        for len in 1..=longest {
            for &p in plain {
                let run = vec![p; len];
                assert_eq!(plain_until(&run, 0), len);
                for at in 0..len {
                    for &sp in &specials {
                        let mut v = run.clone();
                        v[at] = sp;
                        for start in 0..=at {
                            if miri && start != 0 && start != at {
                                continue;
                            }
                            assert_eq!(plain_until(&v, start), at, "{p:#x} {sp:#x} {at}/{len}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn skips_and_validates_values() {
        for ok in [
            r#"{"a":[1,-2.5e+3,true,false,null,"x\u00e9\n",{}],"b":{"c":[]}}"#,
            " { } ",
            "[]",
            "0",
        ] {
            let mut sc = Scanner::new(ok.as_bytes());
            sc.skip_value().unwrap();
            sc.end().unwrap();
        }
        for bad in [
            "01", "-", "1.", "1e", "[1 2]", "{\"a\"}", "nul", "\"abc", "{,}",
        ] {
            let mut sc = Scanner::new(bad.as_bytes());
            assert!(sc.skip_value().and_then(|_| sc.end()).is_err(), "{bad}");
        }
    }

    /// The resumable end search finds the same end whatever the chunks: long strings (the
    /// sixteen-byte steps), escaped quotes and backslashes at chunk edges, brackets inside
    /// strings, non-ASCII text.
    #[test]
    fn value_end_is_the_same_for_every_chunking() {
        let long = "x".repeat(40);
        let values = [
            format!(r#"{{"a":"{long}\"}}{long}\\","b":[1,{{"c":"]"}}]}}"#),
            format!(r#"["{long}","caf\u{{e9}} {long}",{{}}]"#),
            format!(r#""{long}\\\"{long}""#),
            format!("[\"caf\u{e9}{long}\u{20ac}\",\"\u{1f600}\"]"),
        ];
        for v in &values {
            let text = format!("{v} ,");
            let b = text.as_bytes();
            let whole = ValueEnd::begin(b[0]).resume(b, 1).unwrap();
            assert_eq!(whole, v.len(), "{v}");
            for chunk in 1..=b.len() {
                let mut end = ValueEnd::begin(b[0]);
                let (mut scanned, mut got) = (1, None);
                let mut avail = chunk.min(b.len());
                while got.is_none() {
                    match end.resume(&b[..avail], scanned) {
                        Ok(e) => got = Some(e),
                        Err(s) => {
                            assert!(s <= avail, "resumes past its input");
                            assert!(avail < b.len(), "no end found in {v}");
                            scanned = s;
                            avail = (avail + chunk).min(b.len());
                        }
                    }
                }
                assert_eq!(got, Some(whole), "chunks of {chunk}: {v}");
            }
        }
    }

    /// The short-string shortcut answers exactly as the general loop, whatever comes first
    /// in the sixteen bytes it looks at: the quote, an escape, a control or non-ASCII byte.
    #[test]
    fn short_strings_take_the_shortcut_only_when_the_general_loop_agrees() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let pieces: [&[u8]; 7] = [b"a", b"\"", b"\\n", b"\x01", "é".as_bytes(), b"\xff", b" "];
        for _ in 0..crate::test_rounds(20_000) {
            let mut text = b"\"".to_vec();
            for _ in 0..rng.gen_range(0..12) {
                text.extend_from_slice(pieces[rng.gen_range(0..pieces.len())]);
            }
            text.extend_from_slice(b"\",\"padding to sixteen bytes\"");
            let mut fast = Scanner::new(&text);
            let mut general = Scanner::new(&text);
            general.pos = 1;
            let want = general.string_rest().map(|r| (r, general.pos));
            let got = fast.string().map(|r| (r, fast.pos));
            assert_eq!(got, want, "{}", String::from_utf8_lossy(&text));
        }
    }

    /// The scanner is the UTF-8 check of the text it walks (no separate pass over it).
    #[test]
    fn strings_are_checked_as_utf8_and_nothing_else_may_be_non_ascii() {
        let valid = "{\"k\":\"caf\u{e9} \u{20ac} \u{1f600} \u{10ffff}\"}";
        let mut padded = String::from("{\"k\":\"");
        padded.push_str(&"x".repeat(37));
        padded.push_str("\u{e9}\u{20ac}\u{1f600}\"}");
        for ok in [valid.as_bytes(), padded.as_bytes()] {
            let mut sc = Scanner::new(ok);
            sc.skip_value().unwrap();
            sc.end().unwrap();
        }
        let bad: [&[u8]; 9] = [
            b"\"\x80\"",             // a lone continuation byte
            b"\"\xc0\x80\"",         // overlong
            b"\"\xed\xa0\x80\"",     // a surrogate
            b"\"\xe2\x82\"",         // truncated
            b"\"\xf5\x80\x80\x80\"", // past U+10FFFF
            b"\"\xff\"",
            b"\"abc\xe2",         // truncated at the end of the input
            b"{\"a\":1\xc3\xa9}", // outside a string
            b"[\"x\",\xc3\xa9]",
        ];
        for b in bad {
            let mut sc = Scanner::new(b);
            assert!(sc.skip_value().and_then(|_| sc.end()).is_err(), "{b:?}");
        }
    }

    /// Found by the fuzz target `json_object`: a lone surrogate escape (`\ud800`) passed the
    /// scan; serde_json refuses it, so the stored object could not be read by any guest.
    #[test]
    fn lone_surrogate_escapes_are_refused_and_pairs_accepted() {
        for ok in [
            r#""\ud83d\ude00""#,
            r#""a\uD83D\uDE00b\u00e9""#,
            r#""\ud7ff\ue000""#,
        ] {
            let mut sc = Scanner::new(ok.as_bytes());
            sc.skip_value().unwrap_or_else(|e| panic!("{ok}: {e}"));
            assert!(serde_json::from_str::<String>(ok).is_ok(), "{ok}");
        }
        for bad in [
            r#""\ud800""#,
            r#""\udc00""#,
            r#""\ud800\u0041""#,
            r#""\ud800\ud800""#,
            r#""x\udbff""#,
            r#"{"metadata":{"name":"a"},"fi\ud800eldsV1":{}}"#,
        ] {
            let mut sc = Scanner::new(bad.as_bytes());
            assert!(sc.skip_value().is_err(), "{bad}");
            assert!(
                serde_json::from_str::<serde_json::Value>(bad).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn unescapes_surrogate_pairs() {
        let mut s = String::new();
        unescape_into(br#"a\ud83d\ude00b\"\\"#, &mut s).unwrap();
        assert_eq!(s, "a\u{1F600}b\"\\");
        assert!(unescape_into(br#"\ud83d"#, &mut String::new()).is_err());
    }
}
