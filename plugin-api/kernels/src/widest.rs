//! Runs a kernel's inner loops compiled for the widest vector instructions the processor has.
//!
//! The crate is built for baseline x86-64 (SSE2), so that one build runs on every machine of
//! a cluster; the element-wise and row loops then vectorise four f32 wide. `widest` calls a
//! closure through a function compiled with AVX-512 (or AVX2 + FMA) enabled, chosen at run
//! time; the closure, inlined there, is compiled with those instructions too. `std` caches
//! the processor's features, so the check is one load.

/// `f()`, compiled with the widest instruction set the processor supports.
#[inline(always)]
pub(crate) fn widest<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma");
        if avx2
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512vl")
        {
            // SAFETY: the processor has every feature the function is compiled with.
            return unsafe { with_avx512(f) };
        }
        if avx2 {
            // SAFETY: as above.
            return unsafe { with_avx2(f) };
        }
    }
    f()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
unsafe fn with_avx512<R>(f: impl FnOnce() -> R) -> R {
    f()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn with_avx2<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// `f` as it is: a place to mark a closure that is bound by `let` `#[inline(always)]` (Rust
/// takes the attribute on a closure passed to a call, not yet on one bound directly), so
/// that it is compiled inside [`widest`] where it is called.
#[inline(always)]
pub(crate) fn inlined<F>(f: F) -> F {
    f
}
