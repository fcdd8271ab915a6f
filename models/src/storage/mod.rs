//! The model ops candle keeps outside `BackendStorage` (candle-nn's `rms_norm` and rope,
//! `candle_core::quantized`'s matmul and embedding, attention over a KV cache), as one
//! trait over a backend's storage: [`ModelStorage`]. The blocks and architectures of this
//! crate are written once against it; [`vulkan`] implements it on vkml-ops' kernels (what
//! `vkml generate` runs), [`cpu`] on candle's `CpuStorage` with candle-nn's arithmetic (the
//! conformance oracle, and the CPU backend). [`crate::tensor::ModelTensor`] gives the ops candle-style
//! methods on the front's tensors.

pub mod cpu;
pub mod cpu_blocks;
mod cpu_loops;
pub mod vulkan;

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::Layout;
use vkml_ops::nn::{GluActivation, RopeStyle};
use vkml_quant::gguf::TensorInfo;

use crate::sampling::TokenChoice;

type CResult<T> = candle_core::Result<T>;

/// How one attention call masks and scales its scores.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnParams {
    /// Multiplies `q · k` before the softmax (usually `1 / sqrt(head dim)`).
    pub scale: f32,
    /// Sliding window: a query at position `i` sees the keys at positions `j` with
    /// `i - window < j <= i` (llama.cpp's `LLAMA_SWA_TYPE_STANDARD`); `None`: every
    /// `j <= i` (causal).
    pub window: Option<usize>,
    /// Attention logit soft-capping: scores `s` (after `scale`) become
    /// `cap · tanh(s / cap)` before the mask and softmax (Gemma 2); `None`: as they are.
    pub softcap: Option<f32>,
}

/// The rotary embedding an attention call applies to its queries and keys before
/// appending the keys ([`ModelStorage::attention`]): the first `rot` dims of each head
/// rotate, paired interleaved (candle-nn's `rotary_emb::rope_i`) or neox-style
/// (`rotary_emb::rope`); the rest pass through.
#[derive(Debug, Clone, Copy)]
pub struct AttnRope<'a, S> {
    /// cos of the angles, `f32[positions, rot / 2]`, contiguous.
    pub cos: &'a S,
    /// sin of the angles, `f32[positions, rot / 2]`, contiguous.
    pub sin: &'a S,
    /// Rows of the tables.
    pub positions: usize,
    /// Rotated dims of each head (even, ≤ the head dim).
    pub rot: usize,
    /// How dims pair up.
    pub style: RopeStyle,
}

/// One mixture-of-experts feed-forward ([`ModelStorage::moe_ffn`]): the router and the
/// experts' projections as the 3-D `ffn_{gate,up,down}_exps` tensors hold them, experts
/// outermost.
#[derive(Debug)]
pub struct MoeFfn<'a, S: ModelStorage> {
    /// `ffn_gate_inp`, `[n_expert, n_embd]`.
    pub router: &'a S::QWeight,
    /// `ffn_gate_exps` and `ffn_up_exps`.
    pub gate_up: ExpertGateUp<'a, S>,
    /// `ffn_down_exps`, `[n_expert · n_embd, n_ff]`.
    pub down: &'a S::QWeight,
    /// Experts, experts per token, gating, normalisation and scale of the weights.
    pub routing: vkml_ops::moe::Routing,
    /// The gate's activation.
    pub act: GluActivation,
    /// The router's and the experts' biases (gpt-oss), if any.
    pub biases: Option<MoeBiases<'a, S>>,
    /// The shared expert (Qwen2-MoE), if any.
    pub shared: Option<MoeShared<'a, S>>,
}

/// A [`MoeFfn`]'s shared expert (Qwen2-MoE, llama.cpp's `qwen2moe.cpp`), which every token
/// takes besides its routed ones: `sigmoid(gate_inp · x) · down(act(gate x) · up x)`
/// added to the block's output, with the block's activation.
#[derive(Debug)]
pub struct MoeShared<'a, S: ModelStorage> {
    /// `ffn_gate_inp_shexp`, `[1, n_embd]`.
    pub gate_inp: &'a S::QWeight,
    /// `ffn_gate_shexp` and `ffn_up_shexp` stacked, `[2 n_ff_shexp, n_embd]`.
    pub gate_up: &'a S::QWeight,
    /// `ffn_down_shexp`, `[n_embd, n_ff_shexp]`.
    pub down: &'a S::QWeight,
}

/// A [`MoeFfn`]'s biases (gpt-oss), f32, contiguous from element 0: the router's added to
/// its logits, each chosen expert's gate and up biases to its products before the
/// activation, its down bias to its output before the weighting (llama.cpp's
/// `build_moe_ffn`).
#[derive(Debug)]
pub struct MoeBiases<'a, S> {
    /// `ffn_gate_inp.bias`, `[n_expert]`.
    pub router: &'a S,
    /// `ffn_gate_exps.bias` and `ffn_up_exps.bias` interleaved by expert, `[n_expert, 2
    /// n_ff]`: each expert's gate bias, then its up bias.
    pub gate_up: &'a S,
    /// `ffn_down_exps.bias`, `[n_expert, n_embd]`.
    pub down: &'a S,
}

// (By hand: the derives would ask `S: Clone`.)
impl<S> Clone for MoeBiases<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<S> Copy for MoeBiases<'_, S> {}

/// A weight and the row an expert's projection starts at ([`ExpertGateUp::rows_of`]).
pub type ExpertRows<'a, S> = (&'a <S as ModelStorage>::QWeight, usize);

/// How a [`MoeFfn`]'s gate and up projections are held.
#[derive(Debug)]
pub enum ExpertGateUp<'a, S: ModelStorage> {
    /// `[n_expert · 2 n_ff, n_embd]`: each expert's gate rows, then its up rows (one
    /// product for both where their types agree).
    Stacked(&'a S::QWeight),
    /// `ffn_gate_exps`, `ffn_up_exps`: `[n_expert · n_ff, n_embd]` each.
    Split(&'a S::QWeight, &'a S::QWeight),
}

impl<S: ModelStorage> Clone for ExpertGateUp<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S: ModelStorage> Copy for ExpertGateUp<'_, S> {}

impl<S: ModelStorage> ExpertGateUp<'_, S> {
    /// Where expert `e`'s gate and up rows start (`n_ff` each): `(weight, row)` of each.
    pub fn rows_of(&self, e: usize, n_ff: usize) -> [ExpertRows<'_, S>; 2] {
        match *self {
            ExpertGateUp::Stacked(w) => [(w, 2 * e * n_ff), (w, (2 * e + 1) * n_ff)],
            ExpertGateUp::Split(g, u) => [(g, e * n_ff), (u, e * n_ff)],
        }
    }

    /// Rows of one projection over all experts (`n_expert · n_ff`) and `n_embd`, or `None`
    /// for split weights of different shapes.
    pub fn dims(&self) -> Option<(usize, usize)> {
        match *self {
            ExpertGateUp::Stacked(w) => {
                let (r, k) = S::qweight_dims(w);
                Some((r / 2, k))
            }
            ExpertGateUp::Split(g, u) => Some(S::qweight_dims(g)).filter(|&d| d == S::qweight_dims(u)),
        }
    }
}

impl<S: ModelStorage> MoeFfn<'_, S> {
    /// The router's `(n_expert, n_embd)`.
    pub fn router_dims(&self) -> (usize, usize) {
        S::qweight_dims(self.router)
    }
}

/// What an attention call adds to the plain attention of its heads: before the rotation, in
/// llama.cpp's order, the QKV bias added (Qwen2), then an RMS norm of each query and key
/// head over the head dim (Qwen3, Gemma 3: `x / sqrt(mean(x²) + eps) * w`) — the prologue,
/// passed to [`ModelStorage::attention`] only where [`ModelStorage::attention_fuses_prologue`]
/// holds (elsewhere the caller applies it with its own ops first,
/// [`crate::tensor::ModelTensor::attention`]); and the sinks (gpt-oss), one logit per query
/// head in each row's softmax denominator, which every storage takes.
#[derive(Debug)]
pub struct AttnExtras<'a, S> {
    /// The stacked Q|K|V bias, f32 `[(n_heads + 2 n_kv_heads) d]`, contiguous from element 0.
    pub bias: Option<&'a S>,
    /// The query heads' norm: weight f32 `[d]` (contiguous from element 0) and eps.
    pub q_norm: Option<(&'a S, f32)>,
    /// The key heads' norm: weight f32 `[d]` (contiguous from element 0) and eps.
    pub k_norm: Option<(&'a S, f32)>,
    /// The attention sinks, f32 `[n_heads]` (contiguous from element 0; llama.cpp's
    /// `blk.N.attn_sinks`).
    pub sinks: Option<&'a S>,
}

// (By hand: the derives would ask `S: Clone`.)
impl<S> Clone for AttnExtras<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<S> Copy for AttnExtras<'_, S> {}

impl<S> AttnExtras<'_, S> {
    /// None of them.
    pub fn none() -> Self {
        AttnExtras { bias: None, q_norm: None, k_norm: None, sinks: None }
    }

    /// Whether the prologue (bias, q/k norms) does nothing.
    pub fn no_prologue(&self) -> bool {
        self.bias.is_none() && self.q_norm.is_none() && self.k_norm.is_none()
    }
}

/// [`ModelStorage::rms_norm_linear`] as its two calls, for backends without a fused form
/// (and for the shapes a backend does not fuse).
///
/// # Errors
/// As [`ModelStorage::rms_norm`], [`ModelStorage::qmatmul`] and
/// [`ModelStorage::qmatmul_glu`].
pub fn rms_norm_linear_composed<S: ModelStorage>(
    x: &S,
    l: &Layout,
    nw: &S,
    nwl: &Layout,
    eps: f32,
    w: &S::QWeight,
    act: Option<GluActivation>,
) -> CResult<S> {
    let xn = x.rms_norm(l, nw, nwl, eps)?;
    let xl = Layout::contiguous(l.shape());
    match act {
        None => xn.qmatmul(&xl, w),
        Some(a) => xn.qmatmul_glu(&xl, w, a),
    }
}

/// [`ModelStorage::rms_norm_glu_down_add`] as [`ModelStorage::rms_norm_linear`] (gated)
/// then [`ModelStorage::qmatmul_add`] into `x` itself, for backends and shapes without a
/// fused form.
///
/// # Errors
/// As the two calls.
#[allow(clippy::too_many_arguments)]
pub fn rms_norm_glu_down_add_composed<S: ModelStorage>(
    x: &mut S,
    l: &Layout,
    nw: &S,
    nwl: &Layout,
    eps: f32,
    gate_up: &S::QWeight,
    act: GluActivation,
    down: &S::QWeight,
) -> CResult<()> {
    let g = x.rms_norm_linear(l, nw, nwl, eps, gate_up, Some(act))?;
    let n = S::qweight_dims(gate_up).0 / 2;
    g.qmatmul_add(&Layout::contiguous((l.dims()[0], n)), down, None, x, l)
}

/// [`ModelStorage::rms_norm_linear_softcap`] as [`ModelStorage::rms_norm_linear`] then
/// [`ModelStorage::softcap`] (the trait's default), for backends and shapes without a fused
/// form.
///
/// # Errors
/// As the calls.
pub fn rms_norm_linear_softcap_composed<S: ModelStorage>(
    x: &S,
    l: &Layout,
    nw: &S,
    nwl: &Layout,
    eps: f32,
    w: &S::QWeight,
    cap: f32,
) -> CResult<S> {
    let y = x.rms_norm_linear(l, nw, nwl, eps, w, None)?;
    y.softcap(&Layout::contiguous((l.dims()[0], S::qweight_dims(w).0)), cap)
}

/// What [`ModelStorage::choose_ids`] gives for `t` rows of logits.
#[derive(Debug)]
pub struct DeviceChoice<S> {
    /// The chosen indices, `u32[t]`, on the device asked for: the next step's input.
    pub ids: S,
    /// The same indices, `u32[t]`, where the host reads them without waiting for later
    /// work.
    pub chosen: S,
    /// Each row's sum, `f32[t]`, beside `chosen`: not finite where a logit is not, so that
    /// a model whose output overflowed is an error, not a token.
    pub sums: S,
}

/// How a backend that can do either keeps weight matrices. Vulkan always keeps them in
/// their GGML blocks; candle's CPU storage does either.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightFormat {
    /// Dequantized to f32 once, at load: the products are exact f32 arithmetic (the
    /// conformance oracle).
    #[default]
    Dequantized,
    /// In their GGML blocks, multiplied with activations quantized to Q8_1 / Q8_K as
    /// llama.cpp's CPU backend does ([`cpu_blocks`]); types without such a dot product
    /// are dequantized.
    Blocks,
}

/// The model ops candle keeps outside `BackendStorage` (in candle-nn and in
/// `candle_core::quantized`), for the model code of this crate. Activations are F32; layouts
/// are candle's (offsets and strides in elements).
pub trait ModelStorage: BackendStorage + 'static {
    /// A GGML-quantized weight matrix `[rows, k]` (GGUF dims `[k, rows]`) on the device.
    type QWeight: std::fmt::Debug + 'static;
    /// One layer's keys or values for every position: `[n_kv_heads, ctx, d]`, stored as
    /// f16 on every backend (the rounding is part of the model).
    type KvCache: std::fmt::Debug + 'static;
    /// Work recorded once and run again by each [`ModelStorage::submit_replay`] (Vulkan:
    /// [`vkml_candle::vulkan::Replay`]; `()` where ops run when called).
    type Replay: 'static;

    /// Uploads a GGUF tensor (`info`, and its data `bytes`) as a weight matrix, kept as
    /// `format` asks where the backend offers a choice.
    ///
    /// # Errors
    /// Types without kernels on this backend, shapes that are not a matrix, device errors.
    fn qweight(dev: &Self::Device, info: &TensorInfo, bytes: &[u8], format: WeightFormat) -> CResult<Self::QWeight>;

    /// `(rows, k)` of a weight matrix.
    fn qweight_dims(w: &Self::QWeight) -> (usize, usize);

    /// The GGML type a weight matrix is kept in; `None` where the backend keeps every
    /// matrix in one form (the CPU's dequantized f32), so that any of them stack.
    fn qweight_type(w: &Self::QWeight) -> Option<vkml_quant::GgmlType>;

    /// The rows of `parts`, in order, as one weight `[Σ rows, k]`: Q, K and V stacked so
    /// that one [`ModelStorage::qmatmul`] computes `[q | k | v]` per token, gate and up
    /// stacked for [`ModelStorage::qmatmul_glu`].
    ///
    /// # Errors
    /// No parts, parts of different types or row lengths; device errors.
    fn qweight_concat(dev: &Self::Device, parts: &[&Self::QWeight]) -> CResult<Self::QWeight>;

    /// `x Wᵀ` for `x: f32[t, k]` (`l`): `f32[t, rows]`, contiguous (candle's
    /// `QMatMul::forward`).
    ///
    /// # Errors
    /// Shape mismatches, device errors.
    fn qmatmul(&self, l: &Layout, w: &Self::QWeight) -> CResult<Self>;

    /// `acc += x Wᵀ` in place for `x = self: f32[t, k]` (`l`) and `acc: f32[t, rows]`
    /// (contiguous from element 0), plus the projection's bias `b: f32[rows]` (contiguous
    /// from element 0) where given: a residual add folded into the projection that
    /// produces it (candle: `acc = (acc + x.apply(&w)).broadcast_add(b)`).
    ///
    /// # Errors
    /// Shape mismatches, a strided `acc` or bias, device errors.
    fn qmatmul_add(
        &self,
        l: &Layout,
        w: &Self::QWeight,
        bias: Option<&Self>,
        acc: &mut Self,
        acc_l: &Layout,
    ) -> CResult<()>;

    /// Whether [`ModelStorage::qmatmul_norm_add`] runs for `t` rows of x against `w` (on
    /// Vulkan always: `vkml_ops::quant::linear`, in one mat-vec dispatch where
    /// `vkml_ops::quant::mat_vec_fuses_norm_add` holds). Default: never; callers then
    /// compose `qmatmul`, `rms_norm` and an add.
    fn fuses_qmatmul_norm_add(_dev: &Self::Device, _w: &Self::QWeight, _t: usize) -> bool {
        false
    }

    /// `acc += rms_norm(x Wᵀ) · nw` in place for `x = self: f32[t, k]` (`l`), `acc:
    /// f32[t, rows]` (contiguous from element 0) and `nw: f32[rows]`: Gemma's post-attention
    /// and post-feed-forward norms with their residual adds (candle: `acc = (acc +
    /// rms_norm(x.apply(&w), nw, eps))`), where [`ModelStorage::fuses_qmatmul_norm_add`]
    /// holds.
    ///
    /// # Errors
    /// Where it does not hold (the default); shape mismatches, device errors.
    #[allow(clippy::too_many_arguments)]
    fn qmatmul_norm_add(
        &self,
        _l: &Layout,
        _w: &Self::QWeight,
        _nw: &Self,
        _eps: f32,
        _acc: &mut Self,
        _acc_l: &Layout,
    ) -> CResult<()> {
        candle_core::bail!("qmatmul_norm_add has no one-pass form on this backend (see fuses_qmatmul_norm_add)")
    }

    /// `cap · tanh(self / cap)` for f32 `self` (`l`), contiguous (Gemma 2's final logit
    /// soft-capping); by default candle's `affine`, `tanh` and `affine`.
    ///
    /// # Errors
    /// Device errors.
    fn softcap(&self, l: &Layout, cap: f32) -> CResult<Self> {
        let c = f64::from(cap);
        let packed = Layout::contiguous(l.shape());
        let scaled = self.affine(l, 1.0 / c, 0.0)?;
        let t = scaled.unary_impl::<candle_core::op::Tanh>(&packed)?;
        t.affine(&packed, c, 0.0)
    }

    /// The gated product of a stacked `[gate; up]` weight (`2n` rows, from
    /// [`ModelStorage::qweight_concat`]): `act(x W_gateᵀ) * (x W_upᵀ)`, `f32[t, n]`,
    /// contiguous (candle-transformers' SwiGLU MLP: `silu(gate) * up`).
    ///
    /// # Errors
    /// An odd row count, shape mismatches, device errors.
    fn qmatmul_glu(&self, l: &Layout, w: &Self::QWeight, act: GluActivation) -> CResult<Self>;

    /// Rows `ids` (`u32[t]`, `l`) of `w` as `f32[t, k]` (candle-nn's `Embedding` on the
    /// dequantized matrix), times `scale` where given (Gemma's `sqrt(n_embd)`; one pass on
    /// Vulkan).
    ///
    /// # Errors
    /// A dtype other than U32, device errors. An id past the rows is an error on the CPU;
    /// on Vulkan the kernel clamps it (the model checks ids first).
    fn qembedding(w: &Self::QWeight, ids: &Self, l: &Layout, scale: Option<f32>) -> CResult<Self>;

    /// candle-nn's `ops::rms_norm` over the last dim: `x / sqrt(mean(x²) + eps) * w`
    /// (`x: f32[.., n]`, `w: f32[n]`); contiguous output.
    ///
    /// # Errors
    /// Shape mismatches, device errors.
    fn rms_norm(&self, l: &Layout, w: &Self, wl: &Layout, eps: f32) -> CResult<Self>;

    /// [`ModelStorage::rms_norm`] of `x = self: f32[t, k]` (`l`) with weight `nw: f32[k]`,
    /// then [`ModelStorage::qmatmul`] (`act` `None`) or [`ModelStorage::qmatmul_glu`]
    /// (`act` `Some`) of the result with `w`: one call, so that a backend can fuse the norm
    /// with preparing x for the product. The result is the two calls' (the default runs
    /// them: [`rms_norm_linear_composed`]).
    ///
    /// # Errors
    /// As the two calls.
    #[allow(clippy::too_many_arguments)]
    fn rms_norm_linear(
        &self,
        l: &Layout,
        nw: &Self,
        nwl: &Layout,
        eps: f32,
        w: &Self::QWeight,
        act: Option<GluActivation>,
    ) -> CResult<Self> {
        rms_norm_linear_composed(self, l, nw, nwl, eps, w, act)
    }

    /// The gated feed-forward with its residual add, in place: `self += down(act(n
    /// W_gateᵀ) * (n W_upᵀ))`, `n = rms_norm(self) · nw`, for the residual stream `self:
    /// f32[t, k]` (`l`, contiguous from element 0), a stacked `[gate; up]` weight
    /// (`[2 n_ff, k]`) and `down: [k, n_ff]`: one call so that a backend can keep the
    /// products between the two projections in its own form (Vulkan: Q8_1 blocks written by
    /// the gate|up mat-vec and read by the down mat-vec). The result is
    /// [`ModelStorage::rms_norm_linear`] then [`ModelStorage::qmatmul_add`] (the default).
    ///
    /// # Errors
    /// As the two calls.
    #[allow(clippy::too_many_arguments)]
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
        rms_norm_glu_down_add_composed(self, l, nw, nwl, eps, gate_up, act, down)
    }

    /// [`ModelStorage::rms_norm_linear`] without activation, then [`ModelStorage::softcap`]
    /// at `cap`: a soft-capped output head (Gemma 2's `final_logit_softcapping`), one call
    /// so that a backend can cap in the product's store. The result is the calls'.
    ///
    /// # Errors
    /// As the calls.
    #[allow(clippy::too_many_arguments)]
    fn rms_norm_linear_softcap(
        &self,
        l: &Layout,
        nw: &Self,
        nwl: &Layout,
        eps: f32,
        w: &Self::QWeight,
        cap: f32,
    ) -> CResult<Self> {
        rms_norm_linear_softcap_composed(self, l, nw, nwl, eps, w, cap)
    }

    /// The mixture-of-experts feed-forward of `self: f32[t, n_embd]` (`l`): for each token,
    /// `Σ_j w_j down_{e_j}(act(gate_{e_j} x) * up_{e_j} x)` over the experts `e_j` and
    /// weights `w_j` that `w.routing` chooses from `router x` (llama.cpp's `build_moe_ffn`
    /// without a shared expert), `f32[t, n_embd]`.
    ///
    /// # Errors
    /// Weights that do not make the routing's experts; device errors.
    fn moe_ffn(&self, l: &Layout, w: &MoeFfn<'_, Self>) -> CResult<Self>;

    /// The mixture-of-experts block with its norm and residual add, in place: `self +=
    /// moe_ffn(rms_norm(self))` for the residual stream `self: f32[t, n_embd]` (`l`: packed
    /// from element 0) and the norm weight `nw: f32[n_embd]` (`nwl`). Default: the norm,
    /// [`ModelStorage::moe_ffn`], then the add; Vulkan adds in the weighted sums' pass and
    /// folds the norm of one token into the router's and the gate|up kernels.
    ///
    /// # Errors
    /// As [`ModelStorage::moe_ffn`].
    fn rms_norm_moe_ffn_add(
        &mut self,
        l: &Layout,
        (nw, nwl): (&Self, &Layout),
        eps: f32,
        w: &MoeFfn<'_, Self>,
    ) -> CResult<()> {
        let xn = self.rms_norm(l, nw, nwl, eps)?;
        let xl = Layout::contiguous(l.shape());
        let y = xn.moe_ffn(&xl, w)?;
        *self = self.binary_impl::<candle_core::op::Add>(&y, l, &xl)?;
        Ok(())
    }

    /// An empty (zeroed) cache of `ctx` slots: position `p` in slot `p % ctx`, so a cache
    /// of a model's whole context, or for a sliding-window layer a ring of fewer slots (at
    /// least the window plus a call's tokens less one; [`ModelStorage::attention`] refuses
    /// a call whose visible keys do not fit).
    ///
    /// # Errors
    /// Device errors, odd or too large `d`.
    fn kv_cache(dev: &Self::Device, n_kv_heads: usize, ctx: usize, d: usize) -> CResult<Self::KvCache>;

    /// Causal grouped-query attention with a KV cache: rotates `q` and `k` by `rope`
    /// where given (at positions `pos0..pos0 + t`, [`AttnRope`]), appends `k`, `v`
    /// (`f32[t, n_kv_heads, d]`) at positions `pos0..pos0 + t` of the caches (rounded to
    /// f16), then returns `softmax(q Kᵀ · p.scale + mask) V` over the first
    /// `pos0 + t` positions (causal, within `p.window`) for `q: f32[t, n_heads, d]`, as `f32[t, n_heads · d]`
    /// (contiguous). Query head `h` reads KV head `h / (n_heads / n_kv_heads)`. Taking the
    /// rotation here lets a backend fuse it with the cache append. `prologue` (the QKV
    /// bias, q/k norms) is applied to the new heads first; callers pass one only where
    /// [`ModelStorage::attention_fuses_prologue`] holds for the shape.
    ///
    /// # Errors
    /// Shapes that do not fit, positions past the cache or the rope tables, device errors;
    /// a prologue the backend does not take.
    #[allow(clippy::too_many_arguments)]
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
    ) -> CResult<Self>;

    /// A prompt's attention from the residual stream in one call where the backend folds
    /// the rotation and the cache append into the QKV product's store: `self: f32[t, k]`
    /// (`l`) normalised by `nw` (`f32[k]`, `eps`) times the stacked Q|K|V weight `wqkv`
    /// (`[(n_heads + 2 n_kv_heads) d, k]`), the heads through `prologue` (QKV bias, q/k
    /// norms; its tensors contiguous from element 0), then [`ModelStorage::attention`] of
    /// those heads with `rope` (`n_kv_heads` and `d` the caches'). `Ok(None)` where the
    /// backend does not take it here (the default; Vulkan:
    /// below its mat-mat's row count, or in a step recorded for replay): the caller
    /// makes the calls. The result is theirs, in f32, or in f16 where `wo`, the output
    /// projection the caller applies next ([`ModelStorage::qmatmul_add`] or
    /// [`ModelStorage::qmatmul_norm_add`], which then take f16 x), reads f16 x anyway.
    ///
    /// # Errors
    /// As the calls; a `wqkv` that is not the heads' Q|K|V.
    #[allow(clippy::too_many_arguments)]
    fn rms_norm_qkv_attention(
        &self,
        _l: &Layout,
        _nw: (&Self, &Layout),
        _eps: f32,
        _wqkv: &Self::QWeight,
        _rope: AttnRope<'_, Self>,
        _caches: (&mut Self::KvCache, &mut Self::KvCache),
        _pos0: usize,
        _p: AttnParams,
        _n_heads: usize,
        _wo: Option<&Self::QWeight>,
        _prologue: AttnExtras<'_, Self>,
    ) -> CResult<Option<Self>> {
        Ok(None)
    }

    /// Whether [`ModelStorage::attention`] of `t` query tokens with `n_heads` query and
    /// `n_kv_heads` KV heads of dimension `d`, with a rotation, takes a [`AttnExtras`]
    /// in the same work (Vulkan: always, in the decode attention's or `rope_kv.comp`'s
    /// prologue). Default: never.
    fn attention_fuses_prologue(
        _dev: &Self::Device,
        _t: usize,
        _n_heads: usize,
        _n_kv_heads: usize,
        _d: usize,
    ) -> bool {
        false
    }

    /// The values of `self` under `l` as a new contiguous storage on `to`: how the hidden
    /// state moves between the devices of a layer split ([`crate::device_map`]). On a
    /// deferred backend the copy is recorded (Vulkan: through host-visible staging,
    /// done before `to`'s next submission); candle's CPU copies.
    ///
    /// # Errors
    /// Allocation and device errors.
    fn to_device(&self, l: &Layout, to: &Self::Device) -> CResult<Self>;

    /// The device's choice of a token per row of `self: f32[t, n]` (`l`), and the row's
    /// sum (not finite where a logit is not): with [`TokenChoice::Greedy`] the index of the
    /// first largest value (candle's `argmax`; NaN values skipped); with
    /// [`TokenChoice::Sample`] a draw from its distribution, row `r` with Philox counter
    /// (`draw`, `r`) (`vkml_ops::sampling::sample_rows`; a row that is not finite chooses
    /// 0). Returns [`DeviceChoice`]: the indices as the next step's input on `to` (the
    /// first device of a split), and indices and sums in memory the host reads
    /// ([`ModelStorage::read_u32`], [`ModelStorage::read_f32`]) without waiting for work
    /// recorded after this call: so a decode step can run on the device's own choice
    /// while the host reads it. With `into` (U32, at least `t` values, on `to`, which must
    /// then be the logits' device; a backend that runs ops when called takes none) the
    /// indices go there and [`DeviceChoice::ids`] is that memory: a replayed step's input, which
    /// its own choice overwrites ([`ModelStorage::record_replay`]). While a replay is
    /// recorded a draw's counter is the step's position, read when it runs.
    ///
    /// # Errors
    /// A dtype other than F32, a shape that is not `[t, n]`, sampling settings out of
    /// range, an `into` that cannot hold the indices, device errors.
    fn choose_ids(
        &self,
        l: &Layout,
        to: &Self::Device,
        choice: &TokenChoice,
        draw: u64,
        into: Option<&Self>,
    ) -> CResult<DeviceChoice<Self>>;

    /// The U32 values of `self` under `l` (contiguous), computed by work already
    /// submitted; work recorded since is not submitted by this read.
    ///
    /// # Errors
    /// A dtype other than U32, a strided layout, device errors.
    fn read_u32(&self, l: &Layout) -> CResult<Vec<u32>> {
        host_values(self, l)
    }

    /// Bytes of memory the device can give a model (its weights, KV caches and tables),
    /// where the backend knows: a load that would need more is refused before anything is
    /// allocated. `None`: no bound beyond the allocator's own errors.
    fn memory_budget(_dev: &Self::Device) -> Option<u64> {
        None
    }

    // Deferred execution. A backend whose ops run when called (candle's CPU) keeps the
    // defaults; one whose ops are recorded and run later (Vulkan: on the device's
    // stream) lets a model record its next decode step while the current one runs and
    // fill in the step's token id just before it is submitted.

    /// Whether ops on `dev` are recorded now and run at the next [`ModelStorage::submit`]
    /// (or read-back) rather than when called.
    fn is_deferred(_dev: &Self::Device) -> bool {
        false
    }

    /// Submissions so far on a deferred device: work recorded ahead has run (with
    /// whatever its inputs held) once this count moves past the value read after
    /// recording it.
    fn submissions(_dev: &Self::Device) -> u64 {
        0
    }

    /// `n` zeroed U32 values the host can overwrite with [`ModelStorage::write_u32`]
    /// after ops that read them were recorded (host-visible memory on Vulkan). Creating
    /// it records no device work.
    ///
    /// # Errors
    /// Device errors.
    fn host_u32(dev: &Self::Device, n: usize) -> CResult<Self>;

    /// Overwrites a storage from [`ModelStorage::host_u32`] with `values`. On a deferred
    /// device, ops recorded but not yet submitted read the new values.
    ///
    /// # Errors
    /// A backend that is not deferred (its ops already ran), a dtype other than U32,
    /// too many values.
    fn write_u32(&self, _values: &[u32]) -> CResult<()> {
        candle_core::bail!("write_u32: the {:?} backend runs ops when called, not deferred", self.device().location())
    }

    /// Whether `dev` records a decode step once and runs it again at every position
    /// ([`ModelStorage::record_replay`]): a deferred backend that can (Vulkan: not while
    /// profiling).
    fn replays(_dev: &Self::Device) -> bool {
        false
    }

    /// Records the ops `f` records on `dev` into a [`ModelStorage::Replay`] instead of
    /// running them, and returns what `f` returns. `step` (from [`ModelStorage::host_u32`],
    /// one value) is the position of the step the replay runs, written with
    /// [`ModelStorage::write_u32`] before each [`ModelStorage::submit_replay`]: the decode
    /// attention (rotation, cache slot, keys seen, splits) and the draw's counter read it
    /// when the replay runs. An attention that cannot read it (a device without
    /// [`ModelStorage::attention_fuses_prologue`] for one token) fails the recording.
    /// Storages made before and used by the recorded ops must outlive the replay.
    ///
    /// # Errors
    /// A backend without replays ([`ModelStorage::replays`]); `f`'s errors; work that
    /// reaches another device; device errors.
    fn record_replay<T>(
        dev: &Self::Device,
        step: &Self,
        f: impl FnOnce() -> crate::Result<T>,
    ) -> crate::Result<(T, Self::Replay)>;

    /// Runs a [`ModelStorage::Replay`] again, after the work recorded on its device so far.
    ///
    /// # Errors
    /// Device errors.
    fn submit_replay(r: &mut Self::Replay) -> CResult<()>;

    /// Starts the work recorded on `dev` (nothing on a backend that is not deferred).
    ///
    /// # Errors
    /// Device errors.
    fn submit(_dev: &Self::Device) -> CResult<()> {
        Ok(())
    }

    /// The F32 values of `self` under `l` (contiguous), computed by work already
    /// submitted; work recorded since is not submitted by this read.
    ///
    /// # Errors
    /// A dtype other than F32, a strided layout, device errors.
    fn read_f32(&self, l: &Layout) -> CResult<Vec<f32>> {
        host_values(self, l)
    }
}

/// The values of `s` under `l` (contiguous) through `to_cpu_storage`: the read-backs of a
/// backend that keeps no host-visible copy of its own.
fn host_values<T: candle_core::WithDType>(s: &impl BackendStorage, l: &Layout) -> CResult<Vec<T>> {
    let all = s.to_cpu_storage()?;
    let v = all.as_slice::<T>()?;
    let Some((a, b)) = l.contiguous_offsets() else { candle_core::bail!("read of a strided layout") };
    Ok(v[a..b].to_vec())
}
