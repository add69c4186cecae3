//! `y = x w (+ b)` for `x` of any rank (`[..., k]`), `w` `[k, n]` and an optional bias `[n]`,
//! as one op: candle's form (reshape, matmul, reshape, broadcast add) is four graph nodes,
//! each of which costs a zero-filled gradient and an addition in the backward, and the
//! broadcast's backward is a slow reduction over the leading dimensions.
//!
//! Backward: `dx = dy w^T`, `dw = x^T dy`, `db = sum_rows dy`, the two products by the
//! `gemm` crate straight from the arguments' strides (a transposed weight `W^T` passed as a
//! view costs no copy).

use crate::activation::relu_backward_from_output;
use crate::real::Real;
use crate::scratch::with_scratch;
use crate::strided::{map_rows, output_buffer_with_room, read_vector, slice, storage_len, unpack, Rows};
use crate::transpose::transpose_into;
use crate::vector::dot;
use crate::widest::widest;
use candle_core::{bail, CpuStorage, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor};

/// Products smaller than this many multiply-adds run on one thread.
const PARALLEL_MIN_MACS: usize = 1 << 18;

/// A matrix in storage: first element and the strides of its rows and columns.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Strided {
    offset: usize,
    row_stride: usize,
    col_stride: usize,
}

impl Strided {
    /// A contiguous row-major matrix of rows `width` long.
    pub(crate) fn rows_of(width: usize) -> Self {
        Strided { offset: 0, row_stride: width, col_stride: 1 }
    }

    /// The storage index of entry `(i, j)`.
    pub(crate) fn index(self, i: usize, j: usize) -> usize {
        self.offset + i * self.row_stride + j * self.col_stride
    }

    /// The same strides from the storage index `offset`.
    #[cfg(test)]
    pub(crate) fn with_offset(self, offset: usize) -> Self {
        Strided { offset, ..self }
    }

    /// `(offset, row stride, column stride)`.
    pub(crate) fn parts(self) -> (usize, usize, usize) {
        (self.offset, self.row_stride, self.col_stride)
    }

    pub(crate) fn transposed(self) -> Self {
        Strided { offset: self.offset, row_stride: self.col_stride, col_stride: self.row_stride }
    }
}

/// `x` (`[..., k]`) as an `m x k` matrix, if its leading dimensions collapse into rows of one
/// stride (always for contiguous tensors and for views that only narrow or transpose the last
/// two dimensions).
fn as_matrix(layout: &Layout) -> Option<(usize, usize, Strided)> {
    let dims = layout.dims();
    let strides = layout.stride();
    let rank = dims.len();
    if rank == 0 {
        return None;
    }
    let k = dims[rank - 1];
    let m: usize = dims[..rank - 1].iter().product();
    // The leading dimensions of more than one entry, innermost first: the innermost sets the
    // row stride and each outer one must step over all rows inside it.
    let mut leading = (0..rank - 1).rev().filter(|&i| dims[i] > 1);
    let row_stride = match leading.next() {
        None => 0,
        Some(i) => {
            let mut expected = strides[i] * dims[i];
            for j in leading {
                if strides[j] != expected {
                    return None;
                }
                expected *= dims[j];
            }
            strides[i]
        }
    };
    Some((m, k, Strided { offset: layout.start_offset(), row_stride, col_stride: strides[rank - 1] }))
}

/// `x` as a matrix, copying it into `buf` when its layout does not allow one stride per row.
pub(crate) fn matrix_of<'a, T: Real>(
    data: &'a [T],
    layout: &Layout,
    buf: &'a mut Vec<T>,
) -> (&'a [T], usize, usize, Strided) {
    if let Some((m, k, s)) = as_matrix(layout) {
        return (data, m, k, s);
    }
    let rows = Rows::new(layout);
    let mut scratch = Vec::new();
    buf.clear();
    for r in 0..rows.count {
        buf.extend_from_slice(rows.read(data, r, &mut scratch));
    }
    (buf.as_slice(), rows.count, rows.len, Strided { offset: 0, row_stride: rows.len, col_stride: 1 })
}

/// `dst (m x n, row-major) = lhs (m x k) rhs (k x n)`, written without reading `dst` (gemm's
/// `read_dst = false` writes every entry, zeros for `k = 0`), so `dst` may be uninitialised;
/// with `accumulate`, `dst += lhs rhs`. A product on one thread runs on the C BLAS library
/// `WORKBENCH_BLAS` names, when one does and it can read the operands as they lie
/// (`plugin_api::blas`); every other on `gemm`.
///
/// # Safety
/// `dst` must be valid for `m * n` writes, and with `accumulate` for as many reads, all of
/// them initialised.
pub(crate) unsafe fn product<T: Real>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut T,
    lhs: (&[T], Strided),
    rhs: (&[T], Strided),
    accumulate: bool,
) {
    let threads = rayon::current_num_threads();
    let parallelism = if threads > 1 && m * n * k >= PARALLEL_MIN_MACS {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    if m == 0 || n == 0 {
        return;
    }
    // SAFETY: as this function's.
    if !accumulate && unsafe { row_or_outer_product(m, n, k, dst, lhs, rhs) } {
        return;
    }
    let ((a, sa), (b, sb)) = (lhs, rhs);
    // SAFETY (both calls): the strides and offsets come from the layouts candle checked
    // against the storages, and the caller gives room for `m * n` elements.
    let (a, b) = unsafe { (a.as_ptr().add(sa.offset), b.as_ptr().add(sb.offset)) };
    if let (gemm::Parallelism::None, Some(blas)) = (parallelism, plugin_api::blas::in_use()) {
        let (a_strides, b_strides) = ((a, sa.row_stride, sa.col_stride), (b, sb.row_stride, sb.col_stride));
        if unsafe { blas.product((m, n, k), dst, a_strides, b_strides, accumulate) } {
            return;
        }
    }
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            n as isize,
            accumulate,
            a,
            sa.col_stride as isize,
            sa.row_stride as isize,
            b,
            sb.col_stride as isize,
            sb.row_stride as isize,
            // dst = alpha dst + beta lhs rhs (alpha read only with `read_dst`).
            if accumulate { T::one() } else { T::zero() },
            T::one(),
            false,
            false,
            false,
            parallelism,
        )
    }
}

/// A sum of products `lhs_i rhs_i`, each `m x k` times `k x n`.
pub(crate) type ProductTerms<'a, T> = [((&'a [T], Strided), (&'a [T], Strided))];

/// `dst (m x n, row-major) = sum_i lhs_i rhs_i` for a weight's gradient, whose inner dimension
/// `k` (the batch's rows) is longer than the output's sides. With its AVX-512 kernels `gemm`
/// runs such a product 6-10 % faster when its output has at least as many rows as columns
/// (Zen 4, benchmark record (56); its AVX2 kernels lean the other way, by 2-5 %), so there a
/// wider output is summed as its transpose `sum_i rhs_i^T lhs_i^T` and turned into `dst` by
/// register tiles: in `scratch` when given (room for `m n`), else in the thread's scratch.
///
/// # Safety
/// As [`product`]'s for the operands; `dst` holds the `m n` entries, each written.
pub(crate) unsafe fn gradient_product<T: Real>(
    (m, n, k): (usize, usize, usize),
    dst: &mut [T],
    terms: &ProductTerms<T>,
    scratch: Option<&mut [T]>,
) {
    let turned = gemm_runs_avx512() && m < n && k > n;
    // SAFETY: as this function's.
    match (turned, scratch) {
        (false, _) => unsafe { sum_of_products((m, n, k), dst, terms, &mut [], false) },
        (true, Some(scratch)) => unsafe { sum_of_products((m, n, k), dst, terms, scratch, true) },
        (true, None) => with_scratch(m * n, |scratch| unsafe { sum_of_products((m, n, k), dst, terms, scratch, true) }),
    }
}

/// Whether `gemm` multiplies with its AVX-512 kernels, as it does where the processor has them
/// and the kernels are not capped below (`avx2-emulation.sh` builds it without them and caps
/// the kernels at AVX2 alike).
fn gemm_runs_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    return plugin_api::isa::kernels_isa() == plugin_api::isa::Isa::Avx512;
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// [`gradient_product`] as it is or, with `turned`, as its transpose in `scratch`.
///
/// # Safety
/// As [`gradient_product`]'s.
unsafe fn sum_of_products<T: Real>(
    (m, n, k): (usize, usize, usize),
    dst: &mut [T],
    terms: &ProductTerms<T>,
    scratch: &mut [T],
    turned: bool,
) {
    assert!(dst.len() >= m * n, "gradient_product: {} entries for a {m} x {n} product", dst.len());
    if !turned {
        for (i, &(lhs, rhs)) in terms.iter().enumerate() {
            // SAFETY: as this function's.
            unsafe { product(m, n, k, dst.as_mut_ptr(), lhs, rhs, i > 0) };
        }
        return;
    }
    assert!(scratch.len() >= m * n, "gradient_product: {} scratch entries for a {n} x {m} product", scratch.len());
    for (i, &((a, sa), (b, sb))) in terms.iter().enumerate() {
        // SAFETY: as this function's; the transposed views read the same entries.
        unsafe { product(n, m, k, scratch.as_mut_ptr(), (b, sb.transposed()), (a, sa.transposed()), i > 0) };
    }
    transpose_into(scratch, Strided::rows_of(m), (n, m), dst);
}

/// `dst = lhs rhs` when it is a row times a matrix (`m = 1`, the step-size network's time
/// embedding) or an outer product (`k = 1`, that row's weight gradient): gemm spends
/// microseconds of per-call set-up on these few thousand multiply-adds, a plain loop a
/// fraction of one. Returns `false`, writing nothing, for any other product, or a row whose
/// matrix is laid out so that neither its rows nor its columns are contiguous.
///
/// # Safety
/// As [`product`]'s.
unsafe fn row_or_outer_product<T: Real>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut T,
    (a, sa): (&[T], Strided),
    (b, sb): (&[T], Strided),
) -> bool {
    if m != 1 && k != 1 {
        return false;
    }
    let a_at = |i: usize, p: usize| a[sa.offset + i * sa.row_stride + p * sa.col_stride];
    let b_row = |p: usize| &b[sb.offset + p * sb.row_stride..][..(n - 1) * sb.col_stride + 1];
    // SAFETY: the caller gives room for `m * n` elements.
    let out = unsafe { std::slice::from_raw_parts_mut(dst, m * n) };
    if k == 1 {
        // out[i, j] = a[i] b[j], from `b`'s row gathered once.
        let row: Vec<T> = (0..n).map(|j| b[sb.offset + j * sb.col_stride]).collect();
        widest(
            #[inline(always)]
            || {
                for (i, out) in out.chunks_exact_mut(n).enumerate() {
                    let a = a_at(i, 0);
                    for (o, &b) in out.iter_mut().zip(&row) {
                        *o = a * b;
                    }
                }
            },
        );
        return true;
    }
    if sb.col_stride == 1 {
        // out = sum_p a[p] b[p, :], one contiguous row of `b` at a time.
        widest(
            #[inline(always)]
            || {
                out.fill(T::zero());
                for p in 0..k {
                    let a = a_at(0, p);
                    for (o, &b) in out.iter_mut().zip(b_row(p)) {
                        *o += a * b;
                    }
                }
            },
        );
        return true;
    }
    if sb.row_stride == 1 && sa.col_stride == 1 {
        // out[j] = a . b[:, j], both contiguous.
        let a = &a[sa.offset..][..k];
        widest(
            #[inline(always)]
            || {
                for (j, o) in out.iter_mut().enumerate() {
                    *o = dot(a, &b[sb.offset + j * sb.col_stride..][..k]);
                }
            },
        );
        return true;
    }
    false
}

/// The weight `[k, n]` as a matrix, or with `transposed` the weight `[n, k]` as its transpose.
pub(crate) fn weight_matrix(layout: &Layout, k: usize, transposed: bool, op: &'static str) -> Result<(usize, Strided)> {
    let dims = layout.dims();
    let (s, offset) = (layout.stride(), layout.start_offset());
    match (dims, transposed) {
        (&[wk, n], false) if wk == k => Ok((n, Strided { offset, row_stride: s[0], col_stride: s[1] })),
        (&[n, wk], true) if wk == k => Ok((n, Strided { offset, row_stride: s[1], col_stride: s[0] })),
        _ if transposed => bail!("{op}: the weight must be [n, {k}] (used transposed), got shape {dims:?}"),
        _ => bail!("{op}: the weight must be [{k}, n] (the input's last dimension first), got shape {dims:?}"),
    }
}

fn forward<T: Real>(
    x: &[T],
    xl: &Layout,
    w: &[T],
    wl: &Layout,
    transposed: bool,
    bias: Option<Vec<T>>,
    op: &'static str,
) -> Result<Vec<T>> {
    let mut buf = Vec::new();
    let (x, m, k, sx) = matrix_of(x, xl, &mut buf);
    let (n, sw) = weight_matrix(wl, k, transposed, op)?;
    let mut out = Vec::with_capacity(m * n);
    // SAFETY: the product writes all `m * n` entries.
    unsafe {
        product(m, n, k, out.as_mut_ptr(), (x, sx), (w, sw), false);
        out.set_len(m * n);
    }
    if let Some(b) = bias {
        if b.len() != n {
            bail!("{op}: the bias has {} entries for {n} outputs", b.len())
        }
        widest(
            #[inline(always)]
            || {
                for row in out.chunks_exact_mut(n.max(1)) {
                    for (y, &b) in row.iter_mut().zip(&b) {
                        *y += b;
                    }
                }
            },
        );
    }
    Ok(out)
}

/// `x`'s shape with the last dimension replaced by the weight's output width (once
/// [`forward`] has checked the weight).
fn output_shape(xl: &Layout, wl: &Layout, transposed: bool) -> Shape {
    let mut dims = xl.dims().to_vec();
    let n = if transposed { wl.dims().first() } else { wl.dims().last() };
    if let (Some(last), Some(&n)) = (dims.last_mut(), n) {
        *last = n;
    }
    Shape::from(dims)
}

/// `[dx (x's shape, flattened), dw (the weight's shape), db ([n], with a bias)]`.
#[allow(clippy::too_many_arguments)]
fn backward<T: Real>(
    x: &[T],
    xl: &Layout,
    w: &[T],
    wl: &Layout,
    dy: &[T],
    dyl: &Layout,
    (with_bias, transposed): (bool, bool),
    op: &'static str,
) -> Result<Vec<T>> {
    let (mut xbuf, mut dybuf) = (Vec::new(), Vec::new());
    // The bias gradient reads `dy` by rows, as it is (before `matrix_of` may gather it).
    let (dy_storage, dy_rows) = (dy, Rows::new(dyl));
    let (x, m, k, sx) = matrix_of(x, xl, &mut xbuf);
    let (n, sw) = weight_matrix(wl, k, transposed, op)?;
    let (dy, dm, dn, sdy) = matrix_of(dy, dyl, &mut dybuf);
    if (dm, dn) != (m, n) {
        bail!("{op}: the output gradient is {dm} x {dn}, expected {m} x {n}")
    }
    let bias_len = if with_bias { n } else { 0 };
    let mut out = output_buffer_with_room::<T>(m * k + k * n, bias_len);
    let (dx, dw) = out.split_at_mut(m * k);
    // SAFETY: the products write all of `dx` (`m * k`) and `dw` (`k * n`).
    unsafe { product(m, k, n, dx.as_mut_ptr(), (dy, sdy), (w, sw.transposed()), false) };
    // The weight's own shape: [n, k] (dW^T = dy^T x) when used transposed, else [k, n].
    let (rows, cols, term) = match transposed {
        true => (n, k, ((dy, sdy.transposed()), (x, sx))),
        false => (k, n, ((x, sx.transposed()), (dy, sdy))),
    };
    // SAFETY: as above.
    unsafe { gradient_product((rows, cols, m), dw, &[term], None) };
    // `db`, zero-filled for the sums below to add into.
    out.resize(m * k + k * n + bias_len, T::zero());
    let db = &mut out[m * k + k * n..];
    if with_bias {
        add_column_sums(dy_storage, &dy_rows, db);
    }
    Ok(out)
}

/// `x w`, or `x w^T` when `transposed` (a weight `[n, k]` as PyTorch's `nn.Linear` keeps it);
/// with `relu`, `relu` of it: the rectifier applied to the product's output while it is still
/// in the cache, where a separate op reads and writes it once more from memory, and only the
/// rectified output kept (the backward reads ReLU's derivative off it).
pub(crate) struct Linear {
    pub transposed: bool,
    pub relu: bool,
}

/// `x w + b` (or `x w^T + b`).
pub(crate) struct LinearBias {
    pub transposed: bool,
}

/// The backward of both: arguments `x`, `w`, `dy`; result `[dx, dw (, db)]`.
struct LinearBackward {
    with_bias: bool,
    transposed: bool,
}

impl CustomOp2 for Linear {
    fn name(&self) -> &'static str {
        if self.relu {
            "fused-linear-relu"
        } else {
            "fused-linear"
        }
    }

    fn product_flops(&self, x: &Shape, _w: &Shape, res: &Shape) -> u64 {
        crate::flops::product(x, res)
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout, ws: &CpuStorage, wl: &Layout) -> Result<(CpuStorage, Shape)> {
        fn rectified<T: Real>(mut y: Vec<T>, relu: bool) -> Vec<T> {
            if relu {
                widest(
                    #[inline(always)]
                    || {
                        for v in y.iter_mut() {
                            *v = if *v > T::zero() { *v } else { T::zero() };
                        }
                    },
                );
            }
            y
        }
        let name = self.name();
        let out = per_real!(s, name, |T| rectified(
            forward(slice::<T>(s, name)?, l, slice::<T>(ws, name)?, wl, self.transposed, None, name)?,
            self.relu
        ));
        Ok((out, output_shape(l, wl, self.transposed)))
    }

    fn bwd(&self, x: &Tensor, w: &Tensor, res: &Tensor, dy: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let dy = if self.relu { relu_backward_from_output(res, dy)? } else { dy.clone() };
        let [dx, dw] = unpack(
            &x.apply_op3_no_bwd(w, &dy, &LinearBackward { with_bias: false, transposed: self.transposed })?,
            [x, w],
        )?;
        Ok((Some(dx), Some(dw)))
    }
}

impl CustomOp3 for LinearBias {
    fn name(&self) -> &'static str {
        "fused-linear-bias"
    }

    fn product_flops(&self, x: &Shape, _w: &Shape, _b: &Shape, res: &Shape) -> u64 {
        crate::flops::product(x, res)
    }

    fn cpu_fwd(
        &self,
        s: &CpuStorage,
        l: &Layout,
        ws: &CpuStorage,
        wl: &Layout,
        bs: &CpuStorage,
        bl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let name = self.name();
        let out = per_real!(s, name, |T| {
            let b = read_vector::<T>(bs, bl, name)?;
            forward(slice::<T>(s, name)?, l, slice::<T>(ws, name)?, wl, self.transposed, Some(b), name)?
        });
        Ok((out, output_shape(l, wl, self.transposed)))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let [dx, dw, db] = unpack(
            &x.apply_op3_no_bwd(w, dy, &LinearBackward { with_bias: true, transposed: self.transposed })?,
            [x, w, b],
        )?;
        Ok((Some(dx), Some(dw), Some(db)))
    }
}

impl CustomOp3 for LinearBackward {
    fn name(&self) -> &'static str {
        "fused-linear-backward"
    }

    fn cpu_fwd(
        &self,
        s: &CpuStorage,
        l: &Layout,
        ws: &CpuStorage,
        wl: &Layout,
        ds: &CpuStorage,
        dl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let name = self.name();
        let out = per_real!(s, name, |T| {
            let (x, w, dy) = (slice::<T>(s, name)?, slice::<T>(ws, name)?, slice::<T>(ds, name)?);
            backward(x, l, w, wl, dy, dl, (self.with_bias, self.transposed), name)?
        });
        let len = storage_len(&out);
        Ok((out, Shape::from(len)))
    }
}

/// `x + v` with `v` (`[n]`) added to every row of `x` (`[..., n]`): candle's
/// `broadcast_add`, whose backward reduces over the leading dimensions slowly.
pub(crate) struct AddRow;

impl CustomOp2 for AddRow {
    fn name(&self) -> &'static str {
        "fused-add-row"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout, vs: &CpuStorage, vl: &Layout) -> Result<(CpuStorage, Shape)> {
        fn add<T: Real>(x: &[T], l: &Layout, v: &[T]) -> Vec<T> {
            map_rows(
                x,
                &Rows::new(l),
                #[inline(always)]
                |x, y| {
                    for ((y, &x), &v) in y.iter_mut().zip(x).zip(v) {
                        *y = x + v;
                    }
                },
            )
        }
        let name = self.name();
        let n = l.dims().last().copied().unwrap_or(1);
        if vl.dims() != [n] {
            bail!("{name}: the row vector must be [{n}], got {:?}", vl.dims())
        }
        let out = per_real!(s, name, |T| add(slice::<T>(s, name)?, l, &read_vector::<T>(vs, vl, name)?));
        Ok((out, l.shape().clone()))
    }

    fn bwd(&self, _x: &Tensor, _v: &Tensor, _res: &Tensor, dy: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        Ok((Some(dy.clone()), Some(dy.apply_op1_no_bwd(&ColumnSums)?)))
    }
}

/// `sum_rows dy`: `[..., n]` to `[n]`.
struct ColumnSums;

impl candle_core::CustomOp1 for ColumnSums {
    fn name(&self) -> &'static str {
        "fused-column-sums"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        fn sums<T: Real>(x: &[T], l: &Layout) -> Vec<T> {
            let rows = Rows::new(l);
            let mut out = vec![T::zero(); rows.len];
            add_column_sums(x, &rows, &mut out);
            out
        }
        let name = self.name();
        let n = l.dims().last().copied().unwrap_or(1);
        let out = per_real!(s, name, |T| sums(slice::<T>(s, name)?, l));
        Ok((out, Shape::from(n)))
    }
}

/// `out += sum_rows x` over the rows of `x` (any layout): a bias's gradient.
fn add_column_sums<T: Real>(x: &[T], rows: &Rows, out: &mut [T]) {
    let mut buf = Vec::new();
    widest(
        #[inline(always)]
        || {
            for r in 0..rows.count {
                for (o, &x) in out.iter_mut().zip(rows.read(x, r, &mut buf)) {
                    *o += x;
                }
            }
        },
    );
}

#[cfg(test)]
mod tests {
    use super::{gemm_runs_avx512, gradient_product, sum_of_products, Strided};

    /// A weight gradient `x^T dy + dy2^T a` equals the sums written out, summed as it is and
    /// as its transpose, for outputs wider and taller than long and for short inner
    /// dimensions; the scratch is left alone when it is not needed.
    #[test]
    fn a_gradient_product_is_the_sum_of_its_products_either_way() {
        for (m, n, k) in [(3, 7, 20), (7, 3, 20), (3, 7, 5), (5, 5, 30), (16, 40, 81), (1, 2, 3)] {
            // `x` and `dy2` stored as k x m (read transposed), `dy` and `a` as k x n.
            let values =
                |len: usize, salt: usize| (0..len).map(|i| ((i * 7 + salt) % 11) as f64 - 5.0).collect::<Vec<_>>();
            let (x, dy2, dy, a) = (values(k * m, 1), values(k * m, 2), values(k * n, 3), values(k * n, 4));
            let expected: Vec<f64> = (0..m * n)
                .map(|e| {
                    (0..k).map(|p| x[p * m + e / n] * dy[p * n + e % n] + dy2[p * m + e / n] * a[p * n + e % n]).sum()
                })
                .collect();
            let (tall, wide) = (Strided::rows_of(m).transposed(), Strided::rows_of(n));
            let terms = [((&x[..], tall), (&dy[..], wide)), ((&dy2[..], tall), (&a[..], wide))];
            for turned in [false, true] {
                let mut out = vec![f64::NAN; m * n];
                let mut scratch = vec![f64::NAN; m * n];
                // SAFETY: the strides stay inside the operands, `out` holds m x n entries.
                unsafe { sum_of_products((m, n, k), &mut out, &terms, &mut scratch, turned) };
                assert_eq!(out, expected, "{m} x {n}, inner {k}, turned {turned}");
                assert_eq!(scratch.iter().all(|v| v.is_nan()), !turned, "{m} x {n}: scratch used only turned");
            }
        }
    }

    /// Only an output wider than tall, over a longer inner dimension, is turned, and only
    /// where `gemm` runs AVX-512 (the kernels' tests run again under narrower instruction
    /// sets): the scratch given is written only then.
    #[test]
    fn only_wide_gradients_are_turned_and_only_with_avx512() {
        let turns = |m: usize, n: usize, k: usize| {
            let (lhs, rhs) = (vec![1.0f32; k * m], vec![1.0f32; k * n]);
            let terms = [((&lhs[..], Strided::rows_of(m).transposed()), (&rhs[..], Strided::rows_of(n)))];
            let (mut out, mut scratch) = (vec![0.0; m * n], vec![f32::NAN; m * n]);
            // SAFETY: the strides stay inside the operands, `out` holds m x n entries.
            unsafe { gradient_product((m, n, k), &mut out, &terms, Some(&mut scratch)) };
            assert!(out.iter().all(|&v| v == k as f32), "{m} x {n}, inner {k}");
            !scratch.iter().all(|v| v.is_nan())
        };
        assert_eq!(turns(128, 512, 1296), gemm_runs_avx512());
        assert!(!turns(512, 128, 1296));
        assert!(!turns(128, 128, 1296));
        assert!(!turns(128, 512, 81));
    }
}
