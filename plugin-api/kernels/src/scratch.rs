//! Per-thread scratch for an op's intermediates that never leave the op. Reused from call to
//! call on a thread, it is written where the cache still holds it; a fresh buffer each call
//! would often be memory that a training step's kept tensors have pushed out of the cache, so
//! that each line is read from memory before it is written.

use crate::real::Real;
use std::cell::RefCell;

/// Scratch of more bytes than this is allocated for the call and freed after it: it would not
/// stay in a cache anyway, and the thread would hold it for the rest of its life.
const KEPT_MAX_BYTES: usize = 16 << 20;

thread_local! {
    /// The scratch of this thread, in words of 8 bytes (every `Real` fits their alignment).
    static SCRATCH: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on `len` elements of this thread's scratch. Their values are unspecified (NaN in
/// debug builds, so that a value read before it was written shows in the tests): `f` writes
/// each element before it reads it.
pub(crate) fn with_scratch<T: Real, R>(len: usize, f: impl FnOnce(&mut [T]) -> R) -> R {
    const { assert!(size_of::<T>() <= 8 && 8 % size_of::<T>() == 0 && align_of::<T>() <= 8) };
    let words = (len * size_of::<T>()).div_ceil(8);
    if words * 8 > KEPT_MAX_BYTES {
        return on(&mut Vec::new(), words, len, f);
    }
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut kept) => on(&mut kept, words, len, f),
        // A call inside another's `f` on this thread gets its own buffer.
        Err(_) => on(&mut Vec::new(), words, len, f),
    })
}

fn on<T: Real, R>(buf: &mut Vec<f64>, words: usize, len: usize, f: impl FnOnce(&mut [T]) -> R) -> R {
    if buf.len() < words {
        buf.resize(words, 0.0);
    }
    // SAFETY: `buf` holds at least `len * size_of::<T>()` bytes, aligned for `T` (checked
    // above), and any bits are a value of f32 or f64.
    let scratch = unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<T>(), len) };
    if cfg!(debug_assertions) {
        scratch.fill(T::nan());
    }
    f(scratch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_is_reused_on_a_thread_and_separate_when_nested() {
        let first = with_scratch::<f32, _>(100, |s| {
            s.fill(1.0);
            s.as_ptr() as usize
        });
        let again = with_scratch::<f64, _>(50, |s| s.as_ptr() as usize);
        assert_eq!(first, again, "a second call on the thread reuses the buffer");
        with_scratch::<f32, _>(10, |outer| {
            outer.fill(2.0);
            with_scratch::<f32, _>(10, |inner| {
                inner.fill(3.0);
                assert_ne!(inner.as_ptr(), outer.as_ptr(), "a nested call gets its own buffer");
            });
            assert!(outer.iter().all(|&v| v == 2.0));
        });
        // In debug builds every call starts from NaN (release builds leave the old values).
        if cfg!(debug_assertions) {
            with_scratch::<f32, _>(100, |s| assert!(s.iter().all(|v| v.is_nan())));
        }
    }

    #[test]
    fn scratch_beyond_the_kept_size_is_not_kept() {
        let kept = with_scratch::<f32, _>(16, |s| s.as_ptr() as usize);
        let large = with_scratch::<f64, _>(KEPT_MAX_BYTES / 8 + 1, |s| {
            assert_eq!(s.len(), KEPT_MAX_BYTES / 8 + 1);
            s.as_ptr() as usize
        });
        assert_ne!(kept, large);
        SCRATCH.with(|cell| assert!(cell.borrow().len() * 8 <= KEPT_MAX_BYTES));
    }
}
