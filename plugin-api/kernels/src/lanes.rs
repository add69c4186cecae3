//! The f32 vectors of one x86-64 instruction set ([`Lanes`]: `avx512.rs`, `avx2.rs`), for
//! the kernels written once over them: the per-head products' register tiles
//! (`head_product/tiles.rs`) and the softmax row (`softmax_row_wide.rs`). Each method is one
//! or a few intrinsics, inlined into the entry points every set compiles with its own target
//! features, so the generic code runs as if written for the set.

mod avx2;
mod avx512;

pub(crate) use avx2::Avx2;
pub(crate) use avx512::Avx512;

/// The instruction sets the kernels written over [`Lanes`] are compiled for.
#[derive(Clone, Copy)]
pub(crate) enum Set {
    Avx512,
    Avx2,
}

impl Set {
    /// The set the kernels use (`plugin_api::isa::kernels_isa`), if it is one of these.
    pub(crate) fn in_use() -> Option<Set> {
        match plugin_api::isa::kernels_isa() {
            plugin_api::isa::Isa::Avx512 => Some(Set::Avx512),
            plugin_api::isa::Isa::Avx2 => Some(Set::Avx2),
            plugin_api::isa::Isa::Baseline => None,
        }
    }
}

/// The f32 vectors of one instruction set. Every function is called only from code compiled
/// for that set.
pub(crate) trait Lanes {
    /// f32 lanes of a vector.
    const L: usize;
    type V: Copy;
    /// A choice of lanes: which ones a masked load or store touches, or a comparison holds.
    type Mask: Copy;

    unsafe fn zero() -> Self::V;
    unsafe fn splat(x: f32) -> Self::V;
    unsafe fn load(p: *const f32) -> Self::V;
    unsafe fn store(p: *mut f32, v: Self::V);
    /// The first `lanes` lanes (0 to `L`).
    unsafe fn first(lanes: usize) -> Self::Mask;
    /// The lanes of `mask` from `p`, zeros in the others (which are not read).
    unsafe fn load_masked(mask: Self::Mask, p: *const f32) -> Self::V;
    /// The lanes of `mask` to `p` (the others are not written).
    unsafe fn store_masked(mask: Self::Mask, p: *mut f32, v: Self::V);
    /// `a * b + c`, rounded once.
    unsafe fn fmadd(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn add(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn sub(a: Self::V, b: Self::V) -> Self::V;
    /// The larger of `a` and `b` lane by lane; `b` where either is NaN (`maxps`).
    unsafe fn max(a: Self::V, b: Self::V) -> Self::V;
    /// The smaller of `a` and `b` lane by lane; `b` where either is NaN (`minps`).
    unsafe fn min(a: Self::V, b: Self::V) -> Self::V;
    /// The largest lane (of lanes without NaN).
    unsafe fn reduce_max(v: Self::V) -> f32;
    /// The sum of the lanes.
    unsafe fn reduce_add(v: Self::V) -> f32;
    /// The lanes where `a < b` (false where either is NaN).
    unsafe fn less(a: Self::V, b: Self::V) -> Self::Mask;
    /// The lanes that hold NaN.
    unsafe fn nan(v: Self::V) -> Self::Mask;
    /// `yes` in the lanes of `mask`, `no` in the others.
    unsafe fn select(mask: Self::Mask, yes: Self::V, no: Self::V) -> Self::V;
    /// `2^n` for the integers `n` held in the low mantissa bits of `t = n + rounder` (`rounder`
    /// being `1.5 * 2^23`, whose addition rounds to an integer); `n` a normal exponent.
    unsafe fn exp2_of_rounded(t: Self::V, rounder: f32) -> Self::V;
}
