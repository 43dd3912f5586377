//! Borrowed views of an object's metadata collections (labels and annotations, finalizers,
//! owner references): over spans into a cached object, or over plain slices built by hand.

use super::span::{OwnerSpans, Span, Src};

/// An owner reference, borrowed from its object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OwnerRef<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
    pub controller: Option<bool>,
    pub block_owner_deletion: Option<bool>,
}

/// A borrowed, ordered string map (labels, annotations). Build one by hand from a slice of
/// pairs (`StrPairs::from(&[("app", "web")][..])`), e.g. in tests.
#[derive(Clone, Copy)]
pub struct StrPairs<'a>(PairsRepr<'a>);

#[derive(Clone, Copy)]
enum PairsRepr<'a> {
    Spans(&'a [(Span, Span)], Src<'a>),
    Slice(&'a [(&'a str, &'a str)]),
}

impl Default for StrPairs<'_> {
    fn default() -> Self {
        StrPairs(PairsRepr::Slice(&[]))
    }
}

impl<'a> From<&'a [(&'a str, &'a str)]> for StrPairs<'a> {
    fn from(s: &'a [(&'a str, &'a str)]) -> Self {
        StrPairs(PairsRepr::Slice(s))
    }
}

impl<'a> StrPairs<'a> {
    pub(super) fn from_spans(spans: &'a [(Span, Span)], src: Src<'a>) -> Self {
        StrPairs(PairsRepr::Spans(spans, src))
    }

    pub fn len(&self) -> usize {
        match self.0 {
            PairsRepr::Spans(s, _) => s.len(),
            PairsRepr::Slice(s) => s.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The `i`-th entry in document order.
    pub fn at(&self, i: usize) -> Option<(&'a str, &'a str)> {
        match self.0 {
            PairsRepr::Spans(s, src) => s.get(i).map(|(k, v)| (src.s(*k), src.s(*v))),
            PairsRepr::Slice(s) => s.get(i).copied(),
        }
    }
    /// The value for `key`. A key given twice (only a map built by hand can have one: a
    /// scanned object keeps each key once) reads as the API server reads it: the last wins.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        (0..self.len())
            .rev()
            .filter_map(|i| self.at(i))
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }
    pub fn iter(&self) -> PairsIter<'a> {
        PairsIter { p: *self, i: 0 }
    }
}

impl<'a> IntoIterator for StrPairs<'a> {
    type Item = (&'a str, &'a str);
    type IntoIter = PairsIter<'a>;
    fn into_iter(self) -> PairsIter<'a> {
        self.iter()
    }
}

impl<'a> IntoIterator for &StrPairs<'a> {
    type Item = (&'a str, &'a str);
    type IntoIter = PairsIter<'a>;
    fn into_iter(self) -> PairsIter<'a> {
        self.iter()
    }
}

impl std::fmt::Debug for StrPairs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl PartialEq for StrPairs<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

/// Iterator over [`StrPairs`].
pub struct PairsIter<'a> {
    p: StrPairs<'a>,
    i: usize,
}

impl<'a> Iterator for PairsIter<'a> {
    type Item = (&'a str, &'a str);
    fn next(&mut self) -> Option<Self::Item> {
        let r = self.p.at(self.i)?;
        self.i += 1;
        Some(r)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.p.len().saturating_sub(self.i);
        (n, Some(n))
    }
}

impl ExactSizeIterator for PairsIter<'_> {}

/// A borrowed list of strings (finalizers).
#[derive(Clone, Copy)]
pub struct Strs<'a>(StrsRepr<'a>);

#[derive(Clone, Copy)]
enum StrsRepr<'a> {
    Spans(&'a [Span], Src<'a>),
    Slice(&'a [&'a str]),
}

impl Default for Strs<'_> {
    fn default() -> Self {
        Strs(StrsRepr::Slice(&[]))
    }
}

impl<'a> From<&'a [&'a str]> for Strs<'a> {
    fn from(s: &'a [&'a str]) -> Self {
        Strs(StrsRepr::Slice(s))
    }
}

impl<'a> Strs<'a> {
    pub(super) fn from_spans(spans: &'a [Span], src: Src<'a>) -> Self {
        Strs(StrsRepr::Spans(spans, src))
    }

    pub fn len(&self) -> usize {
        match self.0 {
            StrsRepr::Spans(s, _) => s.len(),
            StrsRepr::Slice(s) => s.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn get(&self, i: usize) -> Option<&'a str> {
        match self.0 {
            StrsRepr::Spans(s, src) => s.get(i).map(|x| src.s(*x)),
            StrsRepr::Slice(s) => s.get(i).copied(),
        }
    }
    pub fn contains(&self, x: &str) -> bool {
        self.iter().any(|s| s == x)
    }
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &'a str> + 'a {
        let me = *self;
        (0..self.len()).map(move |i| me.get(i).unwrap_or_default())
    }
}

impl std::fmt::Debug for Strs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for Strs<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

/// A borrowed list of owner references.
#[derive(Clone, Copy)]
pub struct OwnerRefs<'a>(OwnersRepr<'a>);

#[derive(Clone, Copy)]
enum OwnersRepr<'a> {
    Spans(&'a [OwnerSpans], Src<'a>),
    Slice(&'a [OwnerRef<'a>]),
}

impl Default for OwnerRefs<'_> {
    fn default() -> Self {
        OwnerRefs(OwnersRepr::Slice(&[]))
    }
}

impl<'a> From<&'a [OwnerRef<'a>]> for OwnerRefs<'a> {
    fn from(s: &'a [OwnerRef<'a>]) -> Self {
        OwnerRefs(OwnersRepr::Slice(s))
    }
}

impl<'a> OwnerRefs<'a> {
    pub(super) fn from_spans(spans: &'a [OwnerSpans], src: Src<'a>) -> Self {
        OwnerRefs(OwnersRepr::Spans(spans, src))
    }

    pub fn len(&self) -> usize {
        match self.0 {
            OwnersRepr::Spans(s, _) => s.len(),
            OwnersRepr::Slice(s) => s.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn get(&self, i: usize) -> Option<OwnerRef<'a>> {
        match self.0 {
            OwnersRepr::Spans(s, src) => s.get(i).map(|o| OwnerRef {
                api_version: src.s(o.api_version),
                kind: src.s(o.kind),
                name: src.s(o.name),
                uid: src.s(o.uid),
                controller: o.controller,
                block_owner_deletion: o.block_owner_deletion,
            }),
            OwnersRepr::Slice(s) => s.get(i).copied(),
        }
    }
    pub fn iter(&self) -> impl ExactSizeIterator<Item = OwnerRef<'a>> + 'a {
        let me = *self;
        (0..self.len()).map(move |i| me.get(i).unwrap_or_default())
    }
}

impl<'a> IntoIterator for &OwnerRefs<'a> {
    type Item = OwnerRef<'a>;
    type IntoIter = Box<dyn ExactSizeIterator<Item = OwnerRef<'a>> + 'a>;
    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl std::fmt::Debug for OwnerRefs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for OwnerRefs<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}
