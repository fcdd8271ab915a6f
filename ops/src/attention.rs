//! Attention over an f16 KV cache: flash attention (streaming softmax) for prefill and
//! decode, with grouped-query heads, causal masking and, for decode, a split over the KV
//! length merged in the same dispatch (grouped-query kernel) or by a second pass.
//! Kernels: `shader-src/shaders/flash_attn.comp`, `flash_attn_combine.comp`,
//! `kv_append.comp`, `rope_kv.comp` (rotary embedding of Q and K with the cache append);
//! `flash_attn_gqa.comp` (the query heads of one KV head in one workgroup) where the device
//! has subgroup arithmetic; and for prefill
//! on devices with f16 cooperative matrices `flash_attn_cm.comp` ([`tensor_core_prefill`]).
//! The algorithm is FlashAttention's online softmax (Dao et al., 2022; the tensor-core loop
//! of FlashAttention-2, Dao, 2023) with FlashDecoding's split-KV (Dao et al., 2023).
//!
//! Layouts: queries and outputs `[t, n_heads, d]` (token-major, as a QKV mat-vec produces
//! them) of f32 or f16 ([`Dtype`]; arithmetic in f32); the cache f16
//! `[n_kv_heads, ctx, d]`, one [`KvCache`] for K and one for V. The softmax reductions use
//! subgroup arithmetic where the device has it ([`crate::tuning::subgroup_reduce`]).

use vkml_hal::{Buffer, BufferArg, Capabilities, Device, MemoryKind, Stream};

use crate::dtype::Dtype;
use crate::error::{OpsError, Result};
use crate::launch::{pipeline, pipeline_spec, push_words, rows_grid};
use crate::tuning;

/// Fewest query tokens for which [`flash_attn`] takes the tensor-core prefill kernel
/// where [`tensor_core_prefill`] allows it (below, the per-token kernel keeps its f32
/// operands at little cost).
pub const TENSOR_CORE_MIN_TOKENS: usize = 16;

/// Most query tokens for which a split attention merges its splits in the same dispatch
/// ([`SplitMerge::InPlace`]); more take the merge dispatch.
pub const IN_PLACE_MERGE_TOKENS: usize = 16;

/// How [`flash_attn_with`] merges the splits of a split-KV attention (`n_splits > 1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitMerge {
    /// In the attention dispatch itself where the grouped-query kernel runs and at most
    /// [`IN_PLACE_MERGE_TOKENS`] queries: the last workgroup of each (query, KV head) to
    /// finish merges (counted with a device-scope atomic); else as [`SplitMerge::Dispatch`].
    InPlace,
    /// By a second dispatch, `flash_attn_combine.comp`.
    Dispatch,
}

/// Largest head dimension the kernel takes.
pub const MAX_HEAD_DIM: usize = 256;

/// An f16 cache of keys or values, `[n_kv_heads, ctx, d]`: position `p` in slot
/// `p % ctx`. A cache of every position of a context is the plain case (`p < ctx`); a
/// sliding-window layer's cache can be a ring of fewer slots than the context, as long as
/// each call's visible keys and appended positions fit ([`flash_attn`], [`kv_append`]).
#[derive(Debug, Clone)]
pub struct KvCache {
    buffer: Buffer,
    /// Per (query token < [`IN_PLACE_MERGE_TOKENS`], KV head): the count of finished
    /// splits of a split decode attention whose splits merge in place, zero between
    /// dispatches (`flash_attn_gqa.comp`'s `combine_*` variants).
    split_counts: Buffer,
    /// KV heads.
    pub n_kv_heads: usize,
    /// Slots: positions the cache holds at once.
    pub ctx: usize,
    /// Head dimension (even, ≤ [`MAX_HEAD_DIM`]).
    pub d: usize,
}

impl KvCache {
    /// Allocates a zeroed cache in device-local memory.
    ///
    /// # Errors
    /// [`OpsError::Shape`] for an odd or too large `d`; HAL allocation errors.
    pub fn new(dev: &Device, n_kv_heads: usize, ctx: usize, d: usize) -> Result<KvCache> {
        if d == 0 || !d.is_multiple_of(2) || d > MAX_HEAD_DIM {
            return Err(OpsError::Shape {
                op: "KvCache::new",
                reason: format!("head dim {d} must be even and at most {MAX_HEAD_DIM}"),
            });
        }
        // 2 bytes per element and d even: a whole number of 32-bit words.
        let bytes = 2 * (n_kv_heads * ctx * d) as u64;
        let buffer = dev.alloc(bytes, MemoryKind::DeviceLocal)?;
        let count_bytes = 4 * (IN_PLACE_MERGE_TOKENS * n_kv_heads.max(1)) as u64;
        let split_counts = dev.alloc(count_bytes, MemoryKind::DeviceLocal)?;
        let mut s = Stream::new(dev)?;
        s.fill(&buffer, 0, bytes, 0)?;
        s.fill(&split_counts, 0, count_bytes, 0)?;
        s.finish_and_wait()?;
        Ok(KvCache { buffer, split_counts, n_kv_heads, ctx, d })
    }

    /// The device buffer (packed f16).
    pub fn buffer(&self) -> &Buffer {
        &self.buffer
    }
}

/// Records `cache[h, (pos0 + i) % ctx, :] = f16(x[i, h, :])` for `i < t_new` (`x`:
/// `dt[t_new, n_kv_heads, d]`; f16 values are copied as they are, which needs no 16-bit
/// storage feature).
///
/// # Errors
/// [`OpsError::Shape`] when positions run past the cache or `x` is too small; HAL errors.
pub fn kv_append(s: &mut Stream, dt: Dtype, x: &Buffer, t_new: usize, pos0: usize, cache: &KvCache) -> Result<()> {
    kv_append_from(s, dt, x, 0, cache.n_kv_heads * cache.d, t_new, pos0, cache)
}

/// [`kv_append`] from rows of another layout: token `i`'s `n_kv_heads * d` values start
/// at element `x_off + i * x_stride` of `x` (e.g. the K or V part of the stacked Q|K|V
/// rows a one-pass QKV mat-vec writes), with no copy.
///
/// # Errors
/// As [`kv_append`]; [`OpsError::Shape`] for a stride shorter than a token's heads, or an
/// odd offset or stride with [`Dtype::F16`] (the kernel moves pairs as 32-bit words).
#[allow(clippy::too_many_arguments)]
pub fn kv_append_from(
    s: &mut Stream,
    dt: Dtype,
    x: &Buffer,
    x_off: usize,
    x_stride: usize,
    t_new: usize,
    pos0: usize,
    cache: &KvCache,
) -> Result<()> {
    check_append(dt, x, x_off, x_stride, t_new, pos0, cache)?;
    if t_new == 0 {
        return Ok(());
    }
    let dev = s.device().clone();
    let name = if dt == Dtype::F16 { "kv_append.f16" } else { "kv_append.f32" };
    let p = pipeline(&dev, name, 64)?;
    let pc = append_push(t_new, pos0, cache, &[(x_off, x_stride)]);
    s.dispatch(&p, &[x.into(), cache.buffer().into()], &pc, append_grid(&dev, t_new, cache)?)?;
    Ok(())
}

/// [`kv_append_from`] of keys and values in one dispatch: `k = (x, x_off, x_stride)` into
/// `k_cache` and `v = (x, x_off, x_stride)` into `v_cache`, the two caches of one shape.
///
/// # Errors
/// As [`kv_append_from`] for either side; [`OpsError::Shape`] for caches of different
/// shapes.
#[allow(clippy::too_many_arguments)]
pub fn kv_append_pair_from(
    s: &mut Stream,
    dt: Dtype,
    k: (&Buffer, usize, usize),
    v: (&Buffer, usize, usize),
    t_new: usize,
    pos0: usize,
    k_cache: &KvCache,
    v_cache: &KvCache,
) -> Result<()> {
    check_cache_pair("kv_append", k_cache, v_cache)?;
    check_append(dt, k.0, k.1, k.2, t_new, pos0, k_cache)?;
    check_append(dt, v.0, v.1, v.2, t_new, pos0, v_cache)?;
    if t_new == 0 {
        return Ok(());
    }
    let dev = s.device().clone();
    let name = if dt == Dtype::F16 { "kv_append.pair_f16" } else { "kv_append.pair_f32" };
    let p = pipeline(&dev, name, 64)?;
    let pc = append_push(t_new, pos0, k_cache, &[(k.1, k.2), (v.1, v.2)]);
    let [gx, gy, _] = append_grid(&dev, t_new, k_cache)?;
    let bindings = [k.0.into(), k_cache.buffer().into(), v.0.into(), v_cache.buffer().into()];
    s.dispatch(&p, &bindings, &pc, [gx, gy, 2])?;
    Ok(())
}

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

/// kv_append.comp's push constants: t_new, n_kv_heads, d, pos0, ctx, then each side's
/// (offset, stride) of its x rows.
fn append_push(t_new: usize, pos0: usize, cache: &KvCache, sides: &[(usize, usize)]) -> Vec<u8> {
    let mut w = vec![t_new as u32, cache.n_kv_heads as u32, cache.d as u32, pos0 as u32, cache.ctx as u32];
    w.extend(sides.iter().flat_map(|&(off, stride)| [off as u32, stride as u32]));
    push_words(&w)
}

/// The grid of an append of `t_new` tokens into `cache`: x over pairs of a head's
/// elements, y over tokens x heads.
fn append_grid(dev: &Device, t_new: usize, cache: &KvCache) -> Result<[u32; 3]> {
    let gx = (cache.d / 2).div_ceil(64) as u32;
    let gy = (t_new * cache.n_kv_heads) as u32;
    if gy > dev.caps().limits.max_workgroup_count[1] {
        return Err(OpsError::Shape { op: "kv_append", reason: format!("{gy} rows exceed the device's grid") });
    }
    Ok([gx, gy, 1])
}

/// Checks one side of an append (see [`kv_append_from`]).
/// Refuses K and V caches of different shapes (named `op` in the error).
fn check_cache_pair(op: &'static str, k: &KvCache, v: &KvCache) -> Result<()> {
    if (k.n_kv_heads, k.ctx, k.d) != (v.n_kv_heads, v.ctx, v.d) {
        return Err(OpsError::Shape { op, reason: "K and V caches differ in shape".into() });
    }
    Ok(())
}

/// The split outputs of a split attention of shape `sh` (`n_splits > 1`) over heads of `d`:
/// `scratch`, checked to hold [`split_scratch_len`] f32 (named `op` in the error).
fn split_scratch<'a>(
    op: &'static str,
    sh: &AttnShape<'_>,
    d: usize,
    scratch: Option<(&'a Buffer, &'a Buffer)>,
) -> Result<(&'a Buffer, &'a Buffer)> {
    let bad = |reason: String| Err(OpsError::Shape { op, reason });
    let Some((po, ml)) = scratch else { return bad("n_splits > 1 needs scratch buffers".into()) };
    let (po_len, ml_len) = split_scratch_len(sh, d);
    if po.size() < 4 * po_len as u64 || ml.size() < 4 * ml_len as u64 {
        return bad(format!("scratch needs {po_len} and {ml_len} f32"));
    }
    Ok((po, ml))
}

fn check_append(
    dt: Dtype,
    x: &Buffer,
    x_off: usize,
    x_stride: usize,
    t_new: usize,
    pos0: usize,
    cache: &KvCache,
) -> Result<()> {
    let bad = |reason: String| Err(OpsError::Shape { op: "kv_append", reason });
    if !matches!(dt, Dtype::F32 | Dtype::F16) {
        return bad(format!("{} keys and values are not supported (f32 or f16)", dt.name()));
    }
    // Positions wrap around the slots (a ring); more new ones than slots would overwrite
    // each other.
    if t_new > cache.ctx {
        return bad(format!("positions {pos0}..{} exceed the cache's {} positions (slots)", pos0 + t_new, cache.ctx));
    }
    let row = cache.n_kv_heads * cache.d;
    if x_stride < row || (dt == Dtype::F16 && (!x_off.is_multiple_of(2) || !x_stride.is_multiple_of(2))) {
        return bad(format!("x rows of stride {x_stride} at offset {x_off} cannot hold {row} {} values", dt.name()));
    }
    let n = if t_new == 0 { 0 } else { x_off + (t_new - 1) * x_stride + row };
    if x.size() < (dt.size() * n) as u64 {
        return bad(format!("x holds {} bytes, needs {n} {}", x.size(), dt.name()));
    }
    Ok(())
}

/// One attention call: `t_q` queries at positions `q_pos0..q_pos0 + t_q` against the
/// first `kv_len` cache positions.
#[derive(Debug, Clone, Copy)]
pub struct AttnShape<'a> {
    /// Query tokens.
    pub t_q: usize,
    /// Query heads (a multiple of the cache's KV heads).
    pub n_heads: usize,
    /// Valid cache positions.
    pub kv_len: usize,
    /// Position of the first query (for the causal mask).
    pub q_pos0: usize,
    /// Mask keys after each query's position.
    pub causal: bool,
    /// Sliding window: also mask keys `window` or more positions before the query's
    /// (query `t` sees `q_pos0 + t - window < j`); 0 for none.
    pub window: usize,
    /// Attention logit soft-capping: scores `s` (after `scale`) become
    /// `softcap · tanh(s / softcap)` (Gemma 2); 0 for none.
    pub softcap: f32,
    /// Score scale, usually `1 / sqrt(d)`.
    pub scale: f32,
    /// Split the KV length over this many workgroups per (token, head) (decode); 1 for none.
    pub n_splits: usize,
    /// Attention sinks (gpt-oss; llama.cpp's `ggml_flash_attn_ext_add_sinks`): one logit per
    /// query head, f32 `[n_heads]`, that joins each row's softmax denominator and has no
    /// value (include/attn_sink.glsl); `None` for none.
    pub sinks: Option<&'a Buffer>,
}

impl AttnShape<'_> {
    /// The first key position the first query sees: `q_pos0 + 1 - window` with a window
    /// that starts past position 0, else 0. The KV splits cover keys from here on.
    pub fn first_key(&self) -> usize {
        if self.window > 0 && self.q_pos0 + 1 > self.window {
            self.q_pos0 + 1 - self.window
        } else {
            0
        }
    }

    /// Key positions some query sees: `kv_len - first_key()`.
    pub fn visible_len(&self) -> usize {
        self.kv_len.saturating_sub(self.first_key())
    }
}

/// Scratch space [`flash_attn`] needs for `n_splits > 1`: `(partial outputs, max/sum)` in
/// f32 elements.
pub fn split_scratch_len(sh: &AttnShape<'_>, d: usize) -> (usize, usize) {
    if sh.n_splits <= 1 {
        (0, 0)
    } else {
        (sh.n_splits * sh.t_q * sh.n_heads * d, sh.n_splits * sh.t_q * sh.n_heads * 2)
    }
}

/// Whether [`flash_attn`] runs a call of this shape (head dimension `d`) on the
/// tensor-core prefill kernel, `flash_attn_cm.comp`: a device with the f16
/// cooperative-matrix shape the mat-mat uses ([`tuning::coopmat_subgroup_size`]) and
/// subgroup shuffles (the softmax pairs lanes), `d` of 64, 96 or 128, no KV split and at least
/// [`TENSOR_CORE_MIN_TOKENS`] queries. That kernel
/// rounds q and the softmax weights to f16 for the tensor cores (accumulating in f32), so
/// its results differ from the per-token kernel's by about 2^-11 relative.
pub fn tensor_core_prefill(caps: &Capabilities, d: usize, sh: &AttnShape<'_>) -> bool {
    tuning::coopmat_subgroup_size(caps).is_some()
        && caps.subgroup.operations.contains(&"shuffle")
        && matches!(d, 64 | 96 | 128)
        && sh.n_splits <= 1
        && sh.t_q >= TENSOR_CORE_MIN_TOKENS
}

/// The push constants the attention kernels share (`include/flash_attn_io.glsl`), for `sh`
/// over caches like `k`, `n_splits` splits of `split_len` keys.
fn attn_words(sh: &AttnShape<'_>, k: &KvCache, n_splits: usize, split_len: usize) -> [u32; 14] {
    [
        sh.t_q as u32,
        sh.n_heads as u32,
        k.n_kv_heads as u32,
        k.d as u32,
        sh.kv_len as u32,
        sh.q_pos0 as u32,
        k.ctx as u32,
        sh.causal as u32,
        n_splits as u32,
        split_len as u32,
        sh.scale.to_bits(),
        sh.window as u32,
        sh.softcap.to_bits(),
        u32::from(sh.sinks.is_some()),
    ]
}

/// Checks `sh`'s sinks (named `op`): at least one f32 per query head.
fn check_sinks(op: &'static str, sh: &AttnShape<'_>) -> Result<()> {
    match sh.sinks {
        Some(b) if b.size() < 4 * sh.n_heads as u64 => Err(OpsError::Shape {
            op,
            reason: format!("the sinks hold {} bytes, fewer than {} f32 (one per query head)", b.size(), sh.n_heads),
        }),
        _ => Ok(()),
    }
}

/// `flash_attn_gqa.comp`'s MAX_GD (query values of a group, `g * d`) and MAX_SG
/// (subgroups per workgroup); its shared memory is `4 * (MAX_GD * (1 + MAX_SG) + 16 *
/// MAX_SG)` bytes.
const GQA_MAX_GD: usize = 1024;
const GQA_MAX_SG: usize = 4;
/// Its shared memory in bytes, and what the `rope_*` variants add (the new key and value
/// rows, 128 words each, and 9 head scales).
const GQA_SHARED: usize = gqa_shared(GQA_MAX_GD, GQA_MAX_SG);

/// `flash_attn_gqa.comp`'s shared memory in bytes for MAX_GD `gd` and MAX_SG `sg`.
const fn gqa_shared(gd: usize, sg: usize) -> usize {
    4 * (gd * (1 + sg) + 16 * sg)
}
const ROPE_IN_SHARED: usize = 4 * (2 * 128 + 9);

/// `flash_attn_gqa.comp`'s (workgroup size, pairs per lane per head) for head dim `d` and
/// `g` query heads per KV head, where it runs: subgroup arithmetic, `g <= 8`,
/// `g * d <= GQA_MAX_GD` and its shared memory (20.3 KiB) on the device, at most
/// `GQA_MAX_SG` subgroups of the smallest size per workgroup, and at most 32 f16 pairs per
/// lane for the `g` heads' outputs (registers; 64 on a CPU implementation, whose registers
/// are memory: Gemma 3's four heads of 256 over lavapipe's subgroups of 8).
/// Elsewhere `flash_attn.comp` runs, one workgroup per query head.
fn gqa_kernel(caps: &Capabilities, d: usize, g: usize) -> Option<(u32, u32)> {
    let min = caps.subgroup.min_size.max(1) as usize;
    let wg = (GQA_MAX_SG * min).min(128);
    let npl = (d / 2).div_ceil(min);
    (tuning::subgroup_reduce(caps)
        && caps.limits.max_shared_memory as usize >= GQA_SHARED
        && caps.subgroup.min_size > 0
        && (1..=8).contains(&g)
        && g * d <= GQA_MAX_GD
        && g * npl <= if caps.arch == vkml_hal::caps::ArchClass::Cpu { 64 } else { 32 })
    .then_some((wg as u32, npl as u32))
}

/// Records `out = softmax(q Kᵀ · scale + causal mask) V` per head (see the module docs for
/// layouts; `q`, `out`: `dt[t_q, n_heads, d]`). With `n_splits > 1`, `scratch` holds f32
/// buffers of at least [`split_scratch_len`] elements (whatever `dt` is).
///
/// # Errors
/// [`OpsError::Shape`] for heads that do not divide, `kv_len` past the cache, a missing or
/// small scratch, or buffers too small; [`OpsError::MissingFeature`] for [`Dtype::F16`]
/// without 16-bit storage; HAL errors.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn(
    s: &mut Stream,
    dt: Dtype,
    q: &Buffer,
    k: &KvCache,
    v: &KvCache,
    sh: AttnShape<'_>,
    out: &Buffer,
    scratch: Option<(&Buffer, &Buffer)>,
) -> Result<()> {
    flash_attn_with(s, dt, q, k, v, sh, out, scratch, SplitMerge::InPlace)
}

/// [`flash_attn`] with the splits merged as `merge` says (the same results either way;
/// tests compare the two).
///
/// # Errors
/// As [`flash_attn`].
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_with(
    s: &mut Stream,
    dt: Dtype,
    q: &Buffer,
    k: &KvCache,
    v: &KvCache,
    sh: AttnShape<'_>,
    out: &Buffer,
    scratch: Option<(&Buffer, &Buffer)>,
    merge: SplitMerge,
) -> Result<()> {
    flash_attn_impl(s, dt, q, k, v, sh, (out, dt), scratch, merge)
}

/// [`flash_attn`] of f32 `q` writing `out` as packed f16 `[t_q, n_heads, d]`: the f16 x
/// an output projection's tensor-core mat-mat reads ([`crate::quant::MatMatOptions::x_f16`]),
/// written by the attention's store instead of a `convert_f16` pass. Each element is the f16
/// rounding of [`flash_attn`]'s f32 output (tested bitwise). Only where the tensor-core
/// prefill kernel runs ([`tensor_core_prefill`]); no KV split.
///
/// # Errors
/// [`OpsError::Shape`] where [`tensor_core_prefill`] does not hold; as [`flash_attn`].
pub fn flash_attn_f16_out(
    s: &mut Stream,
    q: &Buffer,
    k: &KvCache,
    v: &KvCache,
    sh: AttnShape<'_>,
    out: &Buffer,
) -> Result<()> {
    if !tensor_core_prefill(s.device().caps(), k.d, &sh) {
        return Err(OpsError::Shape {
            op: "flash_attn_f16_out",
            reason: format!(
                "an f16 output is written by the tensor-core prefill kernel only, which this call \
                 (head dim {}, {} queries, {} splits) and device do not take",
                k.d, sh.t_q, sh.n_splits
            ),
        });
    }
    flash_attn_impl(s, Dtype::F32, q, k, v, sh, (out, Dtype::F16), None, SplitMerge::InPlace)
}

/// [`flash_attn_with`] with the output's dtype `out.1` (`q`'s, or f16 on the tensor-core
/// kernel: [`flash_attn_f16_out`]).
#[allow(clippy::too_many_arguments)]
fn flash_attn_impl(
    s: &mut Stream,
    dt: Dtype,
    q: &Buffer,
    k: &KvCache,
    v: &KvCache,
    sh: AttnShape<'_>,
    (out, out_dt): (&Buffer, Dtype),
    scratch: Option<(&Buffer, &Buffer)>,
    merge: SplitMerge,
) -> Result<()> {
    dt.require_activation(s.device(), "flash_attn")?;
    let bad = |reason: String| Err(OpsError::Shape { op: "flash_attn", reason });
    let d = k.d;
    check_cache_pair("flash_attn", k, v)?;
    if sh.n_heads == 0 || k.n_kv_heads == 0 || !sh.n_heads.is_multiple_of(k.n_kv_heads) {
        return bad(format!("{} query heads are not a multiple of {} KV heads", sh.n_heads, k.n_kv_heads));
    }
    // The visible keys must all still be in their slots.
    if sh.visible_len() > k.ctx {
        return bad(format!(
            "kv_len {} exceeds the cache's {} positions (keys {}..{} are visible)",
            sh.kv_len,
            k.ctx,
            sh.first_key(),
            sh.kv_len
        ));
    }
    let n = sh.t_q * sh.n_heads * d;
    if q.size() < (dt.size() * n) as u64 || out.size() < (out_dt.size() * n) as u64 {
        return bad(format!("q and out need {n} {} and {}", dt.name(), out_dt.name()));
    }
    check_sinks("flash_attn", &sh)?;
    if sh.t_q == 0 {
        return Ok(());
    }
    let dev = s.device().clone();
    let lim = dev.caps().limits.max_workgroup_count;
    let splits = sh.n_splits.max(1);
    // The sinks' binding, after each kernel's last (`q` stands in where there are none).
    let sinks: BufferArg<'_> = sh.sinks.unwrap_or(q).into();
    if sh.n_heads as u64 > u64::from(lim[0]) || sh.t_q as u64 > u64::from(lim[1]) || splits as u64 > u64::from(lim[2]) {
        return bad("heads, tokens or splits exceed the device's grid".into());
    }
    let split_len = sh.visible_len().div_ceil(splits).max(1);
    // flash_attn.comp's and flash_attn_cm.comp's push constants.
    let pc_words = |n_splits: usize| push_words(&attn_words(&sh, k, n_splits, split_len));
    if tensor_core_prefill(dev.caps(), d, &sh) {
        let opts =
            tuning::coopmat_pipeline_options(dev.caps(), vec![(0, 128)]).expect("checked by tensor_core_prefill");
        let name = match (dt, out_dt, d) {
            (Dtype::F16, _, 64) => "flash_attn_cm.f16_d64",
            (Dtype::F16, _, 96) => "flash_attn_cm.f16_d96",
            (Dtype::F16, _, _) => "flash_attn_cm.f16_d128",
            (_, Dtype::F16, 64) => "flash_attn_cm.f32_d64_f16_out",
            (_, Dtype::F16, 96) => "flash_attn_cm.f32_d96_f16_out",
            (_, Dtype::F16, _) => "flash_attn_cm.f32_d128_f16_out",
            (_, _, 64) => "flash_attn_cm.f32_d64",
            (_, _, 96) => "flash_attn_cm.f32_d96",
            _ => "flash_attn_cm.f32_d128",
        }; // d is 64, 96 or 128 (tensor_core_prefill)
        let p = dev.pipeline(&dev.kernel(name)?, &opts)?;
        let blocks = sh.t_q.div_ceil(64);
        if blocks as u64 > u64::from(lim[1]) {
            return bad("query blocks exceed the device's grid".into());
        }
        s.dispatch(
            &p,
            &[q.into(), k.buffer().into(), v.buffer().into(), out.into(), sinks],
            &pc_words(1),
            [sh.n_heads as u32, blocks as u32, 1],
        )?;
        return Ok(());
    }
    let g = sh.n_heads / k.n_kv_heads;
    let gqa = gqa_kernel(dev.caps(), d, g);
    // (The in-place merge keeps up to MAX_ATTN_SPLITS splits' weights in shared memory.)
    let in_place = splits > 1
        && splits <= tuning::MAX_ATTN_SPLITS
        && merge == SplitMerge::InPlace
        && gqa.is_some()
        && sh.t_q <= IN_PLACE_MERGE_TOKENS;
    let (p, groups) = match gqa {
        // The query heads of one KV head together: x over KV heads.
        Some((wg, npl)) => {
            let name = match (in_place, dt) {
                (false, Dtype::F32) => "flash_attn_gqa.f32",
                (false, _) => "flash_attn_gqa.f16",
                (true, Dtype::F32) => "flash_attn_gqa.combine_f32",
                (true, _) => "flash_attn_gqa.combine_f16",
            };
            let p = pipeline_spec(&dev, name, wg, &[(1, g as u32), (2, npl)])?;
            (p, [k.n_kv_heads as u32, sh.t_q as u32, splits as u32])
        }
        None => (
            pipeline(
                &dev,
                match (dt == Dtype::F16, tuning::subgroup_reduce(dev.caps())) {
                    (false, false) => "flash_attn.f32",
                    (false, true) => "flash_attn.f32_sg",
                    (true, false) => "flash_attn.f16",
                    (true, true) => "flash_attn.f16_sg",
                },
                64,
            )?,
            [sh.n_heads as u32, sh.t_q as u32, splits as u32],
        ),
    };
    if splits == 1 {
        // The partial-output and max/sum bindings are unused: bind `out`.
        s.dispatch(
            &p,
            &[q.into(), k.buffer().into(), v.buffer().into(), out.into(), out.into(), out.into(), sinks],
            &pc_words(1),
            groups,
        )?;
        return Ok(());
    }
    let (po, ml) = split_scratch("flash_attn", &sh, d, scratch)?;
    // The final-output binding is unused: bind `out`.
    let bindings: [BufferArg<'_>; 6] =
        [q.into(), k.buffer().into(), v.buffer().into(), out.into(), po.into(), ml.into()];
    if in_place {
        let mut bindings = bindings.to_vec();
        bindings.extend([(&k.split_counts).into(), sinks]);
        s.dispatch(&p, &bindings, &pc_words(splits), groups)?;
        return Ok(());
    }
    let mut split_bindings = bindings.to_vec();
    split_bindings.push(sinks);
    s.dispatch(&p, &split_bindings, &pc_words(splits), groups)?;
    let combine = if dt == Dtype::F16 { "flash_attn_combine.f16" } else { "flash_attn_combine.f32" };
    let c = pipeline(&dev, combine, 64)?;
    let rows = (sh.t_q * sh.n_heads) as u32;
    if rows > lim[1] {
        return bad("tokens x heads exceed the device's grid".into());
    }
    let pc = push_words(&[sh.t_q as u32, sh.n_heads as u32, d as u32, splits as u32, u32::from(sh.sinks.is_some())]);
    s.dispatch(&c, &[po.into(), ml.into(), out.into(), sinks], &pc, [(d as u32).div_ceil(64), rows, 1])?;
    Ok(())
}

/// The wide decode attention (`flash_attn_gqa.rope_*_wide{256,512}`,
/// [`tuning::DECODE_ATTN_WIDE`]) for `g` query heads per KV head of dim `d`: its group size
/// (query values, 256 or 512) and workgroup (invocations), where the architecture takes it
/// ([`tuning::decode_attn_wide`]), the group fits, and the device has the workgroup and the
/// smallest variant's shared memory; else `None` (the narrow `rope_*` variants).
fn decode_wide_group(caps: &Capabilities, d: usize, g: usize) -> Option<(usize, u32)> {
    let sg = tuning::DECODE_ATTN_WIDE.subgroups;
    let invocations = sg * caps.subgroup.min_size as usize;
    if !tuning::decode_attn_wide(caps) || invocations > caps.limits.max_workgroup_invocations as usize {
        return None;
    }
    [256, 512]
        .into_iter()
        .find(|&gd| g * d <= gd && caps.limits.max_shared_memory as usize >= gqa_shared(gd, sg) + ROPE_IN_SHARED)
        .map(|gd| (gd, invocations as u32))
}

/// The split rule of the wide or the narrow decode attention.
fn decode_config(wide: bool) -> tuning::DecodeAttnConfig {
    if wide {
        tuning::DECODE_ATTN_WIDE
    } else {
        tuning::DECODE_ATTN_NARROW
    }
}

/// The form [`flash_attn_rope_decode`] runs in for `g` query heads per KV head of dim `d`
/// on `caps` ([`tuning::DECODE_ATTN_WIDE`] or [`tuning::DECODE_ATTN_NARROW`]), whose
/// [`tuning::DecodeAttnConfig::splits`] the caller's split count should follow (a replayed
/// step's grid: the splits for the most keys it will see).
pub fn decode_attn_config(caps: &Capabilities, d: usize, g: usize) -> tuning::DecodeAttnConfig {
    decode_config(decode_wide_group(caps, d, g).is_some())
}

/// Whether [`flash_attn_rope_decode`] takes a call of shape `sh` over caches of head
/// dimension `d` and `n_kv_heads` KV heads: one causal query at the last position
/// (`q_pos0 + 1 == kv_len`, a decode step), the grouped-query kernel on the device, and
/// fifteen storage buffers per dispatch.
pub fn decode_fuses_rope(caps: &Capabilities, sh: &AttnShape<'_>, d: usize, n_kv_heads: usize) -> bool {
    n_kv_heads > 0
        && sh.n_heads.is_multiple_of(n_kv_heads)
        && sh.t_q == 1
        && sh.causal
        && sh.q_pos0 + 1 == sh.kv_len
        && caps.limits.max_storage_buffers_per_stage >= 15
        && caps.limits.max_shared_memory as usize >= GQA_SHARED + ROPE_IN_SHARED
        && gqa_kernel(caps, d, sh.n_heads / n_kv_heads).is_some()
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

/// The decode step's attention with its prologue in one dispatch
/// (`flash_attn_gqa.rope_{neox,interleaved}_f32`): for one query token at position
/// `sh.q_pos0` (= `kv_len - 1`), the query heads `q` rotated as they load, the key heads `k`
/// rotated and the value heads `v` (one token's rows of each, f32) written into the caches
/// at that position, then [`flash_attn`] over the caches, its splits merged in place: the
/// bits of [`rope_kv_append`] then [`flash_attn`] (`out`: f32 `[1, n_heads, d]`), one
/// dispatch instead of two. With `sh.n_splits > 1`, `scratch` as for [`flash_attn`].
/// `prologue` adds the QKV bias and normalises the heads first ([`QkvPrologue`]: one
/// dispatch instead of up to five; the norm's sum of squares is reduced over one
/// subgroup, in another order than `nn::rms_norm`'s).
///
/// With `step`, a replayed step: the query's position is word 0 of `step` (u32) when the
/// dispatch runs, written between submissions of a recording; `sh.q_pos0` (with `kv_len =
/// q_pos0 + 1`) is then the largest position it may hold, which the checks take (tables,
/// caches), and `sh.n_splits` the grid, of which the splits [`decode_attn_config`] gives for
/// the keys that position sees run (at most `sh.n_splits`; a grid of its splits for
/// `sh.visible_len()` keys covers every position up to `sh.q_pos0`, with the bits of a
/// dispatch recorded at that position). The workgroup shape and split rule are
/// [`decode_attn_config`]'s; the caller's `sh.n_splits` should follow it. A position past
/// `sh.q_pos0` is the caller's error: the rotation reads past the tables, and a key past the
/// cache's slots overwrites another.
///
/// # Errors
/// [`OpsError::Shape`] where [`decode_fuses_rope`] does not hold, and as
/// [`rope_kv_append`] and [`flash_attn`] for tables, sources, caches and buffers; HAL errors.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_rope_decode(
    s: &mut Stream,
    rope: RopeTables<'_>,
    (q, k, v): (HeadRows<'_>, HeadRows<'_>, HeadRows<'_>),
    (k_cache, v_cache): (&KvCache, &KvCache),
    sh: AttnShape<'_>,
    out: &Buffer,
    scratch: Option<(&Buffer, &Buffer)>,
    prologue: QkvPrologue<'_>,
    step: Option<&Buffer>,
) -> Result<()> {
    let bad = |reason: String| Err(OpsError::Shape { op: "flash_attn_rope_decode", reason });
    let dev = s.device().clone();
    let d = k_cache.d;
    check_cache_pair("flash_attn_rope_decode", k_cache, v_cache)?;
    if !decode_fuses_rope(dev.caps(), &sh, d, k_cache.n_kv_heads) {
        return bad(format!(
            "one causal query at the last position on the grouped-query kernel (t_q {}, q_pos0 {}, kv_len {}, {} heads over {} KV heads, d {d})",
            sh.t_q, sh.q_pos0, sh.kv_len, sh.n_heads, k_cache.n_kv_heads
        ));
    }
    if sh.visible_len() > k_cache.ctx {
        return bad(format!("kv_len {} exceeds the cache's {} positions", sh.kv_len, k_cache.ctx));
    }
    let rsh = crate::nn::RopeShape {
        bh: sh.n_heads,
        t: 1,
        d,
        rot: rope.rot,
        pos_offset: sh.q_pos0,
        positions: rope.positions,
        token_major: true,
    };
    crate::nn::check_rope_tables("flash_attn_rope_decode", rope.cos, rope.sin, rsh)?;
    check_append(Dtype::F32, k.buffer, k.off, k.stride, 1, sh.q_pos0, k_cache)?;
    check_append(Dtype::F32, v.buffer, v.off, v.stride, 1, sh.q_pos0, v_cache)?;
    let q_row = sh.n_heads * d;
    if q.buffer.size() < 4 * (q.off + q_row) as u64 || out.size() < 4 * q_row as u64 {
        return bad(format!("q at {} or out do not hold {q_row} f32", q.off));
    }
    let splits = sh.n_splits.max(1);
    if splits > tuning::MAX_ATTN_SPLITS || splits as u64 > u64::from(dev.caps().limits.max_workgroup_count[2]) {
        return bad(format!("{splits} splits: at most {} (and the device's grid)", tuning::MAX_ATTN_SPLITS));
    }
    // Without splits the split-output bindings are unused: `out` stands in.
    let (po, ml) = if splits == 1 { (out, out) } else { split_scratch("flash_attn_rope_decode", &sh, d, scratch)? };
    prologue.check("flash_attn_rope_decode", sh.n_heads + 2 * k_cache.n_kv_heads, d)?;
    check_sinks("flash_attn_rope_decode", &sh)?;
    let g = sh.n_heads / k_cache.n_kv_heads;
    let (narrow_wg, npl) = gqa_kernel(dev.caps(), d, g).expect("checked by decode_fuses_rope");
    let wide = decode_wide_group(dev.caps(), d, g);
    let cfg = decode_config(wide.is_some());
    let wg = wide.map_or(narrow_wg, |(_, wg)| wg);
    use crate::nn::RopeStyle::{Interleaved, Neox};
    let name = match (rope.style, wide.map(|(gd, _)| gd)) {
        (Neox, None) => "flash_attn_gqa.rope_neox_f32",
        (Interleaved, None) => "flash_attn_gqa.rope_interleaved_f32",
        (Neox, Some(256)) => "flash_attn_gqa.rope_neox_f32_wide256",
        (Interleaved, Some(256)) => "flash_attn_gqa.rope_interleaved_f32_wide256",
        (Neox, Some(_)) => "flash_attn_gqa.rope_neox_f32_wide512",
        (Interleaved, Some(_)) => "flash_attn_gqa.rope_interleaved_f32_wide512",
    };
    let p = pipeline_spec(&dev, name, wg, &[(1, g as u32), (2, npl)])?;
    let split_len = sh.visible_len().div_ceil(splits).max(1);
    let mut words = attn_words(&sh, k_cache, splits, split_len).to_vec();
    words.extend([rope.rot as u32, q.off as u32, k.off as u32, v.off as u32]);
    words.extend(prologue.words());
    words.extend([u32::from(step.is_some()), cfg.split_positions as u32]);
    let pc = push_words(&words);
    // Unused prologue and step bindings: the query source stands in.
    let [bias, q_norm, k_norm] = prologue.bindings(q.buffer);
    let bindings: [BufferArg<'_>; 16] = [
        q.buffer.into(),
        k_cache.buffer().into(),
        v_cache.buffer().into(),
        out.into(),
        po.into(),
        ml.into(),
        (&k_cache.split_counts).into(),
        rope.cos.into(),
        rope.sin.into(),
        k.buffer.into(),
        v.buffer.into(),
        bias,
        q_norm,
        k_norm,
        step.unwrap_or(q.buffer).into(),
        sh.sinks.unwrap_or(q.buffer).into(),
    ];
    s.dispatch(&p, &bindings, &pc, [k_cache.n_kv_heads as u32, 1, splits as u32])?;
    Ok(())
}
