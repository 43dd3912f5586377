//! A reference-counted header and a byte string in one allocation, behind one pointer.
//!
//! Why not `Arc<(H, Bytes)>`: a cached object would then pay for two allocations, a weak
//! count, and a 32-byte `Bytes` handle on top of its JSON — about 60 bytes of a 1 KB object's
//! budget. Here an object is one block: a strong count, the length, the header (parsed
//! metadata), then the JSON bytes, which never change after construction.

use std::alloc::{self, Layout};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{self, AtomicU32, Ordering};

/// The start of every block; the bytes follow it. A 32-bit count and length keep the fixed
/// part at 8 bytes: blocks hold one object (at most 2 GiB, checked by the callers), and 2^31
/// live handles to one object would take 16 GiB of handles alone.
#[repr(C)]
struct Block<H> {
    refs: AtomicU32,
    len: u32,
    header: H,
}

/// A shared, immutable `(H, [u8])` in one allocation (see the module docs).
pub(crate) struct ThinArc<H> {
    ptr: NonNull<Block<H>>,
    _owns: PhantomData<Block<H>>,
}

// SAFETY: the block is immutable after construction except for the atomic count, so sharing
// it across threads is as safe as sharing `H` itself (the same bounds as `Arc<H>`).
unsafe impl<H: Send + Sync> Send for ThinArc<H> {}
// SAFETY: as above.
unsafe impl<H: Send + Sync> Sync for ThinArc<H> {}

impl<H> ThinArc<H> {
    /// The block layout for `len` bytes, and the offset of the bytes in it; `None` if the
    /// size overflows.
    fn layout(len: usize) -> Option<(Layout, usize)> {
        let (l, off) = Layout::new::<Block<H>>()
            .extend(Layout::array::<u8>(len).ok()?)
            .ok()?;
        Some((l.pad_to_align(), off))
    }

    /// A block holding `header` and `len` bytes written by `fill` (which gets them zeroed).
    /// `None` if `len` does not fit in 32 bits or in any allocation.
    pub(crate) fn new(header: H, len: usize, fill: impl FnOnce(&mut [u8])) -> Option<Self> {
        let len32 = u32::try_from(len).ok()?;
        let (layout, off) = Self::layout(len)?;
        // SAFETY: the layout has a non-zero size (the block header is not zero-sized).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw.cast::<Block<H>>()) else {
            alloc::handle_alloc_error(layout)
        };
        // SAFETY: `ptr` is a fresh allocation of `layout`, aligned for `Block<H>`, and the
        // `len` bytes at `off` lie inside it and are initialised (zeroed). If `fill` panics,
        // the block leaks, which is safe.
        unsafe {
            ptr.as_ptr().write(Block {
                refs: AtomicU32::new(1),
                len: len32,
                header,
            });
            fill(std::slice::from_raw_parts_mut(raw.add(off), len));
        }
        Some(ThinArc {
            ptr,
            _owns: PhantomData,
        })
    }

    fn block(&self) -> &Block<H> {
        // SAFETY: the block lives while any handle does, and this handle is one.
        unsafe { self.ptr.as_ref() }
    }

    pub(crate) fn header(&self) -> &H {
        &self.block().header
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        let len = self.block().len as usize;
        // The layout was computed for this length when the block was made, so it exists.
        let off = Self::layout(len).map_or(0, |(_, off)| off);
        // SAFETY: `len` initialised bytes start at `off` inside the live block and are never
        // written again.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast::<u8>().add(off), len) }
    }

    /// Both handles share one block.
    pub(crate) fn ptr_eq(a: &Self, b: &Self) -> bool {
        a.ptr == b.ptr
    }

    /// Bytes of the block (header and data), not counting what the header owns elsewhere.
    pub(crate) fn block_size(&self) -> usize {
        Self::layout(self.block().len as usize).map_or(0, |(l, _)| l.size())
    }
}

impl<H> Clone for ThinArc<H> {
    fn clone(&self) -> Self {
        // Relaxed is enough to take a new reference from an existing one (as `Arc` does).
        let old = self.block().refs.fetch_add(1, Ordering::Relaxed);
        if old > i32::MAX as u32 {
            // Billions of leaked handles: the count would wrap and free a live block.
            std::process::abort();
        }
        ThinArc {
            ptr: self.ptr,
            _owns: PhantomData,
        }
    }
}

impl<H> Drop for ThinArc<H> {
    fn drop(&mut self) {
        if self.block().refs.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        // Every other handle's use of the block happens before it is freed.
        atomic::fence(Ordering::Acquire);
        let len = self.block().len as usize;
        let Some((layout, _)) = Self::layout(len) else {
            return;
        };
        // SAFETY: this was the last handle; the header is initialised and dropped once, then
        // the block is freed with the layout it was allocated with.
        unsafe {
            std::ptr::drop_in_place(self.ptr.as_ptr());
            alloc::dealloc(self.ptr.as_ptr().cast::<u8>(), layout);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn bytes_and_header_round_trip_and_drop_once() {
        let drops = Arc::new(());
        let a = ThinArc::new(drops.clone(), 5, |b| b.copy_from_slice(b"hello")).unwrap();
        assert_eq!(a.bytes(), b"hello");
        let b = a.clone();
        assert!(ThinArc::ptr_eq(&a, &b));
        assert_eq!(Arc::strong_count(&drops), 2);
        drop(a);
        assert_eq!(b.bytes(), b"hello");
        assert_eq!(Arc::strong_count(&drops), 2);
        drop(b);
        assert_eq!(
            Arc::strong_count(&drops),
            1,
            "header dropped with the last handle"
        );
        let empty = ThinArc::new((), 0, |_| {}).unwrap();
        assert_eq!(empty.bytes(), b"");
        assert_eq!(empty.block_size(), 8);
    }

    #[test]
    fn shared_across_threads() {
        let a = ThinArc::new(7u64, 3, |b| b.copy_from_slice(b"abc")).unwrap();
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let a = a.clone();
                std::thread::spawn(move || {
                    for _ in 0..crate::test_rounds(1000) {
                        let c = a.clone();
                        assert_eq!((c.bytes(), *c.header()), (&b"abc"[..], 7));
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(a.block().refs.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn absurd_lengths_are_refused() {
        assert!(ThinArc::new((), usize::MAX - 8, |_| {}).is_none());
        assert!(ThinArc::new((), 1 << 32, |_| {}).is_none());
    }
}
