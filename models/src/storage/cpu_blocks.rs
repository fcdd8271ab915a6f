//! Weight matrices kept in their GGML blocks on the CPU ([`WeightFormat::Blocks`]), and
//! their products: each activation row is quantized to Q8_1 (32-element types) or Q8_K
//! (k-quants, i-quants) and dotted with every weight row by vkml-quant's block dot
//! products ([`vkml_quant::vec_dot_q8_1_rows`], [`vkml_quant::vec_dot_q8_k_rows`]: ggml's
//! integer arithmetic, vectorised with AVX2 where the CPU has it), the rows split over
//! every core (rayon). This is how llama.cpp's CPU backend multiplies quantized weights;
//! the rounding of the activations to 8 bits is the difference from the dequantized
//! oracle ([`WeightFormat::Dequantized`]).
//!
//! [`WeightFormat::Blocks`]: super::WeightFormat::Blocks
//! [`WeightFormat::Dequantized`]: super::WeightFormat::Dequantized

use vkml_quant::GgmlType;

type CResult<T> = candle_core::Result<T>;

/// The activations a weight type dots with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Activations {
    /// Q8_1 blocks of 32 ([`vkml_quant::vec_dot_q8_1`]).
    Q8_1,
    /// Q8_K blocks of 256 ([`vkml_quant::vec_dot_q8_k`]).
    Q8K,
}

fn activations(ty: GgmlType) -> Option<Activations> {
    match vkml_quant::dot_activations(ty)? {
        GgmlType::Q8_K => Some(Activations::Q8K),
        _ => Some(Activations::Q8_1),
    }
}

/// Whether matrices of `ty` can stay in their blocks (a block dot product exists).
pub fn keeps_blocks(ty: GgmlType) -> bool {
    activations(ty).is_some()
}

/// A weight matrix `[rows, k]` in its GGML blocks, row after row.
pub struct BlockMatrix {
    ty: GgmlType,
    rows: usize,
    k: usize,
    row_bytes: usize,
    bytes: Vec<u8>,
}

impl std::fmt::Debug for BlockMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BlockMatrix({:?}, {} x {})", self.ty, self.rows, self.k)
    }
}

/// Threads the CPU backend's products run on: `VKML_CPU_THREADS` if set, else every core.
pub fn cpu_threads() -> usize {
    std::env::var("VKML_CPU_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The pool that works beside the calling thread: [`cpu_threads`] - 1 threads (at least
/// one), so that with the caller every core has one thread. (Rayon's global pool has a
/// thread per core besides the caller, and its idle threads yielding in a loop took the
/// cores the caller's serial work needed: several seconds of system time per benchmark.)
fn pool() -> &'static rayon::ThreadPool {
    static POOL: std::sync::OnceLock<rayon::ThreadPool> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(cpu_threads().saturating_sub(1).max(1))
            .thread_name(|i| format!("vkml-cpu-{i}"))
            .build()
            .expect("a thread pool (threads could not be started)")
    })
}

/// Fewest rows per thread's share: enough work to outweigh handing it over.
const ROWS_PER_TASK: usize = 64;

/// `work(first, out_share)` over `out` (units of `unit` values) split into one contiguous
/// share per thread of the CPU backend's pool plus one for the calling thread, which works
/// too (handing every share to the pool and sleeping until it is done cost as much as the
/// work on small matrices); shares of at least `min_units` units. The first error wins.
pub(super) fn split<E: Send>(
    out: &mut [f32],
    unit: usize,
    min_units: usize,
    work: impl Fn(usize, &mut [f32]) -> Result<(), E> + Sync,
) -> Result<(), E> {
    let pool = pool();
    let units = out.len() / unit.max(1);
    let shares = pool.current_num_threads() + 1;
    let per = units.div_ceil(shares).max(min_units.min(units)).max(1);
    let mut jobs = out.chunks_mut(per * unit).enumerate();
    let Some((_, o0)) = jobs.next() else { return Ok(()) };
    let errors = parking_lot::Mutex::new(None);
    pool.in_place_scope(|s| {
        for (i, o) in jobs {
            let (work, errors) = (&work, &errors);
            s.spawn(move |_| {
                if let Err(e) = work(i * per, o) {
                    *errors.lock() = Some(e);
                }
            });
        }
        if let Err(e) = work(0, o0) {
            *errors.lock() = Some(e);
        }
    });
    errors.into_inner().map_or(Ok(()), Err)
}

impl BlockMatrix {
    /// `bytes` (`rows` rows of `k` values of `ty`) kept as they are.
    ///
    /// # Errors
    /// A type without a block dot product, `k` not a whole number of blocks, or `bytes`
    /// of another length.
    pub fn new(ty: GgmlType, rows: usize, k: usize, bytes: &[u8]) -> CResult<BlockMatrix> {
        let Some(act) = activations(ty) else { candle_core::bail!("{ty:?} has no CPU block dot product") };
        let act_block = if act == Activations::Q8K { vkml_quant::QK_K } else { 32 };
        if k == 0 || !k.is_multiple_of(ty.block_size()) || !k.is_multiple_of(act_block) {
            candle_core::bail!("rows of {k} values are not whole {ty:?} and Q8 activation blocks")
        }
        let row_bytes = k / ty.block_size() * ty.type_size();
        if rows.checked_mul(row_bytes) != Some(bytes.len()) {
            candle_core::bail!("{} bytes are not {rows} rows of {k} {ty:?} values", bytes.len())
        }
        Ok(BlockMatrix { ty, rows, k, row_bytes, bytes: bytes.to_vec() })
    }

    /// `(rows, k)`.
    pub fn dims(&self) -> (usize, usize) {
        (self.rows, self.k)
    }

    /// The GGML type.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    /// The rows of `parts`, in order, as one matrix.
    ///
    /// # Errors
    /// No parts, or parts of different types or row lengths.
    pub fn concat(parts: &[&BlockMatrix]) -> CResult<BlockMatrix> {
        let Some(first) = parts.first() else { candle_core::bail!("no matrices to stack") };
        if parts.iter().any(|p| p.ty != first.ty || p.k != first.k) {
            candle_core::bail!("stacked matrices differ in type or row length")
        }
        let bytes: Vec<u8> = parts.iter().flat_map(|p| p.bytes.iter().copied()).collect();
        BlockMatrix::new(first.ty, parts.iter().map(|p| p.rows).sum(), first.k, &bytes)
    }

    /// Row `r` dequantized.
    ///
    /// # Errors
    /// `r` past the rows.
    pub fn row(&self, r: usize) -> CResult<Vec<f32>> {
        if r >= self.rows {
            candle_core::bail!("row {r} is past the {} rows", self.rows)
        }
        vkml_quant::dequantize_to_vec(self.ty, &self.bytes[r * self.row_bytes..(r + 1) * self.row_bytes])
            .map_err(candle_core::Error::wrap)
    }

    /// Rows `r0 .. r0 + n` times one `x: f32[k]` (an expert's slice of a 3-D expert
    /// tensor): `x` quantized to the type's activation blocks (Q8_1 or Q8_K) once, then
    /// the rows' block dot products, split over the threads.
    ///
    /// # Errors
    /// Rows past the matrix, `x` not of length `k`.
    pub fn rows_times(&self, r0: usize, n: usize, x: &[f32]) -> CResult<Vec<f32>> {
        if r0 + n > self.rows || x.len() != self.k {
            candle_core::bail!("rows {r0}..{} of {} times {} values of {}", r0 + n, self.rows, x.len(), self.k)
        }
        let err = |e: vkml_quant::QuantError| candle_core::Error::wrap(e);
        let w = &self.bytes[r0 * self.row_bytes..(r0 + n) * self.row_bytes];
        let mut y = vec![0f32; n];
        let rows_of = |r: usize, o: &[f32]| &w[r * self.row_bytes..(r + o.len()) * self.row_bytes];
        match activations(self.ty) {
            Some(Activations::Q8_1) => {
                let q = vkml_quant::quantize_q8_1(x).map_err(err)?;
                split(&mut y, 1, ROWS_PER_TASK, |r, o| vkml_quant::vec_dot_q8_1_rows(self.ty, rows_of(r, o), &q, o))
                    .map_err(err)?;
            }
            Some(Activations::Q8K) => {
                let q = vkml_quant::quantize_q8_k(x).map_err(err)?;
                split(&mut y, 1, ROWS_PER_TASK, |r, o| vkml_quant::vec_dot_q8_k_rows(self.ty, rows_of(r, o), &q, o))
                    .map_err(err)?;
            }
            None => unreachable!("BlockMatrix::new admits only types with a dot product"),
        }
        Ok(y)
    }

    /// `rows(weights, out)` over the matrix's rows split as [`split`] splits them.
    fn split_rows<E: Send>(
        &self,
        out: &mut [f32],
        rows: impl Fn(&[u8], &mut [f32]) -> Result<(), E> + Sync,
    ) -> Result<(), E> {
        split(out, 1, ROWS_PER_TASK, |r0, o| rows(&self.bytes[r0 * self.row_bytes..][..o.len() * self.row_bytes], o))
    }

    /// `x Wᵀ` for `x: f32[t, k]` (row-major): `f32[t, rows]`. Every token's activations
    /// are quantized first; the weight rows are then split over the threads once, each
    /// share dotted with every token (a prompt's tokens read each weight row once per
    /// share, not once per token).
    ///
    /// # Errors
    /// `x` not a whole number of rows of `k`.
    pub fn matmul(&self, x: &[f32]) -> CResult<Vec<f32>> {
        if !x.len().is_multiple_of(self.k) {
            candle_core::bail!("{} activations are not rows of {}", x.len(), self.k)
        }
        let t = x.len() / self.k;
        let err = |e: vkml_quant::QuantError| candle_core::Error::wrap(e);
        // yᵀ: `[rows, t]`, so that a share of weight rows owns a contiguous run of it.
        let mut yt = vec![0f32; t * self.rows];
        match activations(self.ty) {
            Some(Activations::Q8_1) => {
                let q: Vec<_> =
                    x.chunks_exact(self.k).map(vkml_quant::quantize_q8_1).collect::<Result<_, _>>().map_err(err)?;
                self.split_tokens(&mut yt, t, |w, o, i| vkml_quant::vec_dot_q8_1_rows(self.ty, w, &q[i], o))
                    .map_err(err)?;
            }
            Some(Activations::Q8K) => {
                let q: Vec<_> =
                    x.chunks_exact(self.k).map(vkml_quant::quantize_q8_k).collect::<Result<_, _>>().map_err(err)?;
                self.split_tokens(&mut yt, t, |w, o, i| vkml_quant::vec_dot_q8_k_rows(self.ty, w, &q[i], o))
                    .map_err(err)?;
            }
            None => unreachable!("BlockMatrix::new admits only types with a dot product"),
        }
        if t == 1 {
            return Ok(yt);
        }
        let mut y = vec![0f32; t * self.rows];
        for (r, col) in yt.chunks_exact(t).enumerate() {
            for (i, v) in col.iter().enumerate() {
                y[i * self.rows + r] = *v;
            }
        }
        Ok(y)
    }

    /// `yt: [rows, t]` from `dot(weight rows, out, token i)`, the weight rows split over
    /// the threads.
    fn split_tokens<E: Send>(
        &self,
        yt: &mut [f32],
        t: usize,
        dot: impl Fn(&[u8], &mut [f32], usize) -> Result<(), E> + Sync,
    ) -> Result<(), E> {
        if t == 1 {
            return self.split_rows(yt, |w, o| dot(w, o, 0));
        }
        split(yt, t, ROWS_PER_TASK, |r0, o| {
            let n = o.len() / t;
            let w = &self.bytes[r0 * self.row_bytes..][..n * self.row_bytes];
            let mut tmp = vec![0f32; n];
            for i in 0..t {
                dot(w, &mut tmp, i)?;
                for (r, v) in tmp.iter().enumerate() {
                    o[r * t + i] = *v;
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The block product equals the f32 product of the dequantized weights with the
    /// activations rounded to Q8 (the dot products' own arithmetic), within f32 summation
    /// order, for a 32-block and a k-quant type over several tokens.
    #[test]
    fn block_products_match_dequantized_weights_on_q8_activations() {
        let (rows, k) = (130, 512);
        let w: Vec<f32> = (0..rows * k).map(|i| ((i * 7919 % 1000) as f32 / 500.0) - 1.0).collect();
        let x: Vec<f32> = (0..3 * k).map(|i| ((i * 31 % 97) as f32 / 48.0) - 1.0).collect();
        for ty in [GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K] {
            let bytes = vkml_quant::quantize(ty, &w).unwrap();
            let m = BlockMatrix::new(ty, rows, k, &bytes).unwrap();
            let y = m.matmul(&x).unwrap();
            let wd = vkml_quant::dequantize_to_vec(ty, &bytes).unwrap();
            for (ti, xr) in x.chunks(k).enumerate() {
                let xq = match activations(ty).unwrap() {
                    Activations::Q8_1 => vkml_quant::dequantize_to_vec(
                        GgmlType::Q8_1,
                        bytemuck::cast_slice(&vkml_quant::quantize_q8_1(xr).unwrap()),
                    )
                    .unwrap(),
                    Activations::Q8K => vkml_quant::dequantize_to_vec(
                        GgmlType::Q8_K,
                        bytemuck::cast_slice(&vkml_quant::quantize_q8_k(xr).unwrap()),
                    )
                    .unwrap(),
                };
                for r in 0..rows {
                    let want: f64 = (0..k).map(|c| f64::from(wd[r * k + c]) * f64::from(xq[c])).sum();
                    let scale: f64 = (0..k).map(|c| (f64::from(wd[r * k + c]) * f64::from(xq[c])).abs()).sum();
                    let got = f64::from(y[ti * rows + r]);
                    assert!((got - want).abs() <= 1e-4 * scale.max(1.0), "{ty:?} token {ti} row {r}: {got} vs {want}");
                }
            }
        }
        assert!(BlockMatrix::new(GgmlType::F16, 1, 32, &[0; 64]).is_err());
        assert!(BlockMatrix::new(GgmlType::Q4_K, 1, 32, &[0; 18]).is_err());
    }
}
