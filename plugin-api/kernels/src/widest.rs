//! Runs a kernel's inner loops compiled for the widest vector instructions the processor has.
//!
//! The crate is built for baseline x86-64 (SSE2), so that one build runs on every machine of
//! a cluster; the element-wise and row loops then vectorise four f32 wide. `widest` calls a
//! closure through a function compiled with AVX-512 (or AVX2 + FMA) enabled, chosen at run
//! time (`plugin_api::isa`: the processor's widest, or fewer when `WORKBENCH_KERNELS_ISA`
//! caps it); the closure, inlined there, is compiled with those instructions too. The choice
//! is cached, so the check is one load.

#[cfg(target_arch = "x86_64")]
use plugin_api::isa::Isa;

/// `f()`, compiled with the widest instruction set the processor supports.
#[inline(always)]
pub(crate) fn widest<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    match plugin_api::isa::kernels_isa() {
        // SAFETY: `kernels_isa` never names more than the processor has.
        Isa::Avx512 => return unsafe { with_avx512(f) },
        // SAFETY: as above.
        Isa::Avx2 => return unsafe { with_avx2(f) },
        Isa::Baseline => {}
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

/// Whether the loops the kernels run have fused multiply-adds as one instruction: inside
/// [`widest`] on AVX2 or AVX-512 (the element loops that evaluate polynomials all run inside
/// it), or everywhere in a build that targets FMA (aarch64, or x86-64 built with `+fma`).
/// Outside such code `f32::mul_add` is a call to libm's `fmaf` per element, and the loop no
/// longer vectorises, so the polynomials take it only where this says so (`with_fma!`).
#[inline(always)]
pub(crate) fn fma_in_use() -> bool {
    if cfg!(any(target_arch = "aarch64", target_feature = "fma")) {
        return true;
    }
    #[cfg(target_arch = "x86_64")]
    return plugin_api::isa::kernels_isa() != Isa::Baseline;
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// `f` as it is: a place to mark a closure that is bound by `let` `#[inline(always)]` (Rust
/// takes the attribute on a closure passed to a call, not yet on one bound directly), so
/// that it is compiled inside [`widest`] where it is called.
#[inline(always)]
pub(crate) fn inlined<F>(f: F) -> F {
    f
}
