//! Candle-style methods for the model ops on the front's tensors: [`ModelTensor`],
//! implemented for every `vkml_candle::front::Tensor<S>` whose storage is a
//! [`ModelStorage`]. Each checks shapes and calls the storage's op.

use candle_core::backend::BackendDevice;
use vkml_candle::front::Tensor;
use vkml_ops::nn::{GluActivation, RopeStyle};

use crate::storage::{AttnExtras, AttnParams, AttnRope, ModelStorage, MoeFfn};

type CResult<T> = candle_core::Result<T>;

/// The model ops ([`ModelStorage`]) as methods of a front tensor: `use
/// vkml_models::tensor::ModelTensor` and call `x.qmatmul(&w)`, `x.rms_norm(&w, eps)`, ...
pub trait ModelTensor<S: ModelStorage>: Sized {
    /// `self Wᵀ` for `self: f32[t, k]`: `f32[t, rows]` ([`ModelStorage::qmatmul`]).
    ///
    /// # Errors
    /// As [`ModelStorage::qmatmul`].
    fn qmatmul(&self, w: &S::QWeight) -> CResult<Self>;

    /// `self += x Wᵀ` in place ([`ModelStorage::qmatmul_add`]) for `self: f32[t, rows]`,
    /// `x: f32[t, k]`. `self`'s storage is copied first when another tensor shares it.
    ///
    /// # Errors
    /// As [`ModelStorage::qmatmul_add`].
    fn qmatmul_add_(&mut self, x: &Self, w: &S::QWeight) -> CResult<()>;

    /// `self += x Wᵀ + b` in place (`b: f32[rows]`, the projection's bias):
    /// [`ModelStorage::qmatmul_add`] with the bias, on Vulkan in the mat-vec's store.
    ///
    /// # Errors
    /// As [`ModelStorage::qmatmul_add`].
    fn qmatmul_bias_add_(&mut self, x: &Self, w: &S::QWeight, b: &Self) -> CResult<()>;

    /// `self += rms_norm(x Wᵀ) · nw` in place for `self: f32[t, rows]`, `x: f32[t, k]`,
    /// `nw: f32[rows]` (Gemma's sandwich norms with their residual adds): one
    /// [`ModelStorage::qmatmul_norm_add`] where [`ModelStorage::fuses_qmatmul_norm_add`]
    /// holds, else `qmatmul`, `rms_norm` and `add`.
    ///
    /// # Errors
    /// Shape mismatches, device errors.
    fn qmatmul_norm_add_(&mut self, x: &Self, w: &S::QWeight, nw: &Self, eps: f32) -> CResult<()>;

    /// `self += down(act(n W_gateᵀ) * (n W_upᵀ))` in place, `n = rms_norm(self) · nw`, for
    /// the residual stream `self: f32[t, k]`, a stacked `[gate; up]` weight and `down` (the
    /// gated feed-forward with its residual: [`ModelStorage::rms_norm_glu_down_add`]).
    /// `self`'s storage is copied first when another tensor shares it.
    ///
    /// # Errors
    /// Shape mismatches; as [`ModelStorage::rms_norm_glu_down_add`].
    fn rms_norm_glu_down_add_(
        &mut self,
        nw: &Self,
        eps: f32,
        gate_up: &S::QWeight,
        act: GluActivation,
        down: &S::QWeight,
    ) -> CResult<()>;

    /// `cap · tanh(self / cap)` ([`ModelStorage::softcap`]; one dispatch on Vulkan).
    ///
    /// # Errors
    /// As [`ModelStorage::softcap`].
    fn softcap(&self, cap: f32) -> CResult<Self>;

    /// The gated product `act(x W_gateᵀ) * (x W_upᵀ)` of a stacked `[gate; up]` weight
    /// ([`ModelStorage::qmatmul_glu`]): `f32[t, rows / 2]`.
    ///
    /// # Errors
    /// As [`ModelStorage::qmatmul_glu`].
    fn qmatmul_glu(&self, w: &S::QWeight, act: GluActivation) -> CResult<Self>;

    /// Embedding rows of `ids: u32[t]` times `scale` where given
    /// ([`ModelStorage::qembedding`]): `f32[t, k]`.
    ///
    /// # Errors
    /// As [`ModelStorage::qembedding`].
    fn qembedding(ids: &Self, w: &S::QWeight, scale: Option<f32>) -> CResult<Self>;

    /// candle-nn's `ops::rms_norm` ([`ModelStorage::rms_norm`]).
    ///
    /// # Errors
    /// As [`ModelStorage::rms_norm`].
    fn rms_norm(&self, w: &Self, eps: f32) -> CResult<Self>;

    /// `rms_norm(self, nw, eps)` then [`ModelTensor::qmatmul`] (`act` `None`) or
    /// [`ModelTensor::qmatmul_glu`] (`act` `Some`) with `w`, in one
    /// [`ModelStorage::rms_norm_linear`] call (fused where the backend can).
    ///
    /// # Errors
    /// As [`ModelTensor::rms_norm`], [`ModelTensor::qmatmul`] and [`ModelTensor::qmatmul_glu`].
    fn rms_norm_linear(&self, nw: &Self, eps: f32, w: &S::QWeight, act: Option<GluActivation>) -> CResult<Self>;

    /// `rms_norm(self, nw, eps)`, [`ModelTensor::qmatmul`] with `w`, then
    /// [`ModelTensor::softcap`] at `cap`: a soft-capped output head (Gemma 2), in one
    /// [`ModelStorage::rms_norm_linear_softcap`] call (the cap in the product's store where
    /// the backend can).
    ///
    /// # Errors
    /// As [`ModelTensor::rms_norm_linear`].
    fn rms_norm_linear_softcap(&self, nw: &Self, eps: f32, w: &S::QWeight, cap: f32) -> CResult<Self>;

    /// This tensor on `dev` ([`ModelStorage::to_device`]): itself where it is already
    /// there, else a contiguous copy.
    ///
    /// # Errors
    /// As [`ModelStorage::to_device`].
    fn to_device(&self, dev: &S::Device) -> CResult<Self>;

    /// Causal GQA attention over a KV cache ([`ModelStorage::attention`]): `q:
    /// f32[t, n_heads, d]`, `k`, `v: f32[t, n_kv_heads, d]`, q and k first rotated by
    /// `rope` = `(cos, sin, style)` where given (tables `f32[positions, rot / 2]`);
    /// returns `f32[t, n_heads · d]`. `prologue` ([`AttnExtras`] of tensors: the stacked
    /// QKV bias `f32[(n_heads + 2 n_kv_heads) d]`, q/k norm weights `f32[d]`) is applied
    /// to the new heads first: by the storage's attention where
    /// [`ModelStorage::attention_fuses_prologue`] holds, else here with
    /// `broadcast_add` and [`ModelTensor::rms_norm`].
    ///
    /// # Errors
    /// As [`ModelStorage::attention`]; prologue tensors of the wrong size.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        q: &Self,
        k: &Self,
        v: &Self,
        rope: Option<(&Self, &Self, RopeStyle)>,
        caches: (&mut S::KvCache, &mut S::KvCache),
        pos0: usize,
        p: AttnParams,
        prologue: AttnExtras<'_, Self>,
    ) -> CResult<Self>;

    /// [`ModelStorage::moe_ffn`] of `self: [t, n_embd]`: `[t, n_embd]`.
    fn moe_ffn(&self, w: &MoeFfn<'_, S>) -> CResult<Self>;

    /// `self += rms_norm(self, nw, eps).moe_ffn(w)` in place
    /// ([`ModelStorage::rms_norm_moe_ffn_add`]), `self: [t, n_embd]`, `nw: [n_embd]`.
    fn rms_norm_moe_ffn_add_(&mut self, nw: &Self, eps: f32, w: &MoeFfn<'_, S>) -> CResult<()>;

    /// [`ModelStorage::rms_norm_qkv_attention`] of `self: [t, k]` with norm weight `nw: [k]`,
    /// `wqkv` of `heads = (n_heads, head_dim)` query heads over the caches' KV heads, and the rotation
    /// `(cos, sin, style)`, the new heads first through `prologue` (as [`ModelTensor::attention`]'s):
    /// `Some([t, n_heads · d])` where the storage folds it, else `None`; f16 where the
    /// output projection `wo` applied next reads f16 x (see the storage's).
    #[allow(clippy::too_many_arguments)]
    fn rms_norm_qkv_attention(
        &self,
        nw: &Self,
        eps: f32,
        wqkv: &S::QWeight,
        rope: (&Self, &Self, RopeStyle),
        caches: (&mut S::KvCache, &mut S::KvCache),
        pos0: usize,
        p: AttnParams,
        heads: (usize, usize),
        wo: Option<&S::QWeight>,
        prologue: AttnExtras<'_, Self>,
    ) -> CResult<Option<Self>>;
}

impl<S: ModelStorage> ModelTensor<S> for Tensor<S>
where
    S::Device: BackendDevice<Storage = S>,
{
    fn qmatmul(&self, w: &S::QWeight) -> CResult<Self> {
        let (rows, k) = S::qweight_dims(w);
        let &[t, kk] = self.dims() else {
            candle_core::bail!("qmatmul takes [t, k] activations, got {:?}", self.dims())
        };
        if kk != k {
            candle_core::bail!("qmatmul: activations have {kk} columns, the weight {k}")
        }
        Ok(Self::from_storage(self.storage().qmatmul(self.layout(), w)?, (t, rows)))
    }

    fn qmatmul_add_(&mut self, x: &Self, w: &S::QWeight) -> CResult<()> {
        let (rows, k) = S::qweight_dims(w);
        if x.dims().len() != 2 || x.dims()[1] != k || self.dims() != [x.dims()[0], rows] {
            candle_core::bail!("qmatmul_add: acc {:?} += x {:?} times a [{rows}, {k}] weight", self.dims(), x.dims())
        }
        let (acc, layout) = self.storage_mut()?;
        let layout = layout.clone();
        x.storage().qmatmul_add(x.layout(), w, None, acc, &layout)
    }

    fn qmatmul_bias_add_(&mut self, x: &Self, w: &S::QWeight, b: &Self) -> CResult<()> {
        let (rows, k) = S::qweight_dims(w);
        if x.dims().len() != 2 || x.dims()[1] != k || self.dims() != [x.dims()[0], rows] || b.dims() != [rows] {
            candle_core::bail!(
                "qmatmul_bias_add: acc {:?} += x {:?} times a [{rows}, {k}] weight plus a bias {:?}",
                self.dims(),
                x.dims(),
                b.dims()
            )
        }
        let b = b.contiguous()?;
        if b.layout().start_offset() != 0 {
            candle_core::bail!("qmatmul_bias_add: the bias at an offset into its storage")
        }
        let (acc, layout) = self.storage_mut()?;
        let layout = layout.clone();
        x.storage().qmatmul_add(x.layout(), w, Some(b.storage()), acc, &layout)
    }

    fn rms_norm_glu_down_add_(
        &mut self,
        nw: &Self,
        eps: f32,
        gate_up: &S::QWeight,
        act: GluActivation,
        down: &S::QWeight,
    ) -> CResult<()> {
        let ((gu_rows, k), (d_rows, d_k)) = (S::qweight_dims(gate_up), S::qweight_dims(down));
        let &[_, kk] = self.dims() else {
            candle_core::bail!("rms_norm_glu_down_add takes [t, k] activations, got {:?}", self.dims())
        };
        if kk != k || nw.dims() != [k] || !gu_rows.is_multiple_of(2) || d_k != gu_rows / 2 || d_rows != k {
            candle_core::bail!(
                "rms_norm_glu_down_add: x {:?}, norm weight {:?}, gate|up [{gu_rows}, {k}], down [{d_rows}, {d_k}] do not chain",
                self.dims(),
                nw.dims()
            )
        }
        let (st, layout) = self.storage_mut()?;
        let layout = layout.clone();
        st.rms_norm_glu_down_add(&layout, nw.storage(), nw.layout(), eps, gate_up, act, down)
    }

    fn qmatmul_norm_add_(&mut self, x: &Self, w: &S::QWeight, nw: &Self, eps: f32) -> CResult<()> {
        let (rows, k) = S::qweight_dims(w);
        if x.dims().len() != 2 || x.dims()[1] != k || self.dims() != [x.dims()[0], rows] || nw.dims() != [rows] {
            candle_core::bail!(
                "qmatmul_norm_add: acc {:?} += norm {:?} of x {:?} times a [{rows}, {k}] weight",
                self.dims(),
                nw.dims(),
                x.dims()
            )
        }
        if !S::fuses_qmatmul_norm_add(x.device(), w, x.dims()[0]) {
            *self = self.add(&x.qmatmul(w)?.rms_norm(nw, eps)?)?;
            return Ok(());
        }
        let nw = nw.contiguous()?;
        if nw.layout().start_offset() != 0 {
            candle_core::bail!("qmatmul_norm_add: the norm weight at an offset into its storage")
        }
        let (acc, layout) = self.storage_mut()?;
        let layout = layout.clone();
        x.storage().qmatmul_norm_add(x.layout(), w, nw.storage(), eps, acc, &layout)
    }

    fn softcap(&self, cap: f32) -> CResult<Self> {
        Ok(Self::from_storage(self.storage().softcap(self.layout(), cap)?, self.dims()))
    }

    fn qmatmul_glu(&self, w: &S::QWeight, act: GluActivation) -> CResult<Self> {
        let (rows, k) = S::qweight_dims(w);
        let &[t, kk] = self.dims() else {
            candle_core::bail!("qmatmul_glu takes [t, k] activations, got {:?}", self.dims())
        };
        if kk != k || !rows.is_multiple_of(2) {
            candle_core::bail!("qmatmul_glu: activations [{t}, {kk}] against a [{rows}, {k}] stacked gate/up weight")
        }
        Ok(Self::from_storage(self.storage().qmatmul_glu(self.layout(), w, act)?, (t, rows / 2)))
    }

    fn to_device(&self, dev: &S::Device) -> CResult<Self> {
        if self.storage().device().same_device(dev) {
            return Ok(self.clone());
        }
        Ok(Self::from_storage(self.storage().to_device(self.layout(), dev)?, self.shape().clone()))
    }

    fn qembedding(ids: &Self, w: &S::QWeight, scale: Option<f32>) -> CResult<Self> {
        let (_, k) = S::qweight_dims(w);
        let &[t] = ids.dims() else { candle_core::bail!("qembedding takes [t] ids, got {:?}", ids.dims()) };
        Ok(Self::from_storage(S::qembedding(w, ids.storage(), ids.layout(), scale)?, (t, k)))
    }

    fn rms_norm(&self, w: &Self, eps: f32) -> CResult<Self> {
        let n = *self.dims().last().unwrap_or(&1);
        if w.dims() != [n] {
            candle_core::bail!("rms_norm: weight {:?} for rows of {n}", w.dims())
        }
        Ok(Self::from_storage(
            self.storage().rms_norm(self.layout(), w.storage(), w.layout(), eps)?,
            self.shape().clone(),
        ))
    }

    fn rms_norm_linear(&self, nw: &Self, eps: f32, w: &S::QWeight, act: Option<GluActivation>) -> CResult<Self> {
        let (t, out) = norm_linear_dims::<S>(self, nw, w, act, "rms_norm_linear")?;
        let st = self.storage().rms_norm_linear(self.layout(), nw.storage(), nw.layout(), eps, w, act)?;
        Ok(Self::from_storage(st, (t, out)))
    }

    fn rms_norm_linear_softcap(&self, nw: &Self, eps: f32, w: &S::QWeight, cap: f32) -> CResult<Self> {
        let (t, out) = norm_linear_dims::<S>(self, nw, w, None, "rms_norm_linear_softcap")?;
        let st = self.storage().rms_norm_linear_softcap(self.layout(), nw.storage(), nw.layout(), eps, w, cap)?;
        Ok(Self::from_storage(st, (t, out)))
    }

    fn attention(
        q: &Self,
        k: &Self,
        v: &Self,
        rope: Option<(&Self, &Self, RopeStyle)>,
        caches: (&mut S::KvCache, &mut S::KvCache),
        pos0: usize,
        p: AttnParams,
        prologue: AttnExtras<'_, Self>,
    ) -> CResult<Self> {
        let &[t, h, d] = q.dims() else { candle_core::bail!("attention takes q [t, heads, d], got {:?}", q.dims()) };
        if k.dims() != v.dims() || k.dims().len() != 3 || k.dims()[0] != t || k.dims()[2] != d {
            candle_core::bail!("attention: q {:?}, k {:?}, v {:?} do not fit", q.dims(), k.dims(), v.dims())
        }
        let hk = k.dims()[1];
        check_prologue(&prologue, h, hk, d)?;
        let fused = !prologue.no_prologue() && rope.is_some() && S::attention_fuses_prologue(q.device(), t, h, hk, d);
        // The prologue by the tensor ops where the storage does not take it.
        let (mut q, mut k, mut v) = (q.clone(), k.clone(), v.clone());
        if !fused {
            if let Some(b) = prologue.bias {
                q = q.broadcast_add(&b.narrow(0, 0, h * d)?.reshape((h, d))?)?;
                k = k.broadcast_add(&b.narrow(0, h * d, hk * d)?.reshape((hk, d))?)?;
                v = v.broadcast_add(&b.narrow(0, (h + hk) * d, hk * d)?.reshape((hk, d))?)?;
            }
            if let Some((w, eps)) = prologue.q_norm {
                q = q.rms_norm(w, eps)?;
            }
            if let Some((w, eps)) = prologue.k_norm {
                k = k.rms_norm(w, eps)?;
            }
        }
        let packed = PackedPrologue::new(if fused {
            prologue
        } else {
            AttnExtras { sinks: prologue.sinks, ..AttnExtras::none() }
        })?;
        let pro = packed.storages();
        let (q, k, v) = (&q, &k, &v);
        let tables = match rope {
            Some((cos, sin, style)) => Some((rope_tables(q.dims(), cos, sin, pos0)?, style)),
            None => None,
        };
        let rope = tables.as_ref().map(|((c, s, positions, rot), style)| AttnRope {
            cos: c.storage(),
            sin: s.storage(),
            positions: *positions,
            rot: *rot,
            style: *style,
        });
        let out = S::attention(
            (q.storage(), q.layout()),
            (k.storage(), k.layout()),
            (v.storage(), v.layout()),
            rope,
            caches.0,
            caches.1,
            pos0,
            p,
            pro,
        )?;
        Ok(Self::from_storage(out, (t, h * d)))
    }

    fn moe_ffn(&self, w: &MoeFfn<'_, S>) -> CResult<Self> {
        let (_, n_embd) = w.router_dims();
        let &[t, k] = self.dims() else {
            candle_core::bail!("moe_ffn takes [t, n_embd] activations, got {:?}", self.dims())
        };
        if k != n_embd {
            candle_core::bail!("moe_ffn: activations have {k} columns, the router {n_embd}")
        }
        Ok(Self::from_storage(self.storage().moe_ffn(self.layout(), w)?, (t, n_embd)))
    }

    fn rms_norm_moe_ffn_add_(&mut self, nw: &Self, eps: f32, w: &MoeFfn<'_, S>) -> CResult<()> {
        let (_, n_embd) = w.router_dims();
        if self.dims().len() != 2 || self.dims()[1] != n_embd || nw.dims() != [n_embd] {
            candle_core::bail!(
                "rms_norm_moe_ffn_add: x {:?}, norm weight {:?}, {n_embd} columns",
                self.dims(),
                nw.dims()
            )
        }
        let nws = nw.storage();
        let nwl = nw.layout().clone();
        let (acc, layout) = self.storage_mut()?;
        let layout = layout.clone();
        acc.rms_norm_moe_ffn_add(&layout, (nws, &nwl), eps, w)
    }

    fn rms_norm_qkv_attention(
        &self,
        nw: &Self,
        eps: f32,
        wqkv: &S::QWeight,
        (cos, sin, style): (&Self, &Self, RopeStyle),
        caches: (&mut S::KvCache, &mut S::KvCache),
        pos0: usize,
        p: AttnParams,
        (n_heads, head_dim): (usize, usize),
        wo: Option<&S::QWeight>,
        prologue: AttnExtras<'_, Self>,
    ) -> CResult<Option<Self>> {
        let (t, _) = norm_linear_dims(self, nw, wqkv, None, "rms_norm_qkv_attention")?;
        let n_kv_heads = (S::qweight_dims(wqkv).0 / head_dim.max(1)).saturating_sub(n_heads) / 2;
        check_prologue(&prologue, n_heads, n_kv_heads, head_dim)?;
        let packed = PackedPrologue::new(prologue)?;
        let (c, s, positions, rot) = rope_tables(&[t, n_heads, head_dim], cos, sin, pos0)?;
        let rope = AttnRope { cos: c.storage(), sin: s.storage(), positions, rot, style };
        let out = self.storage().rms_norm_qkv_attention(
            self.layout(),
            (nw.storage(), nw.layout()),
            eps,
            wqkv,
            rope,
            caches,
            pos0,
            p,
            n_heads,
            wo,
            packed.storages(),
        )?;
        Ok(out.map(|o| Self::from_storage(o, (t, n_heads * head_dim))))
    }
}

/// Checks an attention's extras of tensors for `h` query and `hk` KV heads of `d`: the bias
/// `[(h + 2 hk) d]`, the norm weights `[d]`, the sinks `[h]`.
fn check_prologue<S: ModelStorage>(pro: &AttnExtras<'_, Tensor<S>>, h: usize, hk: usize, d: usize) -> CResult<()>
where
    S::Device: BackendDevice<Storage = S>,
{
    if pro.bias.is_some_and(|b| b.dims() != [(h + 2 * hk) * d])
        || [pro.q_norm, pro.k_norm].iter().flatten().any(|(w, _)| w.dims() != [d])
        || pro.sinks.is_some_and(|s| s.dims() != [h])
    {
        candle_core::bail!(
            "attention: the QKV bias must be [{}], the q/k norm weights [{d}] and the sinks [{h}]",
            (h + 2 * hk) * d
        )
    }
    Ok(())
}

/// An attention's extra tensors contiguous from element 0 of their storages, as the
/// storages read them.
struct PackedPrologue<S: ModelStorage> {
    bias: Option<Tensor<S>>,
    q_norm: Option<(Tensor<S>, f32)>,
    k_norm: Option<(Tensor<S>, f32)>,
    sinks: Option<Tensor<S>>,
}

impl<S: ModelStorage> PackedPrologue<S>
where
    S::Device: BackendDevice<Storage = S>,
{
    fn new(pro: AttnExtras<'_, Tensor<S>>) -> CResult<Self> {
        let packed = |x: &Tensor<S>| -> CResult<Tensor<S>> {
            let c = x.contiguous()?;
            if c.layout().start_offset() != 0 {
                candle_core::bail!("attention: prologue tensors at an offset into their storage")
            }
            Ok(c)
        };
        Ok(Self {
            bias: pro.bias.map(packed).transpose()?,
            q_norm: pro.q_norm.map(|(w, eps)| packed(w).map(|w| (w, eps))).transpose()?,
            k_norm: pro.k_norm.map(|(w, eps)| packed(w).map(|w| (w, eps))).transpose()?,
            sinks: pro.sinks.map(packed).transpose()?,
        })
    }

    fn storages(&self) -> AttnExtras<'_, S> {
        AttnExtras {
            bias: self.bias.as_ref().map(|b| b.storage()),
            q_norm: self.q_norm.as_ref().map(|(w, eps)| (w.storage(), *eps)),
            k_norm: self.k_norm.as_ref().map(|(w, eps)| (w.storage(), *eps)),
            sinks: self.sinks.as_ref().map(|s| s.storage()),
        }
    }
}

/// The rotary tables `cos`, `sin: f32[positions, rot / 2]` for `x: [t, heads, d]` at
/// positions `pos0..pos0 + t`, packed from element 0 (as the backends read them), with
/// `(positions, rot)`.
#[allow(clippy::type_complexity)]
fn rope_tables<S: ModelStorage>(
    x: &[usize],
    cos: &Tensor<S>,
    sin: &Tensor<S>,
    pos0: usize,
) -> CResult<(Tensor<S>, Tensor<S>, usize, usize)>
where
    S::Device: BackendDevice<Storage = S>,
{
    let (&[t, _, d], &[positions, half]) = (x, cos.dims()) else {
        candle_core::bail!("rope takes x [t, heads, d] and tables [positions, rot/2], got {x:?} and {:?}", cos.dims())
    };
    if sin.dims() != cos.dims() || 2 * half > d || pos0 + t > positions {
        candle_core::bail!("rope: tables {:?}/{:?} do not fit x {x:?} at {pos0}", cos.dims(), sin.dims())
    }
    let (c, s) = (cos.contiguous()?, sin.contiguous()?);
    if c.layout().start_offset() != 0 || s.layout().start_offset() != 0 {
        candle_core::bail!("rope tables at an offset into their storage")
    }
    Ok((c, s, positions, 2 * half))
}

/// `[t, out]` of a norm and product of `x: [t, k]` with norm weight `nw: [k]` and `w`
/// (`act`: the stacked gate/up rows, `out` half of them), or an error naming `op`.
fn norm_linear_dims<S: ModelStorage>(
    x: &Tensor<S>,
    nw: &Tensor<S>,
    w: &S::QWeight,
    act: Option<GluActivation>,
    op: &str,
) -> CResult<(usize, usize)>
where
    S::Device: BackendDevice<Storage = S>,
{
    let (rows, k) = S::qweight_dims(w);
    let &[t, kk] = x.dims() else { candle_core::bail!("{op} takes [t, k] activations, got {:?}", x.dims()) };
    if nw.dims() != [k] || kk != k || (act.is_some() && !rows.is_multiple_of(2)) {
        candle_core::bail!(
            "{op}: activations [{t}, {kk}], norm weight {:?}, a [{rows}, {k}] weight{}",
            nw.dims(),
            if act.is_some() { " (stacked gate/up)" } else { "" }
        )
    }
    Ok((t, if act.is_some() { rows / 2 } else { rows }))
}
