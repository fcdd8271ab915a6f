//! Flash attention over the caches ([`flash_attn`]): `flash_attn.comp`, `flash_attn_gqa.comp`,
//! `flash_attn_combine.comp`, and for prefill `flash_attn_cm.comp`.

use vkml_hal::{Buffer, BufferArg, Capabilities, Stream};

use super::*;
use crate::dtype::Dtype;
use crate::error::{OpsError, Result};
use crate::launch::{pipeline, pipeline_spec, push_words};
use crate::tuning;

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
pub(super) fn attn_words(sh: &AttnShape<'_>, k: &KvCache, n_splits: usize, split_len: usize) -> [u32; 14] {
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
pub(super) fn check_sinks(op: &'static str, sh: &AttnShape<'_>) -> Result<()> {
    match sh.sinks {
        Some(b) if b.size() < 4 * sh.n_heads as u64 => Err(OpsError::Shape {
            op,
            reason: format!("the sinks hold {} bytes, fewer than {} f32 (one per query head)", b.size(), sh.n_heads),
        }),
        _ => Ok(()),
    }
}

/// The split outputs of a split attention of shape `sh` (`n_splits > 1`) over heads of `d`:
/// `scratch`, checked to hold [`split_scratch_len`] f32 (named `op` in the error).
pub(super) fn split_scratch<'a>(
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

/// `flash_attn_gqa.comp`'s MAX_GD (query values of a group, `g * d`) and MAX_SG
/// (subgroups per workgroup); its shared memory is `4 * (MAX_GD * (1 + MAX_SG) + 16 *
/// MAX_SG)` bytes.
pub(super) const GQA_MAX_GD: usize = 1024;

pub(super) const GQA_MAX_SG: usize = 4;

/// Its shared memory in bytes, and what the `rope_*` variants add (the new key and value
/// rows, 128 words each, and 9 head scales).
pub(super) const GQA_SHARED: usize = gqa_shared(GQA_MAX_GD, GQA_MAX_SG);

/// `flash_attn_gqa.comp`'s shared memory in bytes for MAX_GD `gd` and MAX_SG `sg`.
pub(super) const fn gqa_shared(gd: usize, sg: usize) -> usize {
    4 * (gd * (1 + sg) + 16 * sg)
}

pub(super) const ROPE_IN_SHARED: usize = 4 * (2 * 128 + 9);

/// `flash_attn_gqa.comp`'s (workgroup size, pairs per lane per head) for head dim `d` and
/// `g` query heads per KV head, where it runs: subgroup arithmetic, `g <= 8`,
/// `g * d <= GQA_MAX_GD` and its shared memory (20.3 KiB) on the device, at most
/// `GQA_MAX_SG` subgroups of the smallest size per workgroup, and at most 32 f16 pairs per
/// lane for the `g` heads' outputs (registers; 64 on a CPU implementation, whose registers
/// are memory: Gemma 3's four heads of 256 over lavapipe's subgroups of 8).
/// Elsewhere `flash_attn.comp` runs, one workgroup per query head.
pub(super) fn gqa_kernel(caps: &Capabilities, d: usize, g: usize) -> Option<(u32, u32)> {
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
pub(super) fn flash_attn_impl(
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
