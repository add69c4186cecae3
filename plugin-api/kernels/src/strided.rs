//! Reading tensors in whatever layout candle hands a custom op (transposed, narrowed or
//! broadcast views included), and splitting row-wise work over the rayon pool.

use crate::real::Real;
use crate::widest::widest;
use candle_core::{bail, CpuStorage, CustomOp3, Layout, Result, Tensor};
use rayon::prelude::*;
use std::borrow::Cow;

/// Below this many elements an op runs on the calling thread: waking the pool costs more.
const PARALLEL_MIN_ELEMENTS: usize = 16_384;

/// Elements each parallel task gets at least.
const TASK_MIN_ELEMENTS: usize = 4_096;

/// The slice of `storage` as `T`, or an error naming the op for any other dtype.
pub(crate) fn slice<'a, T: Real>(storage: &'a CpuStorage, op: &'static str) -> Result<&'a [T]> {
    match T::cpu_storage_as_slice(storage) {
        Ok(s) => Ok(s),
        Err(_) => bail!("{op}: expected {:?} storage, got {:?}", T::DTYPE, dtype(storage)),
    }
}

/// The rows of a tensor along one axis (the last one unless said otherwise): where each row
/// starts in storage, how many elements it has and the stride between them.
#[derive(Debug, Clone)]
pub(crate) struct Rows {
    outer_dims: Vec<usize>,
    outer_strides: Vec<usize>,
    start: usize,
    /// The storage distance between every two consecutive rows, when it is one (a contiguous
    /// tensor, or one narrowed in its last dimension): then a row's offset is one product,
    /// not a division per leading dimension (per row of every op, and per token and head in
    /// the attentions).
    even_spacing: Option<usize>,
    /// Elements per row.
    pub len: usize,
    /// Storage distance between consecutive elements of a row.
    pub step: usize,
    /// Number of rows.
    pub count: usize,
}

impl Rows {
    /// The rows along the last dimension (a scalar is one row of one element).
    pub fn new(layout: &Layout) -> Self {
        let dims = layout.dims();
        let strides = layout.stride();
        match dims.len() {
            0 => Rows {
                outer_dims: vec![],
                outer_strides: vec![],
                start: layout.start_offset(),
                even_spacing: Some(0),
                len: 1,
                step: 1,
                count: 1,
            },
            rank => Rows {
                outer_dims: dims[..rank - 1].to_vec(),
                outer_strides: strides[..rank - 1].to_vec(),
                start: layout.start_offset(),
                even_spacing: even_spacing(&dims[..rank - 1], &strides[..rank - 1]),
                len: dims[rank - 1],
                step: strides[rank - 1],
                count: dims[..rank - 1].iter().product(),
            },
        }
    }

    /// Storage offset of the first element of row `row` (rows in row-major order of the
    /// leading dimensions).
    #[inline(always)]
    pub fn offset(&self, row: usize) -> usize {
        if let Some(spacing) = self.even_spacing {
            return self.start + row * spacing;
        }
        let mut rest = row;
        let mut offset = self.start;
        for k in (0..self.outer_dims.len()).rev() {
            let d = self.outer_dims[k];
            offset += (rest % d) * self.outer_strides[k];
            rest /= d;
        }
        offset
    }

    /// Storage distance between consecutive rows of the innermost leading dimension (the
    /// tokens of a `[B, N, W]` tensor).
    #[inline(always)]
    pub fn inner_stride(&self) -> usize {
        self.outer_strides.last().copied().unwrap_or(0)
    }

    /// Row `row` of `data`: borrowed when its elements are adjacent, else gathered into `buf`.
    #[inline(always)]
    pub fn read<'a, T: Copy>(&self, data: &'a [T], row: usize, buf: &'a mut Vec<T>) -> &'a [T] {
        let offset = self.offset(row);
        if self.step == 1 {
            &data[offset..offset + self.len]
        } else {
            buf.clear();
            buf.extend((0..self.len).map(|j| data[offset + j * self.step]));
            buf
        }
    }
}

/// The one storage distance between consecutive rows of leading dimensions `dims` with
/// `strides`, if there is one: each dimension's stride is the next one's times its size
/// (dimensions of size 1 aside, whose stride is never used).
fn even_spacing(dims: &[usize], strides: &[usize]) -> Option<usize> {
    let mut spacing = None;
    let mut span = 1;
    for (&d, &s) in dims.iter().zip(strides).rev() {
        if d == 1 {
            continue;
        }
        match spacing {
            None => spacing = Some(s),
            Some(first) if s == first * span => {}
            Some(_) => return None,
        }
        span *= d;
    }
    Some(spacing.unwrap_or(0))
}

/// The matrices of a tensor of rank >= 2 (its last two dimensions), for per-matrix ops.
#[derive(Debug, Clone)]
pub(crate) struct Matrices {
    outer_dims: Vec<usize>,
    outer_strides: Vec<usize>,
    start: usize,
    count: usize,
    /// Rows of each matrix.
    pub rows: usize,
    /// Columns of each matrix.
    pub cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl Matrices {
    /// The matrices of `layout`; refuses rank < 2.
    pub fn new(layout: &Layout, op: &'static str) -> Result<Self> {
        let dims = layout.dims();
        let strides = layout.stride();
        let rank = dims.len();
        if rank < 2 {
            bail!("{op}: expects a tensor of rank >= 2 (matrices in its last two dimensions), got shape {dims:?}")
        }
        Ok(Matrices {
            outer_dims: dims[..rank - 2].to_vec(),
            outer_strides: strides[..rank - 2].to_vec(),
            start: layout.start_offset(),
            count: dims[..rank - 2].iter().product(),
            rows: dims[rank - 2],
            cols: dims[rank - 1],
            row_stride: strides[rank - 2],
            col_stride: strides[rank - 1],
        })
    }

    /// Number of matrices.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Copies matrix `m` of `data` into `out` (row-major, `rows * cols`).
    pub fn read_into<T: Copy>(&self, data: &[T], m: usize, out: &mut [T]) {
        let mut rest = m;
        let mut base = self.start;
        for k in (0..self.outer_dims.len()).rev() {
            base += (rest % self.outer_dims[k]) * self.outer_strides[k];
            rest /= self.outer_dims[k];
        }
        let (rs, cs, cols) = (self.row_stride, self.col_stride, self.cols);
        for i in 0..self.rows {
            let row = &mut out[i * cols..(i + 1) * cols];
            let start = base + i * rs;
            if cs == 1 {
                row.copy_from_slice(&data[start..start + cols]);
            } else {
                for (j, v) in row.iter_mut().enumerate() {
                    *v = data[start + j * cs];
                }
            }
        }
    }
}

/// A small vector (a gain) read into a contiguous `Vec`.
pub(crate) fn read_vector<T: Real>(storage: &CpuStorage, layout: &Layout, op: &'static str) -> Result<Vec<T>> {
    let data = slice::<T>(storage, op)?;
    let rows = Rows::new(layout);
    let mut out = Vec::with_capacity(rows.count * rows.len);
    let mut buf = Vec::new();
    for r in 0..rows.count {
        out.extend_from_slice(rows.read(data, r, &mut buf));
    }
    Ok(out)
}

/// A tensor's values in order: borrowed where they lie contiguous, else read into a copy.
pub(crate) fn contiguous_values<'a, T: Real>(
    storage: &'a CpuStorage,
    layout: &Layout,
    op: &'static str,
) -> Result<Cow<'a, [T]>> {
    Ok(match layout.contiguous_offsets() {
        Some((start, end)) => Cow::Borrowed(&slice::<T>(storage, op)?[start..end]),
        None => Cow::Owned(read_vector::<T>(storage, layout, op)?),
    })
}

/// A buffer of `len` elements for an op that writes every one of them before reading any.
///
/// Release builds leave it unfilled: zeroing it was a whole extra pass over every fused op's
/// output (3-4 % of a default Hyper-SET step, the profile's `memset`). Debug builds, which the
/// tests run, fill it with NaN, so an element an op failed to write shows up as NaN in every
/// test comparing the op's values.
pub(crate) fn output_buffer<T: Real>(len: usize) -> Vec<T> {
    output_buffer_with_room(len, 0)
}

/// As [`output_buffer`], with capacity for `room` more elements pushed after the `len`.
pub(crate) fn output_buffer_with_room<T: Real>(len: usize, room: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(len + room);
    if cfg!(debug_assertions) {
        out.resize(len, T::nan());
        return out;
    }
    // SAFETY: `T` is f32 or f64, plain values for which any bits are a number, and the callers
    // write every element before one is read (candle's own CPU outputs are made this way).
    unsafe { out.set_len(len) };
    out
}

/// A fresh output of `total` elements, `item_len` per item, written by `f(first_item, chunk)`
/// over consecutive chunks of whole items, in parallel when the work is large enough. `f` must
/// write every element of its chunk (the buffer is not zeroed, see [`output_buffer`]). The
/// caller marks `f` `#[inline(always)]`, so that it is compiled inside [`widest`].
pub(crate) fn fill<T: Real, F>(total: usize, item_len: usize, f: F) -> Vec<T>
where
    F: Fn(usize, &mut [T]) + Sync,
{
    let mut out = output_buffer(total);
    for_each_chunk(&mut out, item_len, f);
    out
}

/// Two fresh outputs of `items` items each, `a_len` and `b_len` elements per item, written
/// together by `f(first_item, a_chunk, b_chunk)` over chunks of the same items, in parallel
/// when the work is large enough; as [`fill`] otherwise.
pub(crate) fn fill_pair<T: Real, F>(items: usize, (a_len, b_len): (usize, usize), f: F) -> (Vec<T>, Vec<T>)
where
    F: Fn(usize, &mut [T], &mut [T]) + Sync,
{
    let (mut a, mut b) = (output_buffer(items * a_len), output_buffer(items * b_len));
    let Some(per_task) = parallel_plan(items * (a_len + b_len), a_len + b_len) else {
        widest(
            #[inline(always)]
            || f(0, &mut a, &mut b),
        );
        return (a, b);
    };
    // Chunks of `per_task` items of each output; an output of empty items lends every task
    // an empty chunk, so that the other is still written whole.
    let tasks = items.div_ceil(per_task);
    fn chunks<T>(v: &mut [T], len: usize, per_task: usize, tasks: usize) -> Vec<&mut [T]> {
        if len == 0 {
            (0..tasks).map(|_| <&mut [T]>::default()).collect()
        } else {
            v.chunks_mut(per_task * len).collect()
        }
    }
    let pairs = chunks(&mut a, a_len, per_task, tasks).into_iter().zip(chunks(&mut b, b_len, per_task, tasks));
    run_tasks(
        pairs.collect(),
        per_task,
        #[inline(always)]
        |first, (a, b)| f(first, a, b),
        |(), ()| (),
    );
    (a, b)
}

/// Runs `f(first_item, chunk)` over consecutive chunks of `out`, `item_len` elements per
/// item, in parallel when the work is large enough. Each chunk holds whole items.
pub(crate) fn for_each_chunk<T: Send, F>(out: &mut [T], item_len: usize, f: F)
where
    F: Fn(usize, &mut [T]) + Sync,
{
    map_chunks(out, item_len, f, |(), ()| ())
}

/// A fresh output shaped as `x`'s rows, each row written by `f(x_row, out_row)` (any layout of
/// `x`): a row-wise op. The caller marks `f` `#[inline(always)]`, so that it is compiled inside
/// [`widest`].
pub(crate) fn map_rows<T: Real, F>(x: &[T], rows: &Rows, f: F) -> Vec<T>
where
    F: Fn(&[T], &mut [T]) + Sync,
{
    map_row_pairs(
        x,
        rows,
        x,
        rows,
        #[inline(always)]
        |x, _, out| f(x, out),
    )
}

/// A fresh output shaped as `x`'s rows, each row written by `f(x_row, dy_row, out_row)` from
/// the same row of `x` and of `dy` (any layouts): the backward of a row-wise op. The caller
/// marks `f` `#[inline(always)]`, so that it is compiled inside [`widest`].
pub(crate) fn map_row_pairs<T: Real, F>(x: &[T], rows: &Rows, dy: &[T], dy_rows: &Rows, f: F) -> Vec<T>
where
    F: Fn(&[T], &[T], &mut [T]) + Sync,
{
    let len = rows.len;
    fill(
        rows.count * len,
        len,
        #[inline(always)]
        |first, chunk| {
            let (mut xbuf, mut dybuf) = (Vec::new(), Vec::new());
            for (k, out) in chunk.chunks_exact_mut(len.max(1)).enumerate() {
                f(rows.read(x, first + k, &mut xbuf), dy_rows.read(dy, first + k, &mut dybuf), out);
            }
        },
    )
}

/// As [`for_each_chunk`], with each chunk also returning a partial result (e.g. a partial
/// gain gradient) that `merge` combines in chunk order (so the result does not depend on
/// which thread ran which chunk).
pub(crate) fn map_chunks<T: Send, R: Send, F, M>(out: &mut [T], item_len: usize, f: F, merge: M) -> R
where
    F: Fn(usize, &mut [T]) -> R + Sync,
    M: Fn(R, R) -> R,
{
    let Some(per_task) = parallel_plan(out.len(), item_len) else {
        return widest(
            #[inline(always)]
            || f(0, out),
        );
    };
    let chunks = out.chunks_mut(per_task * item_len.max(1)).collect();
    run_tasks(chunks, per_task, f, merge)
}

/// Runs `f(first_item, task)` for every task of `per_task` items on the pool, each inside
/// [`widest`], and merges the results in task order: the parallel half of [`map_chunks`] and
/// [`fill_pair`].
fn run_tasks<C: Send, R: Send, F, M>(tasks: Vec<C>, per_task: usize, f: F, merge: M) -> R
where
    F: Fn(usize, C) -> R + Sync,
    M: Fn(R, R) -> R,
{
    let parts: Vec<R> = tasks
        .into_par_iter()
        .enumerate()
        .map(|(c, task)| {
            widest(
                #[inline(always)]
                || f(c * per_task, task),
            )
        })
        .collect();
    parts.into_iter().reduce(merge).expect("at least one task")
}

/// `a + b` entry by entry, in `a`: how [`map_chunks`] merges the chunks' partial sums of a
/// vector (a gain's or a row shift's gradient).
pub(crate) fn sum_parts<T: Real>(mut a: Vec<T>, b: Vec<T>) -> Vec<T> {
    for (a, b) in a.iter_mut().zip(b) {
        *a += b;
    }
    a
}

/// Items per parallel task for `elements` in items of `item_len`, or `None` to run on the
/// calling thread.
pub(crate) fn parallel_plan(elements: usize, item_len: usize) -> Option<usize> {
    let item_len = item_len.max(1);
    let items = elements / item_len;
    worth_parallel(elements, items).then(|| items_per_task(items, item_len))
}

/// Whether to split `elements` in `items` over the pool: not for small work, and not when
/// the pool has one thread (the caller would only wait for it).
fn worth_parallel(elements: usize, items: usize) -> bool {
    // Tests split large work even with one thread (the pool then runs the chunks in turn),
    // so that the chunking is checked whatever RAYON_NUM_THREADS says.
    elements >= PARALLEL_MIN_ELEMENTS && items >= 2 && (rayon::current_num_threads() > 1 || cfg!(test))
}

/// Items per task: about four tasks per pool thread, each with enough elements to be worth it.
fn items_per_task(items: usize, item_len: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    let by_count = items.div_ceil(4 * threads);
    let by_size = TASK_MIN_ELEMENTS.div_ceil(item_len);
    by_count.max(by_size).max(1)
}

/// The gradients a backward op returns packed one after the other in a flat tensor, cut back
/// into the shapes of `like` (each gradient has its argument's shape), in order.
pub(crate) fn unpack<const K: usize>(packed: &Tensor, like: [&Tensor; K]) -> Result<[Tensor; K]> {
    let mut start = 0;
    let mut parts = Vec::with_capacity(K);
    for t in like {
        let n = t.elem_count();
        parts.push(packed.narrow(0, start, n)?.reshape(t.shape())?);
        start += n;
    }
    parts.try_into().map_err(|_| candle_core::Error::Msg("unpack: wrong number of parts".into()))
}

/// Refuses arguments of an element-wise op that differ in shape, naming every shape.
pub(crate) fn check_same_shapes(layouts: &[&Layout], op: &'static str) -> Result<()> {
    if layouts.iter().any(|l| l.dims() != layouts[0].dims()) {
        let dims: Vec<_> = layouts.iter().map(|l| l.dims().to_vec()).collect();
        bail!("{op}: the arguments must have one shape, got {dims:?}")
    }
    Ok(())
}

/// `[p | q]` with `(p_i, q_i) = f(a_i, b_i, c_i)`, element by element over three arguments of
/// one shape (any layouts), each part contiguous in that shape: the one-pass backward of an
/// element-wise op of two arguments, from its output's gradient and the two. Rows go to
/// threads as [`parallel_plan`] says.
pub(crate) fn map_triples_to_pair<T: Real, F>(
    a: (&[T], &Layout),
    b: (&[T], &Layout),
    c: (&[T], &Layout),
    f: F,
) -> Vec<T>
where
    F: Fn(T, T, T) -> (T, T) + Sync,
{
    let (ar, br, cr) = (Rows::new(a.1), Rows::new(b.1), Rows::new(c.1));
    let (len, n) = (ar.len, ar.count * ar.len);
    let mut out = output_buffer(2 * n);
    let (p, q) = out.split_at_mut(n);
    let len = len.max(1);
    let work = crate::widest::inlined(
        #[inline(always)]
        |first: usize, p: &mut [T], q: &mut [T]| {
            let (mut ab, mut bb, mut cb) = (Vec::new(), Vec::new(), Vec::new());
            for (k, (p, q)) in p.chunks_exact_mut(len).zip(q.chunks_exact_mut(len)).enumerate() {
                let r = first + k;
                let (xs, ys, zs) = (ar.read(a.0, r, &mut ab), br.read(b.0, r, &mut bb), cr.read(c.0, r, &mut cb));
                // Zipped rather than indexed: without the bounds checks the loop vectorises.
                for ((p, q), ((&x, &y), &z)) in p.iter_mut().zip(q.iter_mut()).zip(xs.iter().zip(ys).zip(zs)) {
                    (*p, *q) = f(x, y, z);
                }
            }
        },
    );
    match parallel_plan(n, len) {
        None => widest(
            #[inline(always)]
            || work(0, p, q),
        ),
        Some(per_task) => p.par_chunks_mut(per_task * len).zip(q.par_chunks_mut(per_task * len)).enumerate().for_each(
            |(c, (p, q))| {
                widest(
                    #[inline(always)]
                    || work(c * per_task, p, q),
                )
            },
        ),
    }
    out
}

/// The gradients of a three-argument op, from its backward `op` run on the same arguments and
/// returning them packed (`[da | db | dc]` flattened).
pub(crate) fn three_gradients(
    op: &impl CustomOp3,
    [a, b, c]: [&Tensor; 3],
) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
    let [da, db, dc] = unpack(&a.apply_op3_no_bwd(b, c, op)?, [a, b, c])?;
    Ok((Some(da), Some(db), Some(dc)))
}

/// The bytes of what an op keeps for its backward in CPU storages (the custom ops'
/// `kept_bytes`), none where it kept nothing.
pub(crate) fn kept_bytes<'a>(kept: impl IntoIterator<Item = &'a CpuStorage>) -> usize {
    kept.into_iter().map(|s| storage_len(s) * dtype(s).size_in_bytes()).sum()
}

/// The number of elements of a CPU storage: the length of a packed result (`[dx, dw, ...]`)
/// that [`unpack`] splits.
pub(crate) fn storage_len(storage: &CpuStorage) -> usize {
    match storage {
        CpuStorage::F32(v) => v.len(),
        CpuStorage::F64(v) => v.len(),
        _ => 0,
    }
}

/// The dtype of a CPU storage, for error messages.
pub(crate) fn dtype(storage: &CpuStorage) -> candle_core::DType {
    use candle_core::backend::BackendStorage;
    storage.dtype()
}

#[cfg(test)]
mod tests {
    use super::Rows;
    use candle_core::{Device, Tensor};

    /// The evenly spaced rows' one product gives the offsets of the division per leading
    /// dimension, and the layouts that are not evenly spaced take the division.
    #[test]
    fn row_offsets_agree_with_the_division_for_every_view() {
        let t = Tensor::arange(0f32, 2.0 * 3.0 * 4.0 * 5.0, &Device::Cpu).unwrap().reshape((2, 3, 4, 5)).unwrap();
        let views = [
            ("contiguous", t.clone(), true),
            ("last two transposed", t.transpose(2, 3).unwrap(), false),
            ("narrowed last", t.narrow(3, 1, 3).unwrap(), true),
            ("narrowed leading", t.narrow(1, 1, 2).unwrap(), false),
            ("leading transposed", t.transpose(0, 1).unwrap(), false),
            ("broadcast", t.narrow(0, 0, 1).unwrap().broadcast_as((3, 3, 4, 5)).unwrap(), false),
            ("size-1 leading", t.narrow(0, 1, 1).unwrap(), true),
            ("size-1 between", t.narrow(1, 2, 1).unwrap(), false),
        ];
        for (name, view, even) in views {
            let layout = view.layout();
            let rows = Rows::new(layout);
            assert_eq!(rows.even_spacing.is_some(), even, "{name}: evenly spaced");
            let division = Rows { even_spacing: None, ..rows.clone() };
            assert!(rows.count > 1, "{name}: rows to compare");
            for r in 0..rows.count {
                assert_eq!(rows.offset(r), division.offset(r), "{name}: row {r}");
            }
        }
    }
}
