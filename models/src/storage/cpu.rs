//! [`ModelStorage`] for candle's `CpuStorage`: norms, rope, activations and attention as
//! loops with candle-nn's arithmetic (`cpu_loops.rs`). Weight matrices are either
//! dequantized by vkml-quant (the CPU reference of every block format) to f32 — the
//! conformance oracle's side of the front: the same model code, run here, is what the
//! Vulkan run is checked against — or kept in their GGML blocks and multiplied on Q8
//! activations ([`super::cpu_blocks`]), the fast CPU backend.

use candle_core::backend::BackendStorage;
use candle_core::cpu_backend::CpuDevice;
use candle_core::op::BackpropOp;
use candle_core::{CpuStorage, Layout, Storage, Tensor};
use vkml_ops::nn::GluActivation;
use vkml_quant::gguf::TensorInfo;

use vkml_candle::front::scratch_alloc;

use super::cpu_blocks::{keeps_blocks, BlockMatrix};
pub use super::cpu_loops::CpuKvCache;
use super::cpu_loops::{self, f32s};
use super::{AttnParams, AttnRope, DeviceChoice, ModelStorage, QkvPrologue, WeightFormat};
use crate::sampling::TokenChoice;

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
    /// `x Wᵀ` for `x: f32[t, k]` (`l`), as `f32[t, rows]` row-major.
    fn matmul(&self, x: &CpuStorage, l: &Layout) -> CResult<Vec<f32>> {
        match self {
            CpuWeight::Dense(w) => tensor(x, l)?.matmul(&w.t()?)?.flatten_all()?.to_vec1::<f32>(),
            CpuWeight::Blocks(m) => m.matmul(&f32s(x, l)?),
        }
    }
}

impl ModelStorage for CpuStorage {
    type QWeight = CpuWeight;
    type KvCache = CpuKvCache;
    type Replay = ();

    /// candle's CPU `argmax` (greedy) or [`crate::sampling::choose_host`] per row, and candle's `sum`, over the last dim; every
    /// result on the one CPU. A row that is not finite chooses 0. No `into`: nothing is replayed here.
    fn choose_ids(
        &self,
        l: &Layout,
        _to: &CpuDevice,
        choice: &TokenChoice,
        draw: u64,
        into: Option<&Self>,
    ) -> CResult<DeviceChoice<Self>> {
        use candle_core::op::ReduceOp;
        if l.dims().len() != 2 || self.dtype() != candle_core::DType::F32 {
            candle_core::bail!("choose_ids takes [t, n] f32 logits, got {:?} {:?}", self.dtype(), l.dims())
        }
        if into.is_some() {
            candle_core::bail!("choose_ids: the CPU backend runs steps when called, it has no replayed input to write")
        }
        let sums = self.reduce_op(ReduceOp::Sum, l, &[1])?;
        let chosen = match choice {
            TokenChoice::Greedy => self.reduce_op(ReduceOp::ArgMax, l, &[1])?,
            TokenChoice::Sample(_) => {
                let n = l.dims()[1];
                let v = f32s(self, l)?;
                // A row that is not finite chooses 0 (its sum tells the caller); other
                // errors are errors.
                let mut ids = Vec::with_capacity(v.len() / n.max(1));
                for (r, row) in v.chunks(n).enumerate() {
                    let finite = row.iter().all(|x| x.is_finite());
                    let id = if finite { crate::sampling::choose_host(row, choice, draw, r as u32) } else { Ok(0) };
                    ids.push(id.map_err(candle_core::Error::wrap)?);
                }
                CpuStorage::U32(ids)
            }
        };
        Ok(DeviceChoice { ids: chosen.clone(), chosen, sums })
    }

    /// One CPU: a contiguous copy.
    fn to_device(&self, l: &Layout, dev: &CpuDevice) -> CResult<Self> {
        use candle_core::backend::BackendDevice;
        let mut dst = dev.zeros_impl(l.shape(), self.dtype())?;
        self.copy_strided_src(&mut dst, 0, l)?;
        Ok(dst)
    }

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

    fn record_replay<T>(_: &CpuDevice, _: &Self, _: impl FnOnce() -> crate::Result<T>) -> crate::Result<(T, ())> {
        Err(crate::error::model_err("the CPU backend runs steps when called: it records none for replay"))
    }

    fn submit_replay(_: &mut ()) -> CResult<()> {
        Ok(())
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
        Ok(CpuStorage::F32(w.matmul(self, l)?))
    }

    fn qmatmul_add(&self, l: &Layout, w: &CpuWeight, acc: &mut Self, acc_l: &Layout) -> CResult<()> {
        let y = w.matmul(self, l)?;
        match (acc, acc_l.contiguous_offsets()) {
            (CpuStorage::F32(a), Some((0, n))) if n == y.len() => {
                a.iter_mut().zip(&y).for_each(|(a, y)| *a += y);
                Ok(())
            }
            _ => candle_core::bail!("qmatmul_add: the sum is not f32[{}] contiguous from 0", y.len()),
        }
    }

    fn qmatmul_glu(&self, l: &Layout, w: &CpuWeight, act: GluActivation) -> CResult<Self> {
        let t = l.dims().first().copied().unwrap_or(1);
        Ok(CpuStorage::F32(cpu_loops::glu(&w.matmul(self, l)?, t, act)?))
    }

    /// The rows, then candle's `affine(scale, 0)` where a scale is given.
    fn qembedding(w: &CpuWeight, ids: &Self, l: &Layout, scale: Option<f32>) -> CResult<Self> {
        let rows = match w {
            CpuWeight::Dense(t) => t.embedding(&tensor(ids, l)?)?,
            CpuWeight::Blocks(m) => {
                let ids = tensor(ids, l)?.to_vec1::<u32>()?;
                let mut v = Vec::with_capacity(ids.len() * m.dims().1);
                for &i in &ids {
                    v.extend(m.row(i as usize)?);
                }
                Tensor::from_vec(v, (ids.len(), m.dims().1), &candle_core::Device::Cpu)?
            }
        };
        storage(&match scale {
            Some(s) => rows.affine(f64::from(s), 0.0)?,
            None => rows,
        })
    }

    fn rms_norm(&self, l: &Layout, w: &Self, wl: &Layout, eps: f32) -> CResult<Self> {
        Ok(CpuStorage::F32(cpu_loops::rms_norm(&f32s(self, l)?, &f32s(w, wl)?, eps)?))
    }

    fn kv_cache(_: &CpuDevice, n_kv_heads: usize, ctx: usize, d: usize) -> CResult<CpuKvCache> {
        Ok(CpuKvCache::new(n_kv_heads * d, ctx))
    }

    fn attention(
        q: (&Self, &Layout),
        k: (&Self, &Layout),
        v: (&Self, &Layout),
        rope: Option<AttnRope<'_, Self>>,
        k_cache: &mut CpuKvCache,
        v_cache: &mut CpuKvCache,
        pos0: usize,
        p: AttnParams,
        prologue: QkvPrologue<'_, Self>,
    ) -> CResult<Self> {
        if !prologue.is_none() {
            candle_core::bail!("the CPU attention takes no QKV prologue (attention_fuses_prologue is false)")
        }
        let (t, heads, d) = q.1.shape().dims3()?;
        let (mut q, mut k, v) = (f32s(q.0, q.1)?, f32s(k.0, k.1)?, f32s(v.0, v.1)?);
        if let Some(r) = rope {
            let table = Layout::contiguous((r.positions, r.rot / 2));
            let (cos, sin) = (f32s(r.cos, &table)?, f32s(r.sin, &table)?);
            let hk = k.len() / (t * d).max(1);
            q = cpu_loops::rope(&q, (t, heads, d), &cos, &sin, pos0, r.rot, r.style)?.into();
            k = cpu_loops::rope(&k, (t, hk, d), &cos, &sin, pos0, r.rot, r.style)?.into();
        }
        Ok(CpuStorage::F32(cpu_loops::attention(&q, &k, &v, (heads, d), k_cache, v_cache, pos0, p)?))
    }
}
