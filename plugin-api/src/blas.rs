//! The fused kernels' matrix products through a C BLAS library chosen at run time
//! (`WORKBENCH_BLAS=/path/to/libmkl_rt.so`, `libopenblas.so.0`, ...) instead of the `gemm`
//! crate. Off unless the variable is set: on the Zen 4 VM the products are measured on,
//! `gemm` ran the default step's shapes faster than OpenBLAS, BLIS and MKL (benchmark record
//! (61)); on the Intel Xeons MKL ran them 10–20 % faster than `gemm` (README, "Every family
//! against PyTorch"), and any node can point the variable at the library it runs best. One executable serves every node: nothing is
//! linked, the library is loaded once per process (the host and each plugin) and its
//! `cblas_sgemm` / `cblas_dgemm` called on one thread (the training step runs one shard per
//! thread; the library's own threads are held at one).
//!
//! Written by hand (a few symbols through `libloading`) because the CBLAS binding crates link
//! one library at build time, which would fix the choice per build instead of per node.

use libloading::Library;
use std::path::Path;
use std::sync::OnceLock;

/// The variable naming the library.
pub const BLAS_VARIABLE: &str = "WORKBENCH_BLAS";

/// Debian's OpenBLAS (package `libopenblas0-pthread`, which `.ci/run` installs): the library
/// the tests run the products on, and the first one `--example blas_shapes` tries.
pub const DEBIAN_OPENBLAS: &str = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0";

/// CBLAS's enumerations (row-major storage, no transpose, transpose).
const ROW_MAJOR: i32 = 101;
const NO_TRANSPOSE: i32 = 111;
const TRANSPOSE: i32 = 112;

/// `cblas_?gemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)`.
type Gemm<T> = unsafe extern "C" fn(i32, i32, i32, i32, i32, i32, T, *const T, i32, *const T, i32, T, *mut T, i32);

/// A loaded CBLAS library.
pub struct Blas {
    name: String,
    sgemm: Gemm<f32>,
    dgemm: Gemm<f64>,
    /// Kept loaded for as long as the functions above are called.
    _library: Library,
}

impl Blas {
    /// Loads the library at `path` and finds its products, or says what is wrong and what to
    /// do instead.
    pub fn load(path: &Path) -> Result<Blas, String> {
        let fix = format!("point {BLAS_VARIABLE} at a CBLAS library (libmkl_rt.so, libopenblas.so.0, libblis.so.4) or unset it to use the built-in products");
        if !path.is_file() {
            return Err(format!("{BLAS_VARIABLE}={}: no such file; {fix}", path.display()));
        }
        // SAFETY: loading runs the library's initialisation code: a library the user named
        // for its products, trusted as a linked one would be.
        let library = unsafe { Library::new(path) }
            .map_err(|e| format!("{BLAS_VARIABLE}={}: cannot be loaded ({e}); {fix}", path.display()))?;
        let symbol = |name: &str| format!("{BLAS_VARIABLE}={}: has no {name}; {fix}", path.display());
        // SAFETY: CBLAS's functions of these names have these signatures.
        let (sgemm, dgemm) = unsafe {
            let sgemm = *library.get::<Gemm<f32>>(b"cblas_sgemm\0").map_err(|_| symbol("cblas_sgemm"))?;
            let dgemm = *library.get::<Gemm<f64>>(b"cblas_dgemm\0").map_err(|_| symbol("cblas_dgemm"))?;
            (sgemm, dgemm)
        };
        hold_threads_at_one(&library);
        let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
        Ok(Blas { name, sgemm, dgemm, _library: library })
    }

    /// The library's file name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// The library's own threads held at one, by whichever of the known setters it exports
/// (OpenBLAS, MKL, BLIS): each product is one shard's, on its own thread already.
fn hold_threads_at_one(library: &Library) {
    // SAFETY: OpenBLAS and MKL take the count as a C int, BLIS as its 64-bit `dim_t`.
    unsafe {
        for setter in [&b"openblas_set_num_threads\0"[..], b"MKL_Set_Num_Threads\0"] {
            if let Ok(set) = library.get::<unsafe extern "C" fn(i32)>(setter) {
                set(1);
            }
        }
        if let Ok(set) = library.get::<unsafe extern "C" fn(i64)>(b"bli_thread_set_num_threads\0") {
            set(1);
        }
    }
}

/// The library `WORKBENCH_BLAS` names, loaded at the first call: `Ok(None)` when unset or
/// empty, an error naming the problem and the fix when it cannot serve.
pub fn requested() -> Result<Option<&'static Blas>, String> {
    static LOADED: OnceLock<Result<Option<Blas>, String>> = OnceLock::new();
    let loaded = LOADED.get_or_init(|| match std::env::var_os(BLAS_VARIABLE) {
        Some(path) if !path.is_empty() => Blas::load(Path::new(&path)).map(Some),
        _ => Ok(None),
    });
    loaded.as_ref().map(Option::as_ref).map_err(Clone::clone)
}

/// The library the kernels' products run on, if any. The host refuses to start with a value
/// [`requested`] cannot load, so a plugin never meets one; if it did (the file removed since),
/// it panics with the reason, which the host reports as the plugin's failure.
pub fn in_use() -> Option<&'static Blas> {
    match requested() {
        Ok(blas) => blas,
        Err(problem) => panic!("{problem}"),
    }
}

/// How CBLAS reads an operand stored with these strides: `(transpose, leading dimension)`,
/// or `None` where neither of its strides is one (a broadcast or a strided view).
fn cblas_layout(rows: usize, cols: usize, row_stride: usize, col_stride: usize) -> Option<(i32, i32)> {
    let fits = |ld: usize| i32::try_from(ld).ok();
    if (col_stride == 1 || cols <= 1) && (rows <= 1 || row_stride >= cols.max(1)) {
        let ld = if rows <= 1 { cols.max(1) } else { row_stride };
        return Some((NO_TRANSPOSE, fits(ld)?));
    }
    if (row_stride == 1 || rows <= 1) && (cols <= 1 || col_stride >= rows.max(1)) {
        let ld = if cols <= 1 { rows.max(1) } else { col_stride };
        return Some((TRANSPOSE, fits(ld)?));
    }
    None
}

/// An operand read where it is: first entry, row stride, column stride.
pub type Operand<T> = (*const T, usize, usize);

/// The element types a [`Blas`] multiplies.
pub trait Element: Copy {
    /// This type's `cblas_?gemm`.
    fn gemm(blas: &Blas) -> Gemm<Self>;
    /// CBLAS's `beta` that overwrites the output.
    const ZERO: Self;
    /// `alpha`, and the `beta` that adds to the output.
    const ONE: Self;
}

impl Element for f32 {
    fn gemm(blas: &Blas) -> Gemm<f32> {
        blas.sgemm
    }
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
}

impl Element for f64 {
    fn gemm(blas: &Blas) -> Gemm<f64> {
        blas.dgemm
    }
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
}

impl Blas {
    /// `dst (m x n, row-major, row stride n) = a (m x k) b (k x n)`, plus `dst` when
    /// `accumulate`. Returns `false`, touching nothing, where CBLAS cannot read an operand
    /// as it lies (neither stride one), a size passes its 32-bit integers, or `k = 0`.
    ///
    /// # Safety
    /// `a` and `b` must address matrices of the given sizes and strides, `dst` `m n` entries
    /// (read only with `accumulate`).
    pub unsafe fn product<T: Element>(
        &self,
        (m, n, k): (usize, usize, usize),
        dst: *mut T,
        a: Operand<T>,
        b: Operand<T>,
        accumulate: bool,
    ) -> bool {
        if k == 0 || m == 0 || n == 0 {
            return false;
        }
        let (Some((trans_a, lda)), Some((trans_b, ldb))) = (cblas_layout(m, k, a.1, a.2), cblas_layout(k, n, b.1, b.2))
        else {
            return false;
        };
        let (Ok(mi), Ok(ni), Ok(ki)) = (i32::try_from(m), i32::try_from(n), i32::try_from(k)) else {
            return false;
        };
        let beta = if accumulate { T::ONE } else { T::ZERO };
        // SAFETY: as this function's; the layouts above describe the operands as they lie.
        unsafe { T::gemm(self)(ROW_MAJOR, trans_a, trans_b, mi, ni, ki, T::ONE, a.0, lda, b.0, ldb, beta, dst, ni) };
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operands_map_to_cblas_where_one_stride_is_one() {
        // Row-major, with and without spare columns; the transpose of one.
        assert_eq!(cblas_layout(4, 3, 3, 1), Some((NO_TRANSPOSE, 3)));
        assert_eq!(cblas_layout(4, 3, 5, 1), Some((NO_TRANSPOSE, 5)));
        assert_eq!(cblas_layout(4, 3, 1, 4), Some((TRANSPOSE, 4)));
        assert_eq!(cblas_layout(4, 3, 1, 6), Some((TRANSPOSE, 6)));
        // One row or one column: the other stride says nothing.
        assert_eq!(cblas_layout(1, 3, 0, 1), Some((NO_TRANSPOSE, 3)));
        assert_eq!(cblas_layout(4, 1, 7, 9), Some((NO_TRANSPOSE, 7)));
        assert_eq!(cblas_layout(1, 3, 9, 4), Some((TRANSPOSE, 4)));
        // A broadcast row, a strided view, overlapping rows: not CBLAS's.
        assert_eq!(cblas_layout(4, 3, 0, 1), None);
        assert_eq!(cblas_layout(4, 3, 6, 2), None);
        assert_eq!(cblas_layout(4, 3, 2, 1), None);
    }

    #[test]
    fn a_file_that_is_no_blas_library_is_refused_with_the_fix() {
        let missing = Blas::load(Path::new("/nonexistent/libblas.so")).err().unwrap();
        assert!(missing.contains("no such file") && missing.contains("unset it"), "{missing}");
        let dir = std::env::temp_dir().join(format!("blas-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let text = dir.join("libnot.so");
        std::fs::write(&text, "not a library").unwrap();
        let not_library = Blas::load(&text).err().unwrap();
        assert!(not_library.contains("cannot be loaded") && not_library.contains("libnot.so"), "{not_library}");
        std::fs::remove_dir_all(&dir).unwrap();
        // A real library without the products: the C library itself.
        if let Some(libc) = ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6"]
            .into_iter()
            .find(|p| Path::new(p).is_file())
        {
            let no_gemm = Blas::load(Path::new(libc)).err().unwrap();
            assert!(no_gemm.contains("has no cblas_sgemm"), "{no_gemm}");
        }
    }
}
