//! The CPU backend's norms, rope, gated activations and attention as loops over slices:
//! the arithmetic of candle-nn's CPU kernels (`ops::rms_norm`, `rotary_emb::rope{,_i}`,
//! `Tensor::{silu, gelu, gelu_erf}`, softmax attention), without a tensor per step. A
//! decode step is many small ops; through candle each was a few allocations, copies and
//! layout checks, which cost more than the arithmetic, and attention concatenated and
//! widened the whole cache every step.

use std::borrow::Cow;

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, Layout};
use vkml_ops::nn::{GluActivation, RopeStyle};

use super::AttnParams;

type CResult<T> = candle_core::Result<T>;

/// √(2/π) as candle's `gelu` takes it (`SQRT_TWO_OVER_PI_F32`: the f32 nearest the exact
/// value).
const SQRT_TWO_OVER_PI: f32 = 0.797_884_6;

/// The f32 elements of `(s, l)` in row-major order: borrowed where the layout is
/// contiguous, else copied.
///
/// # Errors
/// Storage of another dtype.
pub(super) fn f32s<'a>(s: &'a CpuStorage, l: &Layout) -> CResult<Cow<'a, [f32]>> {
    let CpuStorage::F32(v) = s else { candle_core::bail!("expected f32 activations, got {:?}", s.dtype()) };
    if let Some((a, b)) = l.contiguous_offsets() {
        let past = || candle_core::Error::Msg(format!("a layout of {:?} runs past {} values", l.shape(), v.len()));
        return v.get(a..b).map(Cow::Borrowed).ok_or_else(past);
    }
    let mut packed = CpuStorage::F32(vec![0f32; l.shape().elem_count()]);
    s.copy_strided_src(&mut packed, 0, l)?;
    let CpuStorage::F32(packed) = packed else { unreachable!("made f32 above") };
    Ok(Cow::Owned(packed))
}

/// candle-nn's `ops::rms_norm` over rows of `w.len()`: `x / sqrt(mean(x²) + eps) * w`.
///
/// # Errors
/// `x` not whole rows.
pub(super) fn rms_norm(x: &[f32], w: &[f32], eps: f32) -> CResult<Vec<f32>> {
    let n = w.len();
    if n == 0 || !x.len().is_multiple_of(n) {
        candle_core::bail!("rms_norm: {} values are not rows of {n}", x.len())
    }
    let mut y = vec![0f32; x.len()];
    for (xr, yr) in x.chunks_exact(n).zip(y.chunks_exact_mut(n)) {
        let sum2: f32 = xr.iter().map(|v| v * v).sum();
        let m = (sum2 / n as f32 + eps).sqrt();
        for ((d, s), a) in yr.iter_mut().zip(xr).zip(w) {
            *d = *s / m * *a;
        }
    }
    Ok(y)
}

/// Rotary embedding of `x: f32[t, heads, d]` at positions `pos0..pos0 + t`: the first
/// `rot` dims of each head rotate by the `cos`, `sin` rows (`f32[positions, rot / 2]`),
/// paired as `style` says (candle-nn's `rope_i` / `rope`); the rest pass through.
///
/// # Errors
/// Shapes that do not fit, positions past the tables.
#[allow(clippy::too_many_arguments)]
pub(super) fn rope(
    x: &[f32],
    (t, heads, d): (usize, usize, usize),
    cos: &[f32],
    sin: &[f32],
    pos0: usize,
    rot: usize,
    style: RopeStyle,
) -> CResult<Vec<f32>> {
    let half = rot / 2;
    if x.len() != t * heads * d || rot > d || !rot.is_multiple_of(2) {
        candle_core::bail!("rope: {} values, {t} x {heads} x {d}, rotating {rot}", x.len())
    }
    if cos.len() != sin.len() || (pos0 + t) * half > cos.len() {
        candle_core::bail!("rope: positions {pos0}..{} run past the tables", pos0 + t)
    }
    let mut y = x.to_vec();
    for (i, (xt, yt)) in x.chunks_exact(heads * d).zip(y.chunks_exact_mut(heads * d)).enumerate() {
        let row = (pos0 + i) * half;
        let (c, s) = (&cos[row..row + half], &sin[row..row + half]);
        for (xh, yh) in xt.chunks_exact(d).zip(yt.chunks_exact_mut(d)) {
            for j in 0..half {
                let (a, b) = match style {
                    RopeStyle::Interleaved => (2 * j, 2 * j + 1),
                    RopeStyle::Neox => (j, j + half),
                };
                yh[a] = xh[a] * c[j] - xh[b] * s[j];
                yh[b] = xh[a] * s[j] + xh[b] * c[j];
            }
        }
    }
    Ok(y)
}

/// `act(gate) * up` for `y: f32[t, 2n]` holding `[gate | up]` per row: `f32[t, n]`, with
/// candle's activations (`silu`, `gelu` (tanh), `gelu_erf`) or gpt-oss's clamped SwiGLU.
///
/// # Errors
/// An odd row width.
pub(super) fn glu(y: &[f32], t: usize, act: GluActivation) -> CResult<Vec<f32>> {
    let width = y.len().checked_div(t).unwrap_or(0);
    if t == 0 || width * t != y.len() || !width.is_multiple_of(2) {
        candle_core::bail!("gated product: {} values are not {t} rows of [gate | up]", y.len())
    }
    let n = width / 2;
    let f = gated(act);
    Ok(y.chunks_exact(width).flat_map(|r| r[..n].iter().zip(&r[n..]).map(|(g, u)| f(*g, *u))).collect())
}

/// The gated product of one gate and up value in f32: candle's `silu`, `gelu` (tanh) or
/// `gelu_erf` of the gate times up, or ggml's `swiglu_oai` (α 1.702, limit 7, as llama.cpp
/// calls it for gpt-oss).
pub(super) fn gated(act: GluActivation) -> fn(f32, f32) -> f32 {
    match act {
        GluActivation::Silu => |g, u| g / (1.0 + (-g).exp()) * u,
        GluActivation::Gelu => |g, u| 0.5 * g * (1.0 + f32::tanh(SQRT_TWO_OVER_PI * g * (1.0 + 0.044715 * g * g))) * u,
        GluActivation::GeluErf => {
            |g, u| (candle_core::cpu::erf::erf_f32(g * std::f32::consts::FRAC_1_SQRT_2) + 1.) * 0.5 * g * u
        }
        GluActivation::SwigluOai => |g, u| {
            let (x, y) = (g.min(7.0), u.clamp(-7.0, 7.0));
            x / (1.0 + (1.702 * -x).exp()) * (y + 1.0)
        },
    }
}

/// One layer's keys or values, position after position: `[len, n_kv_heads · d]`, each
/// value rounded to f16 (as the Vulkan cache stores them) and kept as f32.
#[derive(Debug)]
pub struct CpuKvCache {
    rows: Vec<f32>,
    width: usize,
    ctx: usize,
}

impl CpuKvCache {
    /// An empty cache of rows of `width` values, bounded as a cache of `ctx` slots is.
    pub(super) fn new(width: usize, ctx: usize) -> CpuKvCache {
        CpuKvCache { rows: Vec::new(), width, ctx }
    }

    /// Writes `x: f32[t, width]` at positions `pos0..pos0 + t` (dropping what was cached
    /// from `pos0` on, as the GPU cache overwrites it). `first` is the first position the
    /// call's queries see: what a ring of `ctx` slots could not hold is refused, as on
    /// Vulkan.
    fn write(&mut self, x: &[f32], pos0: usize, first: usize) -> CResult<()> {
        let t = x.len() / self.width;
        if t * self.width != x.len() {
            candle_core::bail!("{} keys or values are not rows of {}", x.len(), self.width)
        }
        if pos0 + t - first > self.ctx {
            candle_core::bail!("positions {first}..{} run past the cache of {}", pos0 + t, self.ctx)
        }
        let len = self.rows.len() / self.width;
        if pos0 > len {
            candle_core::bail!("attention at position {pos0} with {len} cached positions")
        }
        self.rows.truncate(pos0 * self.width);
        self.rows.extend(x.iter().map(|&v| half::f16::from_f32(v).to_f32()));
        Ok(())
    }

    fn row(&self, j: usize) -> &[f32] {
        &self.rows[j * self.width..(j + 1) * self.width]
    }
}

/// [`super::ModelStorage::attention`] on the CPU: appends `k`, `v` (`f32[t, hk · d]`)
/// to the caches, then for every query row `i` (position `pos0 + i`) and head `h`, the
/// softmax over the visible positions of the scaled (and soft-capped) `q · k`, times V,
/// for `q: f32[t, heads · d]`: `f32[t, heads · d]`. With `sinks` (`[heads]`, gpt-oss) each
/// head's sink joins its softmax's denominator (llama.cpp's `ggml_soft_max_add_sinks`).
///
/// # Errors
/// Shapes that do not fit, positions past the cache.
#[allow(clippy::too_many_arguments)]
pub(super) fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    (heads, d): (usize, usize),
    kc: &mut CpuKvCache,
    vc: &mut CpuKvCache,
    pos0: usize,
    p: AttnParams,
    sinks: Option<&[f32]>,
) -> CResult<Vec<f32>> {
    let hk = kc.width / d.max(1);
    if sinks.is_some_and(|s| s.len() != heads) {
        candle_core::bail!("attention: {} sinks for {heads} query heads", sinks.map_or(0, |s| s.len()))
    }
    if d == 0 || hk == 0 || hk * d != kc.width || vc.width != kc.width || !heads.is_multiple_of(hk) {
        candle_core::bail!("{heads} query heads of {d} over a cache of rows of {}", kc.width)
    }
    let t = q.len() / (heads * d);
    if t * heads * d != q.len() || k.len() != t * kc.width || v.len() != k.len() {
        candle_core::bail!("attention: {} queries, {} keys, {} values of heads of {d}", q.len(), k.len(), v.len())
    }
    let first = match p.window {
        Some(w) if pos0 + 1 > w => pos0 + 1 - w,
        _ => 0,
    };
    kc.write(k, pos0, first)?;
    vc.write(v, pos0, first)?;
    let g = heads / hk;
    let (kc, vc) = (&*kc, &*vc);
    // Query rows `i0..` into `ys`: each row is independent, so a prompt's rows are split
    // over the cores.
    let rows = |i0: usize, ys: &mut [f32]| -> Result<(), std::convert::Infallible> {
        let mut scores = Vec::new();
        for (i, yt) in (i0..).zip(ys.chunks_exact_mut(heads * d)) {
            let qt = &q[i * heads * d..(i + 1) * heads * d];
            let pos = pos0 + i;
            let lo = p.window.map_or(0, |w| (pos + 1).saturating_sub(w));
            for (h, (qh, yh)) in qt.chunks_exact(d).zip(yt.chunks_exact_mut(d)).enumerate() {
                let col = h / g * d;
                scores.clear();
                scores.extend((lo..=pos).map(|j| {
                    let s = dot(qh, &kc.row(j)[col..col + d]) * p.scale;
                    p.softcap.map_or(s, |c| (s / c).tanh() * c)
                }));
                // A sink (gpt-oss) joins the denominator without a value.
                let sink = sinks.map(|s| s[h]);
                let max = scores.iter().copied().chain(sink).fold(f32::NEG_INFINITY, f32::max);
                let mut sum = sink.map_or(0.0, |s| (s - max).exp());
                for s in scores.iter_mut() {
                    *s = (*s - max).exp();
                    sum += *s;
                }
                for (j, s) in (lo..=pos).zip(&scores) {
                    let w = s / sum;
                    for (o, x) in yh.iter_mut().zip(&vc.row(j)[col..col + d]) {
                        *o += w * x;
                    }
                }
            }
        }
        Ok(())
    };
    let mut y = vec![0f32; q.len()];
    match t {
        1 => rows(0, &mut y),
        _ => super::cpu_blocks::split(&mut y, heads * d, 4, rows),
    }
    .unwrap_or_else(|e| match e {});
    Ok(y)
}

/// `a · b` in eight lanes (which the compiler vectorises; a plain iterator sum is one
/// sequential chain).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a8.remainder().iter().zip(b8.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in a8.zip(b8) {
        for l in 0..8 {
            lanes[l] += x[l] * y[l];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// One token's routing from its router `logits` (`f32[n_expert]`), as llama.cpp's
/// `build_moe_ffn` computes it, in f64: the probabilities (softmax or sigmoid; the logits
/// themselves for `SoftmaxWeight`), the `r.k` largest (ties to the lower id), their
/// probabilities (for `SoftmaxWeight` their softmax), normalised to sum 1 (the sum clamped
/// to at least 2^-14) where `r.norm_w`, scaled by `r.w_scale` unless it is 0.
pub(super) fn moe_route(logits: &[f32], r: vkml_ops::moe::Routing) -> (Vec<usize>, Vec<f64>) {
    use vkml_ops::moe::ExpertGating;
    let softmax = |v: &[f64]| {
        let m = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = v.iter().map(|x| (x - m).exp()).collect();
        let s: f64 = e.iter().sum();
        e.into_iter().map(|x| x / s).collect::<Vec<f64>>()
    };
    let l: Vec<f64> = logits.iter().map(|&v| f64::from(v)).collect();
    let probs = match r.gating {
        ExpertGating::Softmax => softmax(&l),
        ExpertGating::Sigmoid => l.iter().map(|v| 1.0 / (1.0 + (-v).exp())).collect(),
        ExpertGating::SoftmaxWeight => l,
    };
    let mut order: Vec<usize> = (0..probs.len()).collect();
    order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]).then(a.cmp(&b)));
    order.truncate(r.k);
    let mut w: Vec<f64> = order.iter().map(|&i| probs[i]).collect();
    if r.gating == ExpertGating::SoftmaxWeight {
        w = softmax(&w);
    }
    if r.norm_w {
        let s = w.iter().sum::<f64>().max(6.103515625e-5);
        w.iter_mut().for_each(|v| *v /= s);
    }
    if r.w_scale != 0.0 {
        w.iter_mut().for_each(|v| *v *= f64::from(r.w_scale));
    }
    (order, w)
}
