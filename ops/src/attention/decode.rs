//! The decode step's attention with its rotation, append and prologue in one dispatch
//! ([`flash_attn_rope_decode`], `flash_attn_gqa.comp`'s `rope_*` variants).

use vkml_hal::{Buffer, BufferArg, Capabilities, Stream};

use super::*;
use crate::dtype::Dtype;
use crate::error::{OpsError, Result};
use crate::launch::{pipeline_spec, push_words};
use crate::tuning;

/// The wide decode attention (`flash_attn_gqa.rope_*_wide{256,512,1024}`,
/// [`tuning::DECODE_ATTN_WIDE`]'s split rule) for `g` query heads per KV head of dim `d`:
/// its group size (query values: 256 or 512 with 16 subgroups, 1024 with 8) and workgroup
/// (invocations), where the architecture takes it ([`tuning::decode_attn_wide`]), the
/// group fits, and the device has the workgroup and the variant's shared memory; else
/// `None` (the narrow `rope_*` variants).
pub(super) fn decode_wide_group(caps: &Capabilities, d: usize, g: usize) -> Option<(usize, u32)> {
    if !tuning::decode_attn_wide(caps) {
        return None;
    }
    let wide = tuning::DECODE_ATTN_WIDE.subgroups;
    [(256, wide), (512, wide), (1024, wide / 2)]
        .into_iter()
        .find(|&(gd, sg)| {
            g * d <= gd
                && sg * caps.subgroup.min_size as usize <= caps.limits.max_workgroup_invocations as usize
                && caps.limits.max_shared_memory as usize >= gqa_shared(gd, sg) + ROPE_IN_SHARED
        })
        .map(|(gd, sg)| (gd, (sg * caps.subgroup.min_size as usize) as u32))
}

/// The split rule of the wide or the narrow decode attention (with `VKML_DECODE_ATTN`'s
/// overrides, [`tuning::decode_attn_rule`]).
pub(super) fn decode_config(wide: bool) -> tuning::DecodeAttnConfig {
    tuning::decode_attn_rule(if wide { tuning::DECODE_ATTN_WIDE } else { tuning::DECODE_ATTN_NARROW })
}

/// The form [`flash_attn_rope_decode`] runs in for `g` query heads per KV head of dim `d`
/// on `caps` ([`tuning::DECODE_ATTN_WIDE`] or [`tuning::DECODE_ATTN_NARROW`]), whose
/// [`tuning::DecodeAttnConfig::splits`] the caller's split count should follow (a replayed
/// step's grid: the splits for the most keys it will see).
pub fn decode_attn_config(caps: &Capabilities, d: usize, g: usize) -> tuning::DecodeAttnConfig {
    decode_config(decode_wide_group(caps, d, g).is_some())
}

/// How [`flash_attn_rope_decode`] runs `g` query heads per KV head of dim `d` on `caps`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeAttnForm {
    /// The split rule and group split ([`decode_attn_config`]).
    pub config: tuning::DecodeAttnConfig,
    /// Query heads per workgroup ([`tuning::DecodeAttnConfig::heads_per_workgroup`]): the
    /// grid's x is `n_heads / heads_per_workgroup`.
    pub heads_per_workgroup: usize,
    /// A `*_wide*` variant: a split's keys spread over 16 (8) subgroups, so the online
    /// softmax's order differs from `flash_attn`'s; the narrow `rope_*` variants sum in its
    /// order, bit for bit.
    pub wide: bool,
}

/// The form of [`flash_attn_rope_decode`] for `g` query heads per KV head of dim `d`, with
/// the wide variant's (group values, workgroup) where one runs.
fn decode_form(caps: &Capabilities, d: usize, g: usize) -> (DecodeAttnForm, Option<(usize, u32)>) {
    let config = decode_attn_config(caps, d, g);
    // A divisor of the group: its variant fits where the whole group's does.
    let heads_per_workgroup = config.heads_per_workgroup(g, d);
    let wide = decode_wide_group(caps, d, heads_per_workgroup);
    (DecodeAttnForm { config, heads_per_workgroup, wide: wide.is_some() }, wide)
}

/// The form [`flash_attn_rope_decode`] runs in for `g` query heads per KV head of dim `d` on
/// `caps`.
pub fn decode_attn_form(caps: &Capabilities, d: usize, g: usize) -> DecodeAttnForm {
    decode_form(caps, d, g).0
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
    let (form, wide) = decode_form(dev.caps(), d, g);
    let (cfg, gq) = (form.config, form.heads_per_workgroup);
    // One split count per workgroup x of the one query: within the cache's counts.
    debug_assert!(sh.n_heads / gq <= IN_PLACE_MERGE_TOKENS * k_cache.n_kv_heads);
    let wg = wide.map_or(narrow_wg, |(_, wg)| wg);
    use crate::nn::RopeStyle::{Interleaved, Neox};
    let name = match (rope.style, wide.map(|(gd, _)| gd)) {
        (Neox, None) => "flash_attn_gqa.rope_neox_f32",
        (Interleaved, None) => "flash_attn_gqa.rope_interleaved_f32",
        (Neox, Some(256)) => "flash_attn_gqa.rope_neox_f32_wide256",
        (Interleaved, Some(256)) => "flash_attn_gqa.rope_interleaved_f32_wide256",
        (Neox, Some(512)) => "flash_attn_gqa.rope_neox_f32_wide512",
        (Interleaved, Some(512)) => "flash_attn_gqa.rope_interleaved_f32_wide512",
        (Neox, Some(_)) => "flash_attn_gqa.rope_neox_f32_wide1024",
        (Interleaved, Some(_)) => "flash_attn_gqa.rope_interleaved_f32_wide1024",
    };
    let p = pipeline_spec(&dev, name, wg, &[(1, gq as u32), (2, npl)])?;
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
    s.dispatch(&p, &bindings, &pc, [(sh.n_heads / gq) as u32, 1, splits as u32])?;
    Ok(())
}
