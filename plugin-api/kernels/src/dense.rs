//! A plain f32 matrix product through `gemm`, the library candle multiplies with, for the
//! measurements that time `gemm` itself (`workbench bench --peak`, the `gemm_peak` example):
//! one checked call in place of `gemm`'s nineteen arguments at each.

/// A matrix inside a slice: its shape and the distance (in elements) between consecutive
/// rows and between consecutive columns.
#[derive(Clone, Copy)]
pub struct MatrixRef<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl<'a> MatrixRef<'a> {
    /// `rows x cols` stored row by row.
    pub fn row_major(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self::strided(data, (rows, cols), (cols, 1))
    }

    /// `rows x cols`, the transpose of a `cols x rows` matrix stored row by row (as a backward
    /// pass reads its operands).
    pub fn transposed(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self::strided(data, (rows, cols), (1, rows))
    }

    /// Panics when the last element lies past the end of `data`.
    fn strided(data: &'a [f32], (rows, cols): (usize, usize), (row_stride, col_stride): (usize, usize)) -> Self {
        let last = (rows.max(1) - 1) * row_stride + (cols.max(1) - 1) * col_stride;
        assert!(
            rows * cols == 0 || last < data.len(),
            "a {rows} x {cols} matrix does not fit in {} elements",
            data.len()
        );
        MatrixRef { data, rows, cols, row_stride, col_stride }
    }
}

/// `out = lhs rhs`, `out` row-major, on `threads` threads of the current rayon pool (1: on
/// the calling thread). Every entry of `out` is written and none read.
///
/// Panics when the shapes do not agree or `out` has not exactly their product's entries.
pub fn product_f32(out: &mut [f32], lhs: MatrixRef, rhs: MatrixRef, threads: usize) {
    let (m, k, n) = (lhs.rows, lhs.cols, rhs.cols);
    assert_eq!(k, rhs.rows, "a {m} x {k} matrix times a {} x {n} one", rhs.rows);
    assert_eq!(out.len(), m * n, "the product is {m} x {n}");
    let parallelism = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
    // SAFETY: `MatrixRef` checked that each operand's strides stay inside its slice, and `out`
    // holds the m x n row-major product (`read_dst = false`: it is written, not read).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.as_mut_ptr(),
            1,
            n as isize,
            false,
            lhs.data.as_ptr(),
            lhs.col_stride as isize,
            lhs.row_stride as isize,
            rhs.data.as_ptr(),
            rhs.col_stride as isize,
            rhs.row_stride as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Row-major and transposed operands give the product written out as sums.
    #[test]
    fn the_product_of_either_layout() {
        let (m, k, n) = (5, 7, 3);
        let a: Vec<f32> = (0..m * k).map(|i| (i % 5) as f32 - 2.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i % 3) as f32 * 0.5).collect();
        let expected: Vec<f32> =
            (0..m * n).map(|e| (0..k).map(|l| a[(e / n) * k + l] * b[l * n + e % n]).sum()).collect();
        let mut out = vec![f32::NAN; m * n];
        product_f32(&mut out, MatrixRef::row_major(&a, m, k), MatrixRef::row_major(&b, k, n), 1);
        assert_eq!(out, expected);
        // `a` stored as its transpose (k x m row-major), read back as m x k.
        let a_t: Vec<f32> = (0..k * m).map(|i| a[(i % m) * k + i / m]).collect();
        let mut out_t = vec![f32::NAN; m * n];
        product_f32(&mut out_t, MatrixRef::transposed(&a_t, m, k), MatrixRef::row_major(&b, k, n), 2);
        assert_eq!(out_t, expected);
    }

    #[test]
    #[should_panic(expected = "does not fit")]
    fn a_matrix_past_its_slice_is_refused() {
        MatrixRef::row_major(&[0.0; 5], 2, 3);
    }
}
