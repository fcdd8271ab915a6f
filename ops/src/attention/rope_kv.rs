//! The rotary embedding with the cache append (`rope_kv.comp`, [`rope_kv_append`]), what a
//! producer folds of it ([`RopeKv`]) and the prologue before it ([`QkvPrologue`]).

use vkml_hal::{Buffer, BufferArg, Stream};

use super::*;
use crate::dtype::Dtype;
use crate::error::{OpsError, Result};
use crate::launch::{pipeline, push_words, rows_grid};
use crate::tuning;

/// One source of [`rope_kv_append`]: token `i`'s heads start at element `off + i * stride`
/// of `buffer` (f32); a view of the stacked Q|K|V rows of one mat-vec, or a buffer of
/// its own (`off` 0, `stride` heads · d).
#[derive(Debug, Clone, Copy)]
pub struct HeadRows<'a> {
    /// The f32 values.
    pub buffer: &'a Buffer,
    /// First element of token 0's heads.
    pub off: usize,
    /// Elements from one token's heads to the next's.
    pub stride: usize,
}

/// The rotary embedding of [`rope_kv_append`]: `cos`, `sin`: `f32[positions, rot / 2]`
/// (the tables of [`crate::nn::rope`]), the first `rot` dims of each head rotated as
/// `style` pairs them.
#[derive(Debug, Clone, Copy)]
pub struct RopeTables<'a> {
    /// cos of the angles, `f32[positions, rot / 2]`.
    pub cos: &'a Buffer,
    /// sin of the angles, `f32[positions, rot / 2]`.
    pub sin: &'a Buffer,
    /// Rows of the tables.
    pub positions: usize,
    /// Rotated dims of each head (even, ≤ d).
    pub rot: usize,
    /// How dims pair up.
    pub style: crate::nn::RopeStyle,
}

/// Where a Q|K|V product goes when its producer rotates and appends it itself
/// ([`crate::quant::LinearEpilogue::RopeKv`], [`crate::quant::mat_mat_rope_kv`]): the
/// product's rows are `n_heads` query heads, then the caches' `n_kv_heads` key heads, then
/// as many value heads (`d` each, the caches' head dim); for `t` tokens at positions
/// `pos0..`, the query heads are rotated into an f32 `[t, n_heads, d]` output, the key heads
/// rotated into `caches.0` and the value heads copied into `caches.1` — what
/// [`rope_kv_append`] does with the product.
#[derive(Debug, Clone, Copy)]
pub struct RopeKv<'a> {
    /// The rotation.
    pub rope: RopeTables<'a>,
    /// Query heads.
    pub n_heads: usize,
    /// Position of the first token.
    pub pos0: usize,
    /// The key and value caches (one shape).
    pub caches: (&'a KvCache, &'a KvCache),
    /// The bias and head norms before the rotation.
    pub prologue: QkvPrologue<'a>,
}

impl RopeKv<'_> {
    /// Rows of the Q|K|V product: `(n_heads + 2 n_kv_heads) d`.
    pub fn qkv_rows(&self) -> usize {
        (self.n_heads + 2 * self.caches.0.n_kv_heads) * self.caches.0.d
    }

    /// Records what the producer would have done, from the product itself: `p: f32[t,
    /// qkv_rows]` (packed) through [`rope_kv_append`] into `q_out` and the caches.
    ///
    /// # Errors
    /// As [`rope_kv_append`].
    pub fn append_product(&self, s: &mut Stream, p: &Buffer, t: usize, q_out: &Buffer) -> Result<()> {
        let (d, rows) = (self.caches.0.d, self.qkv_rows());
        let (qr, kr) = (self.n_heads * d, self.caches.0.n_kv_heads * d);
        let at = |off| HeadRows { buffer: p, off, stride: rows };
        let heads = (at(0), at(qr), at(qr + kr));
        rope_kv_append(s, self.rope, heads, self.n_heads, t, self.pos0, self.caches, q_out, self.prologue)
    }

    /// Checks `t` tokens of it with `q_out` (named `op` in the error): caches of one shape,
    /// positions within the tables and no more new tokens than cache slots, `q_out` holding
    /// `[t, n_heads, d]` f32.
    ///
    /// # Errors
    /// [`OpsError::Shape`] naming the first that fails.
    pub(crate) fn check(&self, op: &'static str, t: usize, q_out: &Buffer) -> Result<()> {
        let (k_cache, v_cache) = self.caches;
        check_cache_pair(op, k_cache, v_cache)?;
        self.prologue.check(op, self.n_heads + 2 * k_cache.n_kv_heads, k_cache.d)?;
        let sh = crate::nn::RopeShape {
            bh: self.n_heads,
            t,
            d: k_cache.d,
            rot: self.rope.rot,
            pos_offset: self.pos0,
            positions: self.rope.positions,
            token_major: true,
        };
        crate::nn::check_rope_tables(op, self.rope.cos, self.rope.sin, sh)?;
        if t > k_cache.ctx {
            return Err(OpsError::Shape {
                op,
                reason: format!("{t} new positions exceed the cache's {} slots", k_cache.ctx),
            });
        }
        let q_bytes = 4 * (t * self.n_heads * k_cache.d) as u64;
        if q_out.size() < q_bytes {
            return Err(OpsError::Shape {
                op,
                reason: format!(
                    "q_out holds {} bytes, {t} tokens of {} query heads need {q_bytes}",
                    q_out.size(),
                    self.n_heads
                ),
            });
        }
        Ok(())
    }
}

/// The attention prologue in one dispatch (`rope_kv.comp`): for `t_new` tokens at
/// positions `pos0..`, the query heads `q` (`n_heads` per token) rotated into `q_out:
/// f32[t_new, n_heads, d]`, the key heads `k` rotated into `k_cache` and the value heads `v`
/// copied into `v_cache` (f16) — [`crate::nn::rope`] of Q and K, then
/// [`kv_append_pair_from`], with the same results. `prologue` first adds the QKV bias and
/// normalises the query and key heads ([`QkvPrologue`]; each head's sum of squares reduced
/// by its workgroup, `rope_kv.*_sg` with subgroup arithmetic, in another order than
/// `nn::rms_norm`'s).
///
/// # Errors
/// [`OpsError::Shape`] for caches of different shapes, positions past the tables or the
/// cache, sources or `q_out` too small, a prologue whose bias or norm weights are short or
/// whose eps is negative; HAL errors.
#[allow(clippy::too_many_arguments)]
pub fn rope_kv_append(
    s: &mut Stream,
    rope: RopeTables<'_>,
    (q, k, v): (HeadRows<'_>, HeadRows<'_>, HeadRows<'_>),
    n_heads: usize,
    t_new: usize,
    pos0: usize,
    (k_cache, v_cache): (&KvCache, &KvCache),
    q_out: &Buffer,
    prologue: QkvPrologue<'_>,
) -> Result<()> {
    let bad = |reason: String| Err(OpsError::Shape { op: "rope_kv_append", reason });
    check_cache_pair("rope_kv_append", k_cache, v_cache)?;
    let d = k_cache.d;
    prologue.check("rope_kv_append", n_heads + 2 * k_cache.n_kv_heads, d)?;
    let sh = crate::nn::RopeShape {
        bh: n_heads,
        t: t_new,
        d,
        rot: rope.rot,
        pos_offset: pos0,
        positions: rope.positions,
        token_major: true,
    };
    crate::nn::check_rope_tables("rope_kv_append", rope.cos, rope.sin, sh)?;
    check_append(Dtype::F32, k.buffer, k.off, k.stride, t_new, pos0, k_cache)?;
    check_append(Dtype::F32, v.buffer, v.off, v.stride, t_new, pos0, v_cache)?;
    let q_row = n_heads * d;
    let q_end = if t_new == 0 { 0 } else { q.off + (t_new - 1) * q.stride + q_row };
    if q.stride < q_row || q.buffer.size() < 4 * q_end as u64 || q_out.size() < 4 * (t_new * q_row) as u64 {
        return bad(format!("q rows of stride {} at {} or q_out do not hold {t_new} x {q_row} f32", q.stride, q.off));
    }
    if t_new == 0 || d == 0 {
        return Ok(());
    }
    let dev = s.device().clone();
    let name = match (rope.style, tuning::subgroup_reduce(dev.caps())) {
        (crate::nn::RopeStyle::Neox, false) => "rope_kv.neox_f32",
        (crate::nn::RopeStyle::Neox, true) => "rope_kv.neox_f32_sg",
        (crate::nn::RopeStyle::Interleaved, false) => "rope_kv.interleaved_f32",
        (crate::nn::RopeStyle::Interleaved, true) => "rope_kv.interleaved_f32_sg",
    };
    let p = pipeline(&dev, name, 64)?;
    let [has_bias, q_eps, k_eps] = prologue.words();
    let pc = push_words(&[
        t_new as u32,
        n_heads as u32,
        k_cache.n_kv_heads as u32,
        d as u32,
        rope.rot as u32,
        pos0 as u32,
        k_cache.ctx as u32,
        q.off as u32,
        q.stride as u32,
        k.off as u32,
        k.stride as u32,
        v.off as u32,
        v.stride as u32,
        has_bias,
        q_eps,
        k_eps,
    ]);
    let grid = rows_grid(&dev, (d / 2).div_ceil(64) as u32, t_new * (n_heads + 2 * k_cache.n_kv_heads));
    let [bias, q_norm, k_norm] = prologue.bindings(q.buffer);
    let bindings = [
        q.buffer.into(),
        k.buffer.into(),
        v.buffer.into(),
        rope.cos.into(),
        rope.sin.into(),
        q_out.into(),
        k_cache.buffer().into(),
        v_cache.buffer().into(),
        bias,
        q_norm,
        k_norm,
    ];
    s.dispatch(&p, &bindings, &pc, grid)?;
    Ok(())
}

/// What the rotating kernels ([`flash_attn_rope_decode`], [`rope_kv_append`] and the Q|K|V
/// mat-mat's store through [`RopeKv`]) do to the query, key and value heads before the
/// rotation, in llama.cpp's order: the QKV bias added (Qwen2), then RMS norms of each query
/// and key head (Qwen3, Gemma 3: `x / sqrt(mean(x²) + eps) * w` over the head dim).
#[derive(Debug, Clone, Copy, Default)]
pub struct QkvPrologue<'a> {
    /// The stacked Q|K|V bias, f32 `[(n_heads + 2 n_kv_heads) d]` from element 0.
    pub bias: Option<&'a Buffer>,
    /// The query heads' norm: weight f32 `[d]` and eps.
    pub q_norm: Option<(&'a Buffer, f32)>,
    /// The key heads' norm: weight f32 `[d]` and eps.
    pub k_norm: Option<(&'a Buffer, f32)>,
}

impl<'a> QkvPrologue<'a> {
    /// Whether it does nothing.
    pub fn is_none(&self) -> bool {
        self.bias.is_none() && self.q_norm.is_none() && self.k_norm.is_none()
    }

    /// Checks it for `heads` stacked heads (`n_heads + 2 n_kv_heads`) of `d` (named `op`).
    ///
    /// # Errors
    /// [`OpsError::Shape`] for a bias of fewer than `heads * d` f32, a norm weight of fewer
    /// than `d` f32, or an eps that is negative or NaN.
    pub(crate) fn check(&self, op: &'static str, heads: usize, d: usize) -> Result<()> {
        let bias_len = heads * d;
        if self.bias.is_some_and(|b| b.size() < 4 * bias_len as u64) {
            return Err(OpsError::Shape { op, reason: format!("the QKV bias holds fewer than {bias_len} f32") });
        }
        for (what, n) in [("q", self.q_norm), ("k", self.k_norm)] {
            if let Some((w, eps)) = n {
                if w.size() < 4 * d as u64 || eps.is_nan() || eps < 0.0 {
                    return Err(OpsError::Shape {
                        op,
                        reason: format!(
                            "the {what} norm needs a weight of {d} f32 and eps >= 0, got {} bytes and {eps}",
                            w.size()
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// Its push-constant words as the kernels read them: has_bias, q_eps, k_eps (f32 bits;
    /// -1 for no norm).
    pub(crate) fn words(&self) -> [u32; 3] {
        [
            u32::from(self.bias.is_some()),
            self.q_norm.map_or(-1.0f32, |n| n.1).to_bits(),
            self.k_norm.map_or(-1.0f32, |n| n.1).to_bits(),
        ]
    }

    /// Its bindings (bias, query norm, key norm), `stand_in` for those absent.
    pub(crate) fn bindings<'b>(&self, stand_in: &'b Buffer) -> [BufferArg<'b>; 3]
    where
        'a: 'b,
    {
        [
            self.bias.unwrap_or(stand_in).into(),
            self.q_norm.map_or(stand_in, |n| n.0).into(),
            self.k_norm.map_or(stand_in, |n| n.0).into(),
        ]
    }
}
