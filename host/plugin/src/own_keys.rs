//! The handlers whose work the host does in the guest's place: enqueue the object's own key
//! (`queue.enqueue-own-keys`).
//!
//! Most controllers' handlers only enqueue the changed object's key (the SDK's defaults,
//! controller-runtime's `EnqueueRequestForObject`). Calling a guest for that costs a sandbox
//! call and two copies of the object per plugin per notification, more than the rest of the
//! pipeline; once the guest says its handler does nothing else, the dispatcher enqueues the key
//! itself. A guest cannot know which of its handlers are such before one runs, so the SDK's
//! default handlers say so on their first call, and the flags only ever go from "call" to
//! "enqueue": one plugin load runs one piece of code.

use std::sync::atomic::{AtomicU8, Ordering};

/// One change kind of a watch, as the bit the flags keep for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Add = 1,
    Update = 2,
    Delete = 4,
}

/// Per watch of the manifest, the changes whose handler the host runs in place of the guest's.
#[derive(Debug, Default)]
pub struct OwnKeyHandlers(Box<[AtomicU8]>);

impl OwnKeyHandlers {
    /// Nothing handed over yet, for a manifest of `watches` watches.
    pub fn new(watches: usize) -> Self {
        OwnKeyHandlers((0..watches).map(|_| AtomicU8::new(0)).collect())
    }

    /// Records that the guest's handler for `changes` (bits of [`Change`]) of `watch` only
    /// enqueues the object's own key. A watch the manifest does not have is ignored: the host
    /// never delivers notifications for it.
    pub fn hand_over(&self, watch: u32, changes: u8) {
        if let Some(flags) = self.0.get(watch as usize) {
            flags.fetch_or(changes, Ordering::Relaxed);
        }
    }

    /// Whether the host enqueues the key for `change` of `watch` itself. One relaxed load: the
    /// flag is a hint that only ever turns on, and a notification that misses it a moment
    /// after it turned on is delivered to the guest, which enqueues the same key.
    pub fn own_keys(&self, watch: u32, change: Change) -> bool {
        self.0
            .get(watch as usize)
            .is_some_and(|f| f.load(Ordering::Relaxed) & change as u8 != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_per_watch_and_change_and_only_turn_on() {
        let h = OwnKeyHandlers::new(2);
        assert!(!h.own_keys(0, Change::Add));
        h.hand_over(0, Change::Add as u8 | Change::Delete as u8);
        assert!(h.own_keys(0, Change::Add));
        assert!(!h.own_keys(0, Change::Update));
        assert!(h.own_keys(0, Change::Delete));
        assert!(!h.own_keys(1, Change::Add), "watch 1 untouched");
        h.hand_over(0, Change::Update as u8);
        assert!(h.own_keys(0, Change::Add), "earlier bits stay");
        assert!(h.own_keys(0, Change::Update));
        // Out of the manifest's range: ignored.
        h.hand_over(7, 0xff);
        assert!(!h.own_keys(7, Change::Add));
    }
}
