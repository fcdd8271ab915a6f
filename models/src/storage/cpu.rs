//! [`ModelStorage`] for candle's `CpuStorage`: the model ops through candle-core and
//! candle-nn on the CPU. Weight matrices are either dequantized by vkml-quant (the CPU
//! reference of every block format) to f32 — the conformance oracle's side of the front:
//! the same model code, run here, is what the Vulkan run is checked against — or kept in
//! their GGML blocks and multiplied on Q8 activations ([`super::cpu_blocks`]), the fast
//! CPU backend.

use candle_core::backend::BackendStorage;
use candle_core::cpu_backend::CpuDevice;
use candle_core::op::BackpropOp;
use candle_core::{CpuStorage, DType, Layout, Storage, Tensor, D};
use vkml_ops::nn::{GluActivation, RopeStyle};
use vkml_quant::gguf::TensorInfo;

use vkml_candle::front::scratch_alloc;

use super::cpu_blocks::{keeps_blocks, BlockMatrix};
use super::{AttnParams, ModelStorage, WeightFormat};

type CResult<T> = candle_core::Result<T>;

/// `(storage, layout)` as a contiguous candle CPU tensor (a copy).
fn tensor(s: &CpuStorage, l: &Layout) -> CResult<Tensor> {
    let mut packed = scratch_alloc(&CpuDevice, l.shape(), s.dtype())?;
    s.copy_strided_src(&mut packed, 0, l)?;
    Ok(Tensor::from_storage(Storage::Cpu(packed), l.shape().clone(), BackpropOp::none(), false))
}

/// The storage of a candle CPU tensor, packed and contiguous from 0.
fn storage(t: &Tensor) -> CResult<CpuStorage> {
    let t = t.contiguous()?;
    let (st, l) = t.storage_and_layout();
    let Storage::Cpu(cpu) = &*st else { candle_core::bail!("expected a CPU tensor") };
    let mut packed = scratch_alloc(&CpuDevice, l.shape(), t.dtype())?;
    cpu.copy_strided_src(&mut packed, 0, l)?;
    Ok(packed)
}

/// Keys or values so far, `[n_kv_heads, len, d]`, f16 (as the Vulkan cache stores them):
/// every position, also where the Vulkan cache is a ring.
#[derive(Debug)]
pub struct CpuKvCache {
    data: Option<Tensor>,
    ctx: usize,
    len: usize,
}

/// A weight matrix on the CPU.
#[derive(Debug)]
pub enum CpuWeight {
    /// Dequantized, `f32[rows, k]` ([`WeightFormat::Dequantized`], and types without a
    /// block dot product).
    Dense(Tensor),
    /// In its GGML blocks ([`WeightFormat::Blocks`]).
    Blocks(BlockMatrix),
}

impl CpuWeight {
    /// `x Wᵀ` for `x: f32[t, k]`.
    fn matmul(&self, x: &Tensor) -> CResult<Tensor> {
        match self {
            CpuWeight::Dense(w) => x.matmul(&w.t()?),
            CpuWeight::Blocks(m) => {
                let t = x.dim(0)?;
                let y = m.matmul(&x.contiguous()?.flatten_all()?.to_vec1::<f32>()?)?;
                Tensor::from_vec(y, (t, m.dims().0), &candle_core::Device::Cpu)
            }
        }
    }
}

impl ModelStorage for CpuStorage {
    type QWeight = CpuWeight;
    type KvCache = CpuKvCache;

    fn qweight(_: &CpuDevice, info: &TensorInfo, bytes: &[u8], format: WeightFormat) -> CResult<CpuWeight> {
        let (rows, k) = (info.n_rows() as usize, info.row_len() as usize);
        if format == WeightFormat::Blocks && keeps_blocks(info.ty) {
            return Ok(CpuWeight::Blocks(BlockMatrix::new(info.ty, rows, k, bytes)?));
        }
        let v = vkml_quant::dequant::dequantize_to_vec(info.ty, bytes).map_err(candle_core::Error::wrap)?;
        if v.len() != rows * k {
            candle_core::bail!("tensor {} holds {} values, not {rows} x {k}", info.name, v.len())
        }
        Ok(CpuWeight::Dense(Tensor::from_vec(v, (rows, k), &candle_core::Device::Cpu)?))
    }

    fn qweight_dims(w: &CpuWeight) -> (usize, usize) {
        match w {
            CpuWeight::Dense(t) => (t.dims()[0], t.dims()[1]),
            CpuWeight::Blocks(m) => m.dims(),
        }
    }

    fn qweight_type(w: &CpuWeight) -> Option<vkml_quant::GgmlType> {
        match w {
            CpuWeight::Dense(_) => None,
            CpuWeight::Blocks(m) => Some(m.ty()),
        }
    }

    fn host_u32(_: &CpuDevice, n: usize) -> CResult<Self> {
        Ok(CpuStorage::U32(vec![0; n]))
    }

    fn qweight_concat(_: &CpuDevice, parts: &[&CpuWeight]) -> CResult<CpuWeight> {
        let dense: Vec<&Tensor> = parts
            .iter()
            .filter_map(|p| match p {
                CpuWeight::Dense(t) => Some(t),
                CpuWeight::Blocks(_) => None,
            })
            .collect();
        let blocks: Vec<&BlockMatrix> = parts
            .iter()
            .filter_map(|p| match p {
                CpuWeight::Blocks(m) => Some(m),
                CpuWeight::Dense(_) => None,
            })
            .collect();
        match (dense.len(), blocks.len()) {
            (0, 0) => candle_core::bail!("qweight_concat: no weights to stack"),
            (_, 0) => Ok(CpuWeight::Dense(Tensor::cat(&dense, 0)?)),
            (0, _) => Ok(CpuWeight::Blocks(BlockMatrix::concat(&blocks)?)),
            _ => candle_core::bail!("qweight_concat: dequantized and block matrices do not stack"),
        }
    }

    fn qmatmul(&self, l: &Layout, w: &CpuWeight) -> CResult<Self> {
        storage(&w.matmul(&tensor(self, l)?)?)
    }

    fn qmatmul_add(&self, l: &Layout, w: &CpuWeight, acc: &mut Self, acc_l: &Layout) -> CResult<()> {
        let sum = (tensor(acc, acc_l)? + w.matmul(&tensor(self, l)?)?)?;
        *acc = storage(&sum)?;
        Ok(())
    }

    fn qmatmul_glu(&self, l: &Layout, w: &CpuWeight, act: GluActivation) -> CResult<Self> {
        let y = w.matmul(&tensor(self, l)?)?;
        let n = y.dim(1)? / 2;
        let (gate, up) = (y.narrow(1, 0, n)?, y.narrow(1, n, n)?);
        let gate = match act {
            GluActivation::Silu => candle_nn::ops::silu(&gate)?,
            GluActivation::Gelu => gate.gelu()?,
            GluActivation::GeluErf => gate.gelu_erf()?,
        };
        storage(&(gate * up)?)
    }

    fn qembedding(w: &CpuWeight, ids: &Self, l: &Layout) -> CResult<Self> {
        match w {
            CpuWeight::Dense(t) => storage(&t.embedding(&tensor(ids, l)?)?),
            CpuWeight::Blocks(m) => {
                let ids = tensor(ids, l)?.to_vec1::<u32>()?;
                let mut v = Vec::with_capacity(ids.len() * m.dims().1);
                for &i in &ids {
                    v.extend(m.row(i as usize)?);
                }
                Ok(CpuStorage::F32(v))
            }
        }
    }

    fn rms_norm(&self, l: &Layout, w: &Self, wl: &Layout, eps: f32) -> CResult<Self> {
        storage(&candle_nn::ops::rms_norm(&tensor(self, l)?, &tensor(w, wl)?, eps)?)
    }

    fn rope(
        &self,
        l: &Layout,
        cos: &Self,
        sin: &Self,
        positions: usize,
        pos0: usize,
        rot: usize,
        style: RopeStyle,
    ) -> CResult<Self> {
        let x = tensor(self, l)?;
        let (t, _, d) = x.dims3()?;
        let table = |s: &CpuStorage| -> CResult<Tensor> {
            tensor(s, &Layout::contiguous((positions, rot / 2)))?.narrow(0, pos0, t)
        };
        let (c, s) = (table(cos)?, table(sin)?);
        // candle-nn's rope takes [batch, heads, t, d].
        let xr = x.narrow(D::Minus1, 0, rot)?.transpose(0, 1)?.unsqueeze(0)?.contiguous()?;
        let yr = match style {
            RopeStyle::Interleaved => candle_nn::rotary_emb::rope_i(&xr, &c, &s)?,
            RopeStyle::Neox => candle_nn::rotary_emb::rope(&xr, &c, &s)?,
        };
        let yr = yr.squeeze(0)?.transpose(0, 1)?;
        let y = if rot < d { Tensor::cat(&[&yr, &x.narrow(D::Minus1, rot, d - rot)?], D::Minus1)? } else { yr };
        storage(&y)
    }

    fn kv_cache(_: &CpuDevice, _: usize, ctx: usize, _: usize) -> CResult<CpuKvCache> {
        Ok(CpuKvCache { data: None, ctx, len: 0 })
    }

    fn attention(
        q: (&Self, &Layout),
        k: (&Self, &Layout),
        v: (&Self, &Layout),
        k_cache: &mut CpuKvCache,
        v_cache: &mut CpuKvCache,
        pos0: usize,
        p: AttnParams,
    ) -> CResult<Self> {
        let q = tensor(q.0, q.1)?; // [t, h, d]
        let (t, h, d) = q.dims3()?;
        // This cache keeps every position, but refuses what a ring of `ctx` slots could not
        // hold (the visible keys of the call), as the Vulkan cache does.
        let first = match p.window {
            Some(w) if pos0 + 1 > w => pos0 + 1 - w,
            _ => 0,
        };
        let append = |c: &mut CpuKvCache, x: Tensor| -> CResult<Tensor> {
            if pos0 + t - first > c.ctx {
                candle_core::bail!("positions {first}..{} run past the cache of {}", pos0 + t, c.ctx)
            }
            // Positions from pos0 on are overwritten (as the GPU cache is).
            let new = x.transpose(0, 1)?.to_dtype(DType::F16)?; // [hk, t, d]
            let kept = match &c.data {
                Some(old) if pos0 > 0 => Some(old.narrow(1, 0, pos0.min(c.len))?),
                _ => None,
            };
            if kept.as_ref().map_or(0, |k| k.dim(1).unwrap_or(0)) != pos0 {
                candle_core::bail!("attention at position {pos0} with {} cached positions", c.len)
            }
            let all = match kept {
                Some(k) => Tensor::cat(&[&k, &new], 1)?,
                None => new,
            };
            c.len = pos0 + t;
            c.data = Some(all.clone());
            all.to_dtype(DType::F32)
        };
        let kk = append(k_cache, tensor(k.0, k.1)?)?; // [hk, L, d]
        let vv = append(v_cache, tensor(v.0, v.1)?)?;
        let (hk, len, _) = kk.dims3()?;
        if h % hk != 0 {
            candle_core::bail!("{h} query heads over {hk} KV heads")
        }
        let g = h / hk;
        let repeat = |x: Tensor| x.unsqueeze(1)?.broadcast_as((hk, g, len, d))?.reshape((h, len, d));
        let (kk, vv) = (repeat(kk)?, repeat(vv)?);
        let qh = q.transpose(0, 1)?.contiguous()?; // [h, t, d]
        let att = (qh.matmul(&kk.t()?)? * f64::from(p.scale))?; // [h, t, L]
        let att = match p.softcap {
            Some(c) => ((att / f64::from(c))?.tanh()? * f64::from(c))?,
            None => att,
        };
        let visible = |i: usize, j: usize| j <= pos0 + i && p.window.is_none_or(|w| pos0 + i - j < w);
        let mask: Vec<f32> =
            (0..t).flat_map(|i| (0..len).map(move |j| if visible(i, j) { 0.0 } else { f32::NEG_INFINITY })).collect();
        let mask = Tensor::from_vec(mask, (t, len), &candle_core::Device::Cpu)?;
        let att = candle_nn::ops::softmax_last_dim(&att.broadcast_add(&mask)?)?;
        let y = att.matmul(&vv)?.transpose(0, 1)?.reshape((t, h * d))?;
        storage(&y)
    }
}
