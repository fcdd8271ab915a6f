//! [`ModelStorage`] on Vulkan: the model ops as vkml-ops kernels recorded on the
//! [`VulkanDevice`]'s stream, with the decode step's fusions (mat-vec epilogues, stacked
//! weights, the norm writing the next product's Q8_1 activations) and the
//! deferred-execution hooks that let a model record its next step ahead.

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::{DType, Layout};
use vkml_candle::vulkan::{cerr, VulkanDevice, VulkanStorage};
use vkml_hal::{Buffer, MemoryKind, Stream};
use vkml_ops::nn::GluActivation;
use vkml_ops::quant::{LinearEpilogue, PreNorm};
use vkml_ops::Dtype;

use super::{
    rms_norm_glu_down_add_composed, rms_norm_linear_composed, rms_norm_linear_softcap_composed, AttnExtras, AttnParams,
    AttnRope, DeviceChoice, ExpertGateUp, ModelStorage, MoeFfn,
};
use crate::sampling::TokenChoice;

type CResult<T> = candle_core::Result<T>;

fn f32_only(s: &VulkanStorage, op: &'static str) -> CResult<()> {
    if s.dtype() != DType::F32 {
        return Err(candle_core::Error::UnsupportedDTypeForOp(s.dtype(), op));
    }
    Ok(())
}

/// The 32-bit values of `s` (of `dtype`) under `l` (contiguous), read from its buffer
/// after the submission that last used it.
fn read_words<T: bytemuck::Pod>(s: &VulkanStorage, l: &Layout, dtype: DType, op: &'static str) -> CResult<Vec<T>> {
    if s.dtype() != dtype {
        return Err(candle_core::Error::UnsupportedDTypeForOp(s.dtype(), op));
    }
    let Some((a, b)) = l.contiguous_offsets() else { candle_core::bail!("{op} of a strided layout") };
    let mut v = vec![T::zeroed(); b - a];
    s.buffer().read(4 * a as u64, bytemuck::cast_slice_mut(&mut v)).map_err(cerr)?;
    Ok(v)
}

/// `vkml_ops::quant::linear` for `x: f32[t, k]` (`l`): `y ⊕= ep(norm(x) Wᵀ)`, mat-vecs
/// below [`VulkanDevice::mat_mat_min_tokens`] rows, mat-mats from there, chosen in ops.
/// `linear` of f32 `x: [t, k]` (`l`) with the f32 norm weight `nw` as its [`PreNorm`] and
/// epilogue `ep`, into a new `f32[t, out]`.
#[allow(clippy::too_many_arguments)]
fn norm_linear(
    x: &VulkanStorage,
    l: &Layout,
    nw: &VulkanStorage,
    nwl: &Layout,
    eps: f32,
    w: &vkml_ops::quant::QMatrix,
    ep: LinearEpilogue<'_>,
    out: usize,
) -> CResult<VulkanStorage> {
    let t = l.dims()[0];
    let dev = x.device();
    let nw = nw.packed(nwl)?;
    let y = dev.alloc(t * out, DType::F32)?;
    linear(x, l, w, Some(PreNorm { weight: nw.buffer(), eps }), &y, ep)?;
    Ok(dev.storage(y, DType::F32, t * out))
}

/// `vkml_ops::quant::linear`, or `linear_f16` for f16 `x` without a norm (the f16 attention
/// output `rms_norm_qkv_attention` writes where the projection's mat-mat reads f16 x).
fn linear(
    x: &VulkanStorage,
    l: &Layout,
    w: &vkml_ops::quant::QMatrix,
    norm: Option<PreNorm<'_>>,
    y: &Buffer,
    ep: LinearEpilogue<'_>,
) -> CResult<()> {
    if x.dtype() != DType::F16 || norm.is_some() {
        f32_only(x, "qmatmul")?;
    }
    let x16 = x.dtype() == DType::F16;
    let x = x.packed(l)?;
    let t = l.dims()[0];
    let dev = x.device();
    let opts = linear_options(dev);
    dev.with_stream(|s| {
        if x16 {
            vkml_ops::quant::linear_f16(s, w, x.buffer(), t, y, ep, &opts).map_err(cerr)
        } else {
            vkml_ops::quant::linear(s, w, x.buffer(), t, norm, y, ep, &opts).map_err(cerr)
        }
    })
}

/// `linear`'s options on `dev`.
fn linear_options(dev: &VulkanDevice) -> vkml_ops::quant::LinearOptions {
    vkml_ops::quant::LinearOptions { mat_mat_from: dev.mat_mat_min_tokens() }
}

/// `vkml_ops::moe::ffn_with` of `norm(x)` (`l`; `x` itself without a norm) into `y` (added
/// where `accumulate`; `y` may then be `x`'s buffer).
fn moe_ffn_into(
    x: &VulkanStorage,
    l: &Layout,
    norm: Option<PreNorm<'_>>,
    w: &MoeFfn<'_, VulkanStorage>,
    y: &Buffer,
    accumulate: bool,
) -> CResult<()> {
    f32_only(x, "moe_ffn")?;
    let x = x.packed(l)?;
    let t = l.dims()[0];
    let dev = x.device();
    let gate_up = match w.gate_up {
        ExpertGateUp::Stacked(m) => vkml_ops::moe::ExpertGateUp::Stacked(m),
        ExpertGateUp::Split(g, u) => vkml_ops::moe::ExpertGateUp::Split(g, u),
    };
    let biases = w.biases.map(|b| vkml_ops::moe::ExpertBiases {
        router: b.router.buffer(),
        gate_up: b.gate_up.buffer(),
        down: b.down.buffer(),
    });
    let shared = w.shared.as_ref().map(|sh| vkml_ops::moe::SharedExpert {
        gate_inp: sh.gate_inp,
        gate_up: sh.gate_up,
        down: sh.down,
    });
    let mw = vkml_ops::moe::MoeWeights { router: w.router, gate_up, down: w.down, biases, shared };
    let opts = linear_options(dev);
    let out = (y, accumulate);
    dev.with_stream(|s| {
        vkml_ops::moe::ffn_with(s, mw, w.routing, w.act, (x.buffer(), norm), t, out, &opts).map_err(cerr)
    })
}

/// That an in-place accumulator (`acc_l`) is a packed `[t, rows]` from element 0.
fn check_accumulator(op: &str, acc_l: &Layout, t: usize, rows: usize) -> CResult<()> {
    if !acc_l.is_contiguous() || acc_l.start_offset() != 0 || acc_l.shape().elem_count() != t * rows {
        candle_core::bail!("{op}: the accumulator {acc_l:?} is not a packed [t, {rows}]")
    }
    Ok(())
}

/// `x: f32[t, heads, d]` (`l`) as rows for `kv_append_from`: `(storage, offset,
/// stride)` with token `i`'s heads the packed run at `offset + i * stride`. Straight from
/// `x`'s buffer when its layout already is that (a contiguous tensor, or K and V as views
/// into stacked Q|K|V rows), else a packed copy.
fn kv_rows(x: &VulkanStorage, l: &Layout) -> CResult<(VulkanStorage, usize, usize)> {
    let (dims, st) = (l.dims(), l.stride());
    let &[t, heads, d] = dims else { candle_core::bail!("attention takes k, v as [t, heads, d], got {dims:?}") };
    let row = heads * d;
    let heads_packed = (heads == 1 || st[1] == d) && (d == 1 || st[2] == 1);
    if heads_packed && (t == 1 || st[0] >= row) {
        let stride = if t == 1 { row } else { st[0] };
        return Ok((x.device().shared_storage(x.buffer().clone(), x.dtype(), x.len()), l.start_offset(), stride));
    }
    Ok((x.packed(l)?, 0, row))
}

/// The causal attention shape of `t` queries of `h` heads at positions `pos0..` with `p`
/// (one KV split) and `sinks` (f32 per head): a window that covers every position masks nothing.
fn attn_shape(
    t: usize,
    h: usize,
    pos0: usize,
    p: AttnParams,
    sinks: Option<&Buffer>,
) -> vkml_ops::attention::AttnShape<'_> {
    let kv_len = pos0 + t;
    vkml_ops::attention::AttnShape {
        t_q: t,
        n_heads: h,
        kv_len,
        q_pos0: pos0,
        causal: true,
        window: p.window.filter(|&w| w < kv_len).unwrap_or(0),
        softcap: p.softcap.unwrap_or(0.0),
        scale: p.scale,
        n_splits: 1,
        sinks,
    }
}

/// The split-KV scratch `flash_attn` needs for `sh` (head dim `d`) where it has more than
/// one split.
fn split_scratch(
    dev: &VulkanDevice,
    sh: &vkml_ops::attention::AttnShape<'_>,
    d: usize,
) -> CResult<Option<(Buffer, Buffer)>> {
    if sh.n_splits <= 1 {
        return Ok(None);
    }
    let (a, b) = vkml_ops::attention::split_scratch_len(sh, d);
    Ok(Some((dev.alloc(a, DType::F32)?, dev.alloc(b, DType::F32)?)))
}

/// [`split_scratch`]'s buffers back to the device's pool.
fn recycle_scratch(dev: &VulkanDevice, scratch: Option<(Buffer, Buffer)>) {
    if let Some((a, b)) = scratch {
        dev.recycle(a);
        dev.recycle(b);
    }
}

/// A [`kv_rows`] view as rope_kv_append takes it.
fn head_rows((x, off, stride): &(VulkanStorage, usize, usize)) -> vkml_ops::attention::HeadRows<'_> {
    vkml_ops::attention::HeadRows { buffer: x.buffer(), off: *off, stride: *stride }
}

/// An attention call's prologue as the vkml-ops kernels take it.
fn ops_prologue<'a>(p: &AttnExtras<'a, VulkanStorage>) -> vkml_ops::attention::QkvPrologue<'a> {
    vkml_ops::attention::QkvPrologue {
        bias: p.bias.map(|b| b.buffer()),
        q_norm: p.q_norm.map(|(w, eps)| (w.buffer(), eps)),
        k_norm: p.k_norm.map(|(w, eps)| (w.buffer(), eps)),
    }
}

/// An attention call's rotation as the vkml-ops kernels take it.
fn rope_tables<'a>(r: &AttnRope<'a, VulkanStorage>) -> vkml_ops::attention::RopeTables<'a> {
    vkml_ops::attention::RopeTables {
        cos: r.cos.buffer(),
        sin: r.sin.buffer(),
        positions: r.positions,
        rot: r.rot,
        style: r.style,
    }
}

impl ModelStorage for VulkanStorage {
    type QWeight = vkml_ops::quant::QMatrix;
    type KvCache = vkml_ops::attention::KvCache;
    type Replay = vkml_candle::vulkan::Replay;

    /// Always kept in its GGML blocks (`_format` is for the CPU).
    fn qweight(
        dev: &VulkanDevice,
        info: &vkml_quant::gguf::TensorInfo,
        bytes: &[u8],
        _format: super::WeightFormat,
    ) -> CResult<Self::QWeight> {
        vkml_ops::quant::QMatrix::from_gguf(dev.hal(), info, bytes).map_err(|e| dev.named_error(e))
    }

    fn qweight_dims(w: &Self::QWeight) -> (usize, usize) {
        (w.rows(), w.k())
    }

    fn qweight_type(w: &Self::QWeight) -> Option<vkml_quant::GgmlType> {
        Some(w.ty())
    }

    fn qweight_concat(dev: &VulkanDevice, parts: &[&Self::QWeight]) -> CResult<Self::QWeight> {
        dev.with_stream(|s| vkml_ops::quant::QMatrix::concat_rows(s, parts).map_err(|e| dev.named_error(e)))
    }

    /// `vkml_ops::quant::linear`: mat-vecs below [`VulkanDevice::mat_mat_min_tokens`]
    /// rows of `x`, mat-mats (cooperative-matrix where the device has them) from there.
    fn qmatmul(&self, l: &Layout, w: &Self::QWeight) -> CResult<Self> {
        let t = l.dims()[0];
        let y = self.device().alloc(t * w.rows(), DType::F32)?;
        linear(self, l, w, None, &y, LinearEpilogue::Store)?;
        Ok(self.device().storage(y, DType::F32, t * w.rows()))
    }

    /// `linear` with the `Add` epilogue (the mat-vec's, or the mat-mat's `accumulate`), or
    /// `AddBias` (the bias in the mat-vec's store).
    fn qmatmul_add(
        &self,
        l: &Layout,
        w: &Self::QWeight,
        bias: Option<&Self>,
        acc: &mut Self,
        acc_l: &Layout,
    ) -> CResult<()> {
        f32_only(acc, "qmatmul_add")?;
        check_accumulator("qmatmul_add", acc_l, l.dims()[0], w.rows())?;
        match bias {
            Some(b) => {
                f32_only(b, "qmatmul_add")?;
                linear(self, l, w, None, acc.buffer(), LinearEpilogue::AddBias(b.buffer()))
            }
            None => linear(self, l, w, None, acc.buffer(), LinearEpilogue::Add),
        }
    }

    /// One pass (`vkml_ops::elementwise::softcap`, kernel `unary.f32`'s softcap op).
    fn softcap(&self, l: &Layout, cap: f32) -> CResult<Self> {
        f32_only(self, "softcap")?;
        let n = l.shape().elem_count();
        let dev = self.device();
        let y = dev.alloc(n, DType::F32)?;
        let view = vkml_ops::elementwise::View { buffer: self.buffer(), offset: l.start_offset(), strides: l.stride() };
        dev.with_stream(|s| {
            vkml_ops::elementwise::softcap(s, vkml_ops::Dtype::F32, l.dims(), view, cap, &y).map_err(cerr)
        })?;
        Ok(dev.storage(y, DType::F32, n))
    }

    /// Always: `vkml_ops::quant::linear` folds it into the mat-vec where the kernel has
    /// the post-norm epilogue and composes it otherwise.
    fn fuses_qmatmul_norm_add(_dev: &VulkanDevice, _w: &Self::QWeight, _t: usize) -> bool {
        true
    }

    /// `linear` with the `NormAdd` epilogue: one mat-vec dispatch where
    /// `vkml_ops::quant::mat_vec_fuses_norm_add` holds (the product into a scratch,
    /// normalised and added to `acc` by the dispatch's last workgroup).
    fn qmatmul_norm_add(
        &self,
        l: &Layout,
        w: &Self::QWeight,
        nw: &Self,
        eps: f32,
        acc: &mut Self,
        acc_l: &Layout,
    ) -> CResult<()> {
        f32_only(acc, "qmatmul_norm_add")?;
        f32_only(nw, "qmatmul_norm_add")?;
        check_accumulator("qmatmul_norm_add", acc_l, l.dims()[0], w.rows())?;
        linear(self, l, w, None, acc.buffer(), LinearEpilogue::NormAdd { weight: nw.buffer(), eps })
    }

    /// `linear` with the `Glu` epilogue: one mat-vec pass over the stacked matrix below
    /// [`VulkanDevice::mat_mat_min_tokens`] rows; from there one mat-mat into `[t, 2n]`,
    /// then the activation and the product on the strided halves.
    fn qmatmul_glu(&self, l: &Layout, w: &Self::QWeight, act: GluActivation) -> CResult<Self> {
        let (t, n) = (l.dims()[0], w.rows() / 2);
        let dev = self.device();
        let y = dev.alloc(t * n, DType::F32)?;
        linear(self, l, w, None, &y, LinearEpilogue::Glu(act))?;
        Ok(dev.storage(y, DType::F32, t * n))
    }

    /// `vkml_ops::quant::get_rows_scaled`: the scale in the lookup's pass.
    fn qembedding(w: &Self::QWeight, ids: &Self, l: &Layout, scale: Option<f32>) -> CResult<Self> {
        if ids.dtype() != DType::U32 {
            return Err(candle_core::Error::UnsupportedDTypeForOp(ids.dtype(), "qembedding"));
        }
        let ids_p = ids.packed(l)?;
        let t = l.shape().elem_count();
        let dev = ids.device();
        let y = dev.alloc(t * w.k(), DType::F32)?;
        let scale = scale.unwrap_or(1.0);
        dev.with_stream(|s| vkml_ops::quant::get_rows_scaled(s, w, ids_p.buffer(), t, &y, scale).map_err(cerr))?;
        Ok(dev.storage(y, DType::F32, t * w.k()))
    }

    fn rms_norm(&self, l: &Layout, w: &Self, wl: &Layout, eps: f32) -> CResult<Self> {
        f32_only(self, "rms_norm")?;
        f32_only(w, "rms_norm")?;
        let (x, w) = (self.packed(l)?, w.packed(wl)?);
        let n = *l.dims().last().unwrap_or(&1);
        let total = l.shape().elem_count();
        let rows = total.checked_div(n).unwrap_or(0);
        x.map(&Layout::contiguous(l.shape()), DType::F32, |s, y| {
            vkml_ops::nn::rms_norm(s, Dtype::F32, x.buffer(), Some(w.buffer()), rows, n, eps, y)
        })
    }

    /// `linear` with a [`PreNorm`]: below [`VulkanDevice::mat_mat_min_tokens`] rows one
    /// mat-vec normalising x as it loads it (or quantizing the normalised x itself, on the
    /// integer-dot kernel) where the kernels can, else the norm's kernel first; from there
    /// the norm's kernel and the mat-mat.
    fn rms_norm_linear(
        &self,
        l: &Layout,
        nw: &Self,
        nwl: &Layout,
        eps: f32,
        w: &Self::QWeight,
        act: Option<GluActivation>,
    ) -> CResult<Self> {
        if self.dtype() != DType::F32 || nw.dtype() != DType::F32 {
            return rms_norm_linear_composed(self, l, nw, nwl, eps, w, act);
        }
        let (ep, out) = match act {
            None => (LinearEpilogue::Store, w.rows()),
            Some(a) => (LinearEpilogue::Glu(a), w.rows() / 2),
        };
        norm_linear(self, l, nw, nwl, eps, w, ep, out)
    }

    /// `vkml_ops::quant::glu_down`: in a decode step the gate|up mat-vec writes its products
    /// as Q8_1 blocks that the down mat-vec reads (where the integer-dot kernels run), else
    /// `linear` twice.
    fn rms_norm_glu_down_add(
        &mut self,
        l: &Layout,
        nw: &Self,
        nwl: &Layout,
        eps: f32,
        gate_up: &Self::QWeight,
        act: GluActivation,
        down: &Self::QWeight,
    ) -> CResult<()> {
        if self.dtype() != DType::F32 || nw.dtype() != DType::F32 || !l.is_contiguous() || l.start_offset() != 0 {
            return rms_norm_glu_down_add_composed(self, l, nw, nwl, eps, gate_up, act, down);
        }
        let t = l.dims()[0];
        let dev = self.device().clone();
        let nw = nw.packed(nwl)?;
        let opts = linear_options(&dev);
        let x = self.buffer();
        dev.with_stream(|s| {
            let norm = Some(PreNorm { weight: nw.buffer(), eps });
            vkml_ops::quant::glu_down(s, gate_up, down, act, x, t, norm, x, &opts).map_err(|e| dev.named_error(e))
        })
    }

    /// `linear` with a [`PreNorm`] and the `Softcap` epilogue: the cap in the mat-vec's
    /// store (no dispatch of its own in a decode step), after the mat-mat for prompts.
    fn rms_norm_linear_softcap(
        &self,
        l: &Layout,
        nw: &Self,
        nwl: &Layout,
        eps: f32,
        w: &Self::QWeight,
        cap: f32,
    ) -> CResult<Self> {
        if self.dtype() != DType::F32 || nw.dtype() != DType::F32 {
            return rms_norm_linear_softcap_composed(self, l, nw, nwl, eps, w, cap);
        }
        norm_linear(self, l, nw, nwl, eps, w, LinearEpilogue::Softcap(cap), w.rows())
    }

    /// `vkml_ops::moe::ffn_with`: the router product, the routing on the device, then
    /// below [`VulkanDevice::mat_mat_min_tokens`] tokens one expert-indexed mat-vec per
    /// projection over every token's slots, from there the slots grouped by expert and one
    /// grouped mat-mat per projection.
    fn moe_ffn(&self, l: &Layout, w: &MoeFfn<'_, Self>) -> CResult<Self> {
        let t = l.dims()[0];
        let dev = self.device();
        let y = dev.alloc(t * w.router.k(), DType::F32)?;
        moe_ffn_into(self, l, None, w, &y, false)?;
        Ok(dev.storage(y, DType::F32, t * w.router.k()))
    }

    /// `vkml_ops::moe::ffn_with` of the residual stream with the norm (for one token folded
    /// into the router's and the gate|up kernels) adding in place.
    fn rms_norm_moe_ffn_add(
        &mut self,
        l: &Layout,
        (nw, nwl): (&Self, &Layout),
        eps: f32,
        w: &MoeFfn<'_, Self>,
    ) -> CResult<()> {
        f32_only(self, "rms_norm_moe_ffn_add")?;
        f32_only(nw, "rms_norm_moe_ffn_add")?;
        check_accumulator("rms_norm_moe_ffn_add", l, l.dims()[0], w.router.k())?;
        let nw = nw.packed(nwl)?;
        let y = self.buffer().clone();
        moe_ffn_into(self, l, Some(PreNorm { weight: nw.buffer(), eps }), w, &y, true)
    }

    fn kv_cache(dev: &VulkanDevice, n_kv_heads: usize, ctx: usize, d: usize) -> CResult<Self::KvCache> {
        vkml_ops::attention::KvCache::new(dev.hal(), n_kv_heads, ctx, d).map_err(|e| dev.named_error(e))
    }

    fn attention(
        q: (&Self, &Layout),
        k: (&Self, &Layout),
        v: (&Self, &Layout),
        rope: Option<AttnRope<'_, Self>>,
        k_cache: &mut Self::KvCache,
        v_cache: &mut Self::KvCache,
        pos0: usize,
        p: AttnParams,
        prologue: AttnExtras<'_, Self>,
    ) -> CResult<Self> {
        use vkml_ops::attention;
        for (x, _) in [q, k, v] {
            f32_only(x, "attention")?;
        }
        let &[t, h, d] = q.1.dims() else { candle_core::bail!("attention takes q [t, heads, d]") };
        let (kr, vr) = (kv_rows(k.0, k.1)?, kv_rows(v.0, v.1)?);
        let dev = q.0.device();
        // In a step recorded for replay the kernel reads the position when it runs; the
        // checks and the grid take the last one the tables (and, without a window, the
        // caches) hold.
        let step = dev.step_buffer();
        let pos0 = match (&step, &rope) {
            (None, _) => pos0,
            (Some(_), Some(r)) if t == 1 && r.positions > 0 => {
                if p.window.is_some() { r.positions } else { r.positions.min(k_cache.ctx) }.max(1) - 1
            }
            (Some(_), _) => candle_core::bail!(
                "attention in a step recorded for replay takes one rotated token (its position is read when it runs), got {t}"
            ),
        };
        let mut sh = attn_shape(t, h, pos0, p, prologue.sinks.map(|b| b.buffer()));
        // KV splits over the keys some query sees (a window's, not the whole context's), by
        // the rule of the kernel that runs.
        let caps = dev.hal().caps();
        let fused = rope.is_some() && attention::decode_fuses_rope(caps, &sh, d, k_cache.n_kv_heads);
        sh.n_splits = if fused {
            attention::decode_attn_config(caps, d, h / k_cache.n_kv_heads).splits(sh.visible_len())
        } else {
            vkml_ops::tuning::attn_splits(t, sh.visible_len())
        };
        let scratch = split_scratch(dev, &sh, d)?;
        let y = dev.alloc(t * h * d, DType::F32)?;
        // A decode step with a rotation: the rotation, the cache append and the attention
        // in one dispatch (`flash_attn_rope_decode`).
        if let Some(r) = rope.as_ref().filter(|_| fused) {
            let qr = kv_rows(q.0, q.1)?;
            let tables = rope_tables(r);
            let srcs = (head_rows(&qr), head_rows(&kr), head_rows(&vr));
            let sc = scratch.as_ref().map(|(a, b)| (a, b));
            let pro = ops_prologue(&prologue);
            dev.with_stream(|s| {
                attention::flash_attn_rope_decode(s, tables, srcs, (k_cache, v_cache), sh, &y, sc, pro, step.as_ref())
                    .map_err(cerr)
            })?;
            recycle_scratch(dev, scratch);
            return Ok(dev.storage(y, DType::F32, t * h * d));
        }
        if step.is_some() {
            candle_core::bail!(
                "attention: a step recorded for replay needs the decode attention that reads its position \
                 (vkml_ops::attention::decode_fuses_rope) on {dev:?}"
            )
        }
        if !prologue.no_prologue() && rope.is_none() {
            candle_core::bail!("attention: a QKV prologue without a rotation (see attention_fuses_prologue)")
        }
        // Otherwise with a rotation: the prologue, rope of Q and K, and the cache append, in
        // one dispatch (`rope_kv_append`) into a rotated copy of q; else the append alone.
        let (qr, rotate) = match rope {
            Some(r) => (kv_rows(q.0, q.1)?, Some((r, dev.alloc(t * h * d, DType::F32)?))),
            None => ((q.0.packed(q.1)?, 0, h * d), None),
        };
        let record = |s: &mut Stream| -> vkml_ops::Result<()> {
            let q_in = match &rotate {
                Some((r, q_rot)) => {
                    let tables = rope_tables(r);
                    let srcs = (head_rows(&qr), head_rows(&kr), head_rows(&vr));
                    let pro = ops_prologue(&prologue);
                    attention::rope_kv_append(s, tables, srcs, h, t, pos0, (k_cache, v_cache), q_rot, pro)?;
                    q_rot
                }
                None => {
                    let (kx, vx) = ((kr.0.buffer(), kr.1, kr.2), (vr.0.buffer(), vr.1, vr.2));
                    attention::kv_append_pair_from(s, Dtype::F32, kx, vx, t, pos0, k_cache, v_cache)?;
                    qr.0.buffer()
                }
            };
            let sc = scratch.as_ref().map(|(a, b)| (a, b));
            attention::flash_attn(s, Dtype::F32, q_in, k_cache, v_cache, sh, &y, sc)
        };
        dev.with_stream(|s| record(s).map_err(cerr))?;
        if let Some((_, b)) = rotate {
            dev.recycle(b);
        }
        recycle_scratch(dev, scratch);
        Ok(dev.storage(y, DType::F32, t * h * d))
    }

    /// From the mat-mat's row count on, outside a replayed step: the norm, then the QKV
    /// mat-mat rotating and appending in its store (`quant::linear` with
    /// `LinearEpilogue::RopeKv`), then `flash_attn` over the caches; where `wo`'s mat-mat
    /// reads f16 x (`quant::linear_reads_f16`) and the tensor-core kernel runs the attention,
    /// `flash_attn_f16_out` writes the result as that f16 x (no conversion pass before
    /// the projection).
    fn rms_norm_qkv_attention(
        &self,
        l: &Layout,
        (nw, nwl): (&Self, &Layout),
        eps: f32,
        wqkv: &Self::QWeight,
        rope: AttnRope<'_, Self>,
        (k_cache, v_cache): (&mut Self::KvCache, &mut Self::KvCache),
        pos0: usize,
        p: AttnParams,
        n_heads: usize,
        wo: Option<&Self::QWeight>,
        prologue: AttnExtras<'_, Self>,
    ) -> CResult<Option<Self>> {
        use vkml_ops::attention::{self, RopeKv};
        let dev = self.device();
        let t = l.dims()[0];
        if t < dev.mat_mat_min_tokens()
            || dev.step_buffer().is_some()
            || self.dtype() != DType::F32
            || nw.dtype() != DType::F32
        {
            return Ok(None);
        }
        let d = k_cache.d;
        let pro = ops_prologue(&prologue);
        let r = RopeKv { rope: rope_tables(&rope), n_heads, pos0, caches: (k_cache, v_cache), prologue: pro };
        let q_rot = norm_linear(self, l, nw, nwl, eps, wqkv, LinearEpilogue::RopeKv(r), n_heads * d)?;
        let mut sh = attn_shape(t, n_heads, pos0, p, prologue.sinks.map(|b| b.buffer()));
        sh.n_splits = vkml_ops::tuning::attn_splits(t, sh.visible_len());
        let caps = dev.hal().caps();
        if wo.is_some_and(|wo| vkml_ops::quant::linear_reads_f16(caps, wo, t, &linear_options(dev)))
            && attention::tensor_core_prefill(caps, d, &sh)
        {
            let y = dev.alloc(t * n_heads * d, DType::F16)?;
            dev.with_stream(|s| {
                attention::flash_attn_f16_out(s, q_rot.buffer(), k_cache, v_cache, sh, &y).map_err(cerr)
            })?;
            return Ok(Some(dev.storage(y, DType::F16, t * n_heads * d)));
        }
        let scratch = split_scratch(dev, &sh, d)?;
        let y = dev.alloc(t * n_heads * d, DType::F32)?;
        dev.with_stream(|s| {
            let sc = scratch.as_ref().map(|(a, b)| (a, b));
            attention::flash_attn(s, Dtype::F32, q_rot.buffer(), k_cache, v_cache, sh, &y, sc).map_err(cerr)
        })?;
        recycle_scratch(dev, scratch);
        Ok(Some(dev.storage(y, DType::F32, t * n_heads * d)))
    }

    /// Always: the decode attention (`flash_attn_rope_decode`), `rope_kv_append` and the
    /// Q|K|V mat-mat's store each take it.
    fn attention_fuses_prologue(_: &VulkanDevice, _t: usize, _n_heads: usize, _n_kv_heads: usize, _d: usize) -> bool {
        true
    }

    /// [`VulkanStorage::to_device`]: recorded on both devices, the host copy between
    /// them done at `to`'s next submission.
    fn to_device(&self, l: &Layout, to: &VulkanDevice) -> CResult<Self> {
        VulkanStorage::to_device(self, l, to)
    }

    /// The budget of the largest device-local heap (`VK_EXT_memory_budget`, else its size).
    fn memory_budget(dev: &VulkanDevice) -> Option<u64> {
        let m = &dev.hal().caps().memory;
        Some(if m.device_local_budget > 0 { m.device_local_budget } else { m.device_local_bytes })
    }

    fn is_deferred(_: &VulkanDevice) -> bool {
        true
    }

    fn submissions(dev: &VulkanDevice) -> u64 {
        dev.stream_stats().submissions
    }

    /// Host-visible (upload) memory, written directly by [`ModelStorage::write_u32`].
    fn host_u32(dev: &VulkanDevice, n: usize) -> CResult<Self> {
        let buffer = dev.hal().alloc(4 * n.max(1) as u64, MemoryKind::Upload).map_err(cerr)?;
        buffer.write(0, bytemuck::cast_slice(&vec![0u32; n.max(1)])).map_err(cerr)?;
        Ok(dev.shared_storage(buffer, DType::U32, n))
    }

    fn write_u32(&self, values: &[u32]) -> CResult<()> {
        if self.dtype() != DType::U32 || values.len() > self.len() {
            candle_core::bail!("write_u32: {} values into {:?}[{}]", values.len(), self.dtype(), self.len())
        }
        self.buffer().write(0, bytemuck::cast_slice(values)).map_err(cerr)
    }

    fn submit(dev: &VulkanDevice) -> CResult<()> {
        dev.flush()
    }

    fn replays(dev: &VulkanDevice) -> bool {
        dev.can_replay()
    }

    /// [`VulkanDevice::record_replay`] with `step`'s buffer as the step buffer.
    fn record_replay<T>(
        dev: &VulkanDevice,
        step: &Self,
        f: impl FnOnce() -> crate::Result<T>,
    ) -> crate::Result<(T, Self::Replay)> {
        if step.dtype() != DType::U32 {
            return Err(crate::error::model_err(format!("a replay's step buffer holds U32, not {:?}", step.dtype())));
        }
        dev.record_replay(step.buffer(), f)
    }

    fn submit_replay(r: &mut Self::Replay) -> CResult<()> {
        r.submit()
    }

    /// `vkml_ops::sampling::argmax_rows` (kernel `argmax`) or `sample_rows` (kernel
    /// `sample`) writing the choice and the sum straight into host-visible (readback)
    /// memory, and the choice into device-local memory for the next step (sent through
    /// host staging on a split): the next step never touches the buffers the host reads,
    /// so reading them waits for this step only.
    fn choose_ids(
        &self,
        l: &Layout,
        to: &VulkanDevice,
        choice: &TokenChoice,
        draw: u64,
        into: Option<&Self>,
    ) -> CResult<DeviceChoice<Self>> {
        f32_only(self, "choose_ids")?;
        let (&[t, n], Some((start, _))) = (l.dims(), l.contiguous_offsets()) else {
            candle_core::bail!("choose_ids takes contiguous [t, n] logits, got {:?}", l.dims())
        };
        let dev = self.device();
        let host = |dtype: DType| -> CResult<VulkanStorage> {
            let b = dev.hal().alloc(4 * t.max(1) as u64, MemoryKind::Readback).map_err(|e| dev.named_error(e))?;
            Ok(dev.shared_storage(b, dtype, t))
        };
        let (chosen, sums) = (host(DType::U32)?, host(DType::F32)?);
        let ids = match into {
            Some(i) if i.dtype() == DType::U32 && i.len() >= t && dev.same_device(to) && i.device().same_device(to) => {
                dev.shared_storage(i.buffer().clone(), DType::U32, t)
            }
            Some(i) => candle_core::bail!(
                "choose_ids: {t} ids into {:?}[{}] on {:?} (U32 on the logits' device, holding them)",
                i.dtype(),
                i.len(),
                i.device()
            ),
            None => dev.storage(dev.alloc(t, DType::U32)?, DType::U32, t),
        };
        // A replay being recorded draws with its step's position.
        let step = dev.step_buffer();
        let draw = match &step {
            Some(b) => vkml_ops::sampling::Draw::Step(b),
            None => vkml_ops::sampling::Draw::Counter(draw),
        };
        match choice {
            TokenChoice::Greedy => {
                let words = vkml_ops::sampling::argmax_scratch_words(t, n);
                let scratch = dev.storage(dev.alloc(words, DType::U32)?, DType::U32, words);
                dev.with_stream(|s| {
                    let (x, sc) = (self.buffer(), scratch.buffer());
                    vkml_ops::sampling::argmax_rows(s, x, start, t, n, sc, chosen.buffer(), sums.buffer(), ids.buffer())
                        .map_err(cerr)
                })?;
            }
            TokenChoice::Sample(p) => {
                let words = vkml_ops::sampling::sample_scratch_words(t, n, p);
                let scratch = dev.storage(dev.alloc(words, DType::U32)?, DType::U32, words);
                dev.with_stream(|s| {
                    let (x, sc) = (self.buffer(), scratch.buffer());
                    let (c, sm, i) = (chosen.buffer(), sums.buffer(), ids.buffer());
                    vkml_ops::sampling::sample_rows(s, x, start, t, n, p, draw, sc, c, sm, i).map_err(cerr)
                })?
            }
        }
        let ids = if dev.same_device(to) { ids } else { ids.to_device(&Layout::contiguous(t), to)? };
        Ok(DeviceChoice { ids, chosen, sums })
    }

    /// Waits for the submission that last used the buffer, not for work recorded since.
    fn read_u32(&self, l: &Layout) -> CResult<Vec<u32>> {
        read_words(self, l, DType::U32, "read_u32")
    }

    /// Waits for the submission that last used the buffer, not for work recorded since.
    fn read_f32(&self, l: &Layout) -> CResult<Vec<f32>> {
        read_words(self, l, DType::F32, "read_f32")
    }
}
