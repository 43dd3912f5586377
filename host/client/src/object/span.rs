//! Where a metadata string lies: a span into the object's bytes, or into its side buffer of
//! strings that had escapes; resolved against both by [`Src`].

/// A string inside the object: `len` bytes at `off`. The top bit of `len` marks a string that
/// had escapes and lives, decoded, in [`ParsedMeta::text`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Span {
    pub(super) off: u32,
    pub(super) len: u32,
}

pub(super) const DECODED: u32 = 1 << 31;

impl Span {
    pub(super) fn shift(&mut self, at: u32, delta: i64) {
        if self.len & DECODED == 0 && self.off >= at {
            self.off = (self.off as i64 + delta) as u32;
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct OwnerSpans {
    pub(super) api_version: Span,
    pub(super) kind: Span,
    pub(super) name: Span,
    pub(super) uid: Span,
    pub(super) controller: Option<bool>,
    pub(super) block_owner_deletion: Option<bool>,
}

/// Resolves spans against an object's bytes and its side buffer of decoded strings.
#[derive(Clone, Copy)]
pub(super) struct Src<'a> {
    pub(super) raw: &'a [u8],
    pub(super) text: &'a str,
}

impl<'a> Src<'a> {
    pub(super) fn s(self, sp: Span) -> &'a str {
        let (bytes, len) = if sp.len & DECODED != 0 {
            (self.text.as_bytes(), sp.len & !DECODED)
        } else {
            (self.raw, sp.len)
        };
        let (off, len) = (sp.off as usize, len as usize);
        // Spans are bounded by ASCII quotes inside text validated as UTF-8 at ingest.
        // ASCII (nearly every name, namespace and label) is checked a word at a time; the
        // general check costs more than the rest of a key's construction.
        bytes
            .get(off..off + len)
            .and_then(|b| {
                if b.is_ascii() {
                    // SAFETY: ASCII bytes are valid UTF-8.
                    Some(unsafe { std::str::from_utf8_unchecked(b) })
                } else {
                    std::str::from_utf8(b).ok()
                }
            })
            .unwrap_or_default()
    }
}
