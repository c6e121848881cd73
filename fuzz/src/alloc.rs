//! The allocator the fuzz tests run under: the system's, remembering per thread the largest
//! single allocation since the case began, so a decoder that sizes a buffer by a length field it
//! read (a `Vec::with_capacity(len)` of four gigabytes) is a finding even when memory allows it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

/// The system allocator, counting.
pub struct Counting;

#[global_allocator]
static GLOBAL: Counting = Counting;

fn note(size: usize) {
    // During a thread's teardown the slot may be gone: nothing to note then.
    let _ = LARGEST.try_with(|l| {
        if size > l.get() {
            l.set(size)
        }
    });
}

// SAFETY: every call is forwarded unchanged to the system allocator; noting the size touches
// only a thread-local cell that needs no allocation.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's layout is passed on as given.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as for alloc.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: ptr was allocated by System with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: ptr was allocated by System with this layout.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Starts counting a case on this thread.
pub fn mark() {
    LARGEST.with(|l| l.set(0));
}

/// The largest single allocation on this thread since [`mark`].
pub fn largest() -> usize {
    LARGEST.with(|l| l.get())
}
