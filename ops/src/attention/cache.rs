//! The f16 KV cache ([`KvCache`]) and its appends (`kv_append.comp`).

use vkml_hal::{Buffer, Device, MemoryKind, Stream};

use super::*;
use crate::dtype::Dtype;
use crate::error::{OpsError, Result};
use crate::launch::{pipeline, push_words};

/// An f16 cache of keys or values, `[n_kv_heads, ctx, d]`: position `p` in slot
/// `p % ctx`. A cache of every position of a context is the plain case (`p < ctx`); a
/// sliding-window layer's cache can be a ring of fewer slots than the context, as long as
/// each call's visible keys and appended positions fit ([`flash_attn`], [`kv_append`]).
#[derive(Debug, Clone)]
pub struct KvCache {
    buffer: Buffer,
    /// Per (query token < [`IN_PLACE_MERGE_TOKENS`], KV head): the count of finished
    /// splits of a split decode attention whose splits merge in place, zero between
    /// dispatches (`flash_attn_gqa.comp`'s `combine_*` variants). The one-query `rope_*`
    /// variants count per head group of a workgroup instead: at most 8 per KV head (the
    /// grouped-query kernel's largest group), within the first 8 queries' words.
    pub(super) split_counts: Buffer,
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

/// kv_append.comp's push constants: t_new, n_kv_heads, d, pos0, ctx, then each side's
/// (offset, stride) of its x rows.
pub(super) fn append_push(t_new: usize, pos0: usize, cache: &KvCache, sides: &[(usize, usize)]) -> Vec<u8> {
    let mut w = vec![t_new as u32, cache.n_kv_heads as u32, cache.d as u32, pos0 as u32, cache.ctx as u32];
    w.extend(sides.iter().flat_map(|&(off, stride)| [off as u32, stride as u32]));
    push_words(&w)
}

/// The grid of an append of `t_new` tokens into `cache`: x over pairs of a head's
/// elements, y over tokens x heads.
pub(super) fn append_grid(dev: &Device, t_new: usize, cache: &KvCache) -> Result<[u32; 3]> {
    let gx = (cache.d / 2).div_ceil(64) as u32;
    let gy = (t_new * cache.n_kv_heads) as u32;
    if gy > dev.caps().limits.max_workgroup_count[1] {
        return Err(OpsError::Shape { op: "kv_append", reason: format!("{gy} rows exceed the device's grid") });
    }
    Ok([gx, gy, 1])
}

/// Checks one side of an append (see [`kv_append_from`]).
pub(super) fn check_append(
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
