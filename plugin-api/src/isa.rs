//! The vector instruction set the fused kernels run with: the widest the processor has, or a
//! narrower one named by `WORKBENCH_KERNELS_ISA`, so that an AVX-512 machine can test and
//! measure the code an AVX2-only (or a baseline x86-64) machine of the cluster runs.
//!
//! Every library that links this crate (the host and each plugin) keeps its own cached copy;
//! all read the same variable. The host refuses to start with a value it cannot read
//! ([`requested`]), so the kernels never meet one.

use std::sync::atomic::{AtomicU8, Ordering};

/// The environment variable that caps the kernels' instruction set.
pub const ISA_VARIABLE: &str = "WORKBENCH_KERNELS_ISA";

/// Instruction sets the kernels have code for, narrowest first (so `min` caps).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    /// x86-64 as built (SSE2), or any other architecture: the compiler's own vectorisation.
    Baseline,
    /// AVX2 with FMA.
    Avx2,
    /// AVX-512 F, BW, DQ and VL (with AVX2 and FMA).
    Avx512,
}

impl Isa {
    const ALL: [Isa; 3] = [Isa::Baseline, Isa::Avx2, Isa::Avx512];

    /// The name `WORKBENCH_KERNELS_ISA` takes.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Baseline => "baseline",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// Reads a name (case-insensitive); the error names the accepted ones.
    pub fn parse(text: &str) -> Result<Isa, String> {
        Isa::ALL.into_iter().find(|isa| isa.name().eq_ignore_ascii_case(text.trim())).ok_or_else(|| {
            let names: Vec<_> = Isa::ALL.iter().map(|isa| isa.name()).collect();
            format!("{ISA_VARIABLE}={text:?} names no instruction set: use one of {} (or unset it)", names.join(", "))
        })
    }

    /// The widest set this processor supports.
    pub fn detected() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let avx2 = has!("avx2") && has!("fma");
            if avx2 && has!("avx512f") && has!("avx512bw") && has!("avx512dq") && has!("avx512vl") {
                return Isa::Avx512;
            }
            if avx2 {
                return Isa::Avx2;
            }
        }
        Isa::Baseline
    }

    fn from_index(index: u8) -> Isa {
        Isa::ALL[usize::from(index)]
    }
}

/// The cap `WORKBENCH_KERNELS_ISA` asks for: `Ok(None)` when unset, an error naming the
/// accepted values when it is set to something else.
pub fn requested() -> Result<Option<Isa>, String> {
    match std::env::var(ISA_VARIABLE) {
        Ok(text) => Isa::parse(&text).map(Some),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(raw)) => Err(format!("{ISA_VARIABLE}={raw:?} is not text")),
    }
}

/// The instruction set the kernels use: the processor's widest, capped by the variable (a
/// value the host would have refused caps nothing). Read once; then one load per call.
#[inline]
pub fn kernels_isa() -> Isa {
    const UNSET: u8 = u8::MAX;
    static CHOSEN: AtomicU8 = AtomicU8::new(UNSET);
    match CHOSEN.load(Ordering::Relaxed) {
        UNSET => {
            let detected = Isa::detected();
            let chosen = requested().ok().flatten().map_or(detected, |cap| cap.min(detected));
            CHOSEN.store(chosen as u8, Ordering::Relaxed);
            chosen
        }
        index => Isa::from_index(index),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_and_order_from_narrowest() {
        for isa in Isa::ALL {
            assert_eq!(Isa::parse(isa.name()), Ok(isa));
            assert_eq!(Isa::from_index(isa as u8), isa);
        }
        assert_eq!(Isa::parse(" AVX2 "), Ok(Isa::Avx2));
        assert!(Isa::Baseline < Isa::Avx2 && Isa::Avx2 < Isa::Avx512);
    }

    #[test]
    fn an_unknown_name_is_refused_with_the_accepted_ones() {
        let error = Isa::parse("sse4").unwrap_err();
        assert!(error.contains(ISA_VARIABLE) && error.contains("\"sse4\""), "{error}");
        assert!(error.contains("baseline, avx2, avx512"), "{error}");
    }

    #[test]
    fn the_kernels_never_use_more_than_the_processor_has() {
        assert!(kernels_isa() <= Isa::detected());
    }
}
