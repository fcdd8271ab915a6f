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
use super::{AttnExtras, AttnParams, AttnRope, DeviceChoice, ModelStorage, MoeFfn, WeightFormat};
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

    /// Rows `r0 .. r0 + n` times one `x: f32[k]`, an expert's slice of a 3-D expert tensor:
    /// dequantized, each dot product in f64 (the oracle's exact arithmetic); in blocks, the
    /// block dot products on `x` quantized to Q8 (the CPU backend's, as its other products).
    fn rows_times(&self, r0: usize, n: usize, x: &[f32]) -> CResult<Vec<f32>> {
        let dot = |w: &[f32]| w.iter().zip(x).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum::<f64>() as f32;
        match self {
            CpuWeight::Dense(w) => {
                let rows = w.narrow(0, r0, n)?.to_vec2::<f32>()?;
                Ok(rows.iter().map(|r| dot(r)).collect())
            }
            CpuWeight::Blocks(m) => m.rows_times(r0, n, x),
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

    /// Per token: the router product, the routing in f64 (`cpu_loops::moe_route`), and each chosen expert's
    /// rows (f64 dot products, candle-nn's activations), the weighted sum in f64.
    fn moe_ffn(&self, l: &Layout, w: &MoeFfn<'_, Self>) -> CResult<Self> {
        let (n_expert, n_embd) = w.router_dims();
        let r = w.routing;
        let gu = w.gate_up.dims().unwrap_or((usize::MAX, 0));
        let n_ff = gu.0 / n_expert.max(1);
        let n_sh = w.shared.as_ref().map_or(0, |sh| Self::qweight_dims(sh.down).1);
        let shared_fits = w.shared.as_ref().is_none_or(|sh| {
            Self::qweight_dims(sh.gate_inp) == (1, n_embd)
                && Self::qweight_dims(sh.gate_up) == (2 * n_sh, n_embd)
                && Self::qweight_dims(sh.down) == (n_embd, n_sh)
        });
        let fits = n_expert == r.n_expert
            && gu == (n_expert * n_ff, n_embd)
            && Self::qweight_dims(w.down) == (n_expert * n_embd, n_ff)
            && shared_fits;
        if !fits || l.dims().len() != 2 || l.dims()[1] != n_embd {
            candle_core::bail!(
                "moe_ffn: x {:?} and the router, gate, up and down weights do not make {} experts",
                l.dims(),
                r.n_expert
            )
        }
        let t = l.dims()[0];
        let x = f32s(self, l)?;
        let mut logits = w.router.matmul(self, l)?;
        let act = cpu_loops::gated(w.act);
        // gpt-oss's biases: the router's on the logits, the experts' below.
        let vals = |b: &CpuStorage, n: usize| f32s(b, &Layout::contiguous(n)).map(|v| v.into_owned());
        let biases = match w.biases {
            Some(b) => Some((vals(b.gate_up, n_expert * 2 * n_ff)?, vals(b.down, n_expert * n_embd)?)),
            None => None,
        };
        if let Some(b) = w.biases {
            let rb = vals(b.router, n_expert)?;
            logits.chunks_mut(n_expert).for_each(|row| row.iter_mut().zip(&rb).for_each(|(l, b)| *l += b));
        }
        let mut y = vec![0f32; t * n_embd];
        for n in 0..t {
            let xr = &x[n * n_embd..(n + 1) * n_embd];
            let (ids, weights) = cpu_loops::moe_route(&logits[n * n_expert..(n + 1) * n_expert], r);
            let mut acc = vec![0f64; n_embd];
            for (&e, &we) in ids.iter().zip(&weights) {
                let [(gw, g0), (uw, u0)] = w.gate_up.rows_of(e, n_ff);
                let (mut g, mut u) = (gw.rows_times(g0, n_ff, xr)?, uw.rows_times(u0, n_ff, xr)?);
                if let Some((gub, _)) = &biases {
                    let eb = &gub[e * 2 * n_ff..(e + 1) * 2 * n_ff];
                    g.iter_mut().zip(&eb[..n_ff]).for_each(|(g, b)| *g += b);
                    u.iter_mut().zip(&eb[n_ff..]).for_each(|(u, b)| *u += b);
                }
                let h: Vec<f32> = g.iter().zip(&u).map(|(&g, &u)| act(g, u)).collect();
                let mut d = w.down.rows_times(e * n_embd, n_embd, &h)?;
                if let Some((_, db)) = &biases {
                    d.iter_mut().zip(&db[e * n_embd..(e + 1) * n_embd]).for_each(|(d, b)| *d += b);
                }
                acc.iter_mut().zip(&d).for_each(|(a, &d)| *a += we * f64::from(d));
            }
            // The shared expert: its output weighted by the sigmoid of its gate's logit.
            if let Some(sh) = &w.shared {
                let logit = f64::from(sh.gate_inp.rows_times(0, 1, xr)?[0]);
                let gu = sh.gate_up.rows_times(0, 2 * n_sh, xr)?;
                let h: Vec<f32> = gu[..n_sh].iter().zip(&gu[n_sh..]).map(|(&g, &u)| act(g, u)).collect();
                let d = sh.down.rows_times(0, n_embd, &h)?;
                let ws = 1.0 / (1.0 + (-logit).exp());
                acc.iter_mut().zip(&d).for_each(|(a, &d)| *a += ws * f64::from(d));
            }
            y[n * n_embd..(n + 1) * n_embd].iter_mut().zip(&acc).for_each(|(y, &a)| *y = a as f32);
        }
        Ok(CpuStorage::F32(y))
    }

    fn qmatmul(&self, l: &Layout, w: &CpuWeight) -> CResult<Self> {
        Ok(CpuStorage::F32(w.matmul(self, l)?))
    }

    fn qmatmul_add(
        &self,
        l: &Layout,
        w: &CpuWeight,
        bias: Option<&Self>,
        acc: &mut Self,
        acc_l: &Layout,
    ) -> CResult<()> {
        let y = w.matmul(self, l)?;
        let b = match bias {
            Some(CpuStorage::F32(b)) => Some(b),
            Some(_) => candle_core::bail!("qmatmul_add: the bias is not f32"),
            None => None,
        };
        match (acc, acc_l.contiguous_offsets()) {
            (CpuStorage::F32(a), Some((0, n))) if n == y.len() => {
                a.iter_mut().zip(&y).for_each(|(a, y)| *a += y);
                if let Some(b) = b.filter(|b| !b.is_empty()) {
                    if y.len() % b.len() != 0 {
                        candle_core::bail!("qmatmul_add: a bias of {} over rows of {}", b.len(), y.len());
                    }
                    a.chunks_mut(b.len()).for_each(|r| r.iter_mut().zip(b).for_each(|(a, b)| *a += b));
                }
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
        prologue: AttnExtras<'_, Self>,
    ) -> CResult<Self> {
        if !prologue.no_prologue() {
            candle_core::bail!("the CPU attention takes no QKV prologue (attention_fuses_prologue is false)")
        }
        let sinks = match prologue.sinks {
            Some(s) => Some(f32s(s, &Layout::contiguous(q.1.dims()[1]))?),
            None => None,
        };
        let (t, heads, d) = q.1.shape().dims3()?;
        let (mut q, mut k, v) = (f32s(q.0, q.1)?, f32s(k.0, k.1)?, f32s(v.0, v.1)?);
        if let Some(r) = rope {
            let table = Layout::contiguous((r.positions, r.rot / 2));
            let (cos, sin) = (f32s(r.cos, &table)?, f32s(r.sin, &table)?);
            let hk = k.len() / (t * d).max(1);
            q = cpu_loops::rope(&q, (t, heads, d), &cos, &sin, pos0, r.rot, r.style)?.into();
            k = cpu_loops::rope(&k, (t, hk, d), &cos, &sin, pos0, r.rot, r.style)?.into();
        }
        let y = cpu_loops::attention(&q, &k, &v, (heads, d), k_cache, v_cache, pos0, p, sinks.as_deref())?;
        Ok(CpuStorage::F32(y))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vkml_ops::moe::{ExpertGating, Routing};

    /// Uniform values in `[-scale, scale)` from a xorshift of `seed`.
    fn uniform(seed: &mut u64, n: usize, scale: f32) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *seed ^= *seed << 13;
                *seed ^= *seed >> 7;
                *seed ^= *seed << 17;
                scale * ((*seed >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) as f32
            })
            .collect()
    }

    fn dense(v: Vec<f32>, rows: usize, cols: usize) -> CpuWeight {
        CpuWeight::Dense(Tensor::from_vec(v, (rows, cols), &candle_core::Device::Cpu).unwrap())
    }

    fn dot(w: &[f32], x: &[f64]) -> f64 {
        w.iter().zip(x).map(|(&a, b)| f64::from(a) * b).sum()
    }

    /// llama.cpp's `build_moe_ffn` for one token restated in f64 past the router: the `k`
    /// experts of largest `select` (in order), each weighted by `weight(e, chosen)`, output
    /// `o` the weighted sum of `down(e, o, h_e)` with `h_e[i] = hidden(e, i)`.
    fn mix(
        select: &[f64],
        k: usize,
        weight: impl Fn(usize, &[usize]) -> f64,
        hidden: impl Fn(usize, usize) -> f64,
        down: impl Fn(usize, usize, &[f64]) -> f64,
        (n_ff, n_embd): (usize, usize),
    ) -> (Vec<usize>, Vec<f64>) {
        let mut ids: Vec<usize> = (0..select.len()).collect();
        ids.sort_by(|&a, &b| select[b].total_cmp(&select[a]));
        ids.truncate(k);
        let mut out = vec![0f64; n_embd];
        for &e in &ids {
            let h: Vec<f64> = (0..n_ff).map(|i| hidden(e, i)).collect();
            let we = weight(e, &ids);
            out.iter_mut().enumerate().for_each(|(o, y)| *y += we * down(e, o, &h));
        }
        (ids, out)
    }

    /// Qwen2-MoE's shared expert in the CPU's MoE block (the conformance oracle's) against
    /// llama.cpp's `qwen2moe.cpp` restated in f64: the block with it minus the block without
    /// it is `sigmoid(gate_inp · x) · down(silu(gate x) · up x)` for each of three tokens.
    #[test]
    fn moe_shared_expert_matches_qwen2moe() {
        let (n_expert, k, n_embd, n_ff, n_sh, t) = (4usize, 2usize, 16usize, 8usize, 24usize, 3usize);
        let seed = &mut 11u64;
        let mut m = |rows: usize, cols: usize| {
            let v = uniform(seed, rows * cols, 1.0);
            (dense(v.clone(), rows, cols), v)
        };
        let ((router, _), (gate_up, _), (down, _)) =
            (m(n_expert, n_embd), m(n_expert * 2 * n_ff, n_embd), m(n_expert * n_embd, n_ff));
        let ((gi, giw), (sgu, sguw), (sd, sdw), (_, x)) =
            (m(1, n_embd), m(2 * n_sh, n_embd), m(n_embd, n_sh), m(t, n_embd));
        let routing = Routing { n_expert, k, gating: ExpertGating::Softmax, norm_w: false, w_scale: 0.0 };
        let plain = MoeFfn::<CpuStorage> {
            router: &router,
            gate_up: super::super::ExpertGateUp::Stacked(&gate_up),
            down: &down,
            routing,
            act: GluActivation::Silu,
            biases: None,
            shared: None,
        };
        let with =
            MoeFfn { shared: Some(super::super::MoeShared { gate_inp: &gi, gate_up: &sgu, down: &sd }), ..plain };
        let run = |w: &MoeFfn<'_, CpuStorage>| match CpuStorage::F32(x.clone())
            .moe_ffn(&Layout::contiguous((t, n_embd)), w)
            .unwrap()
        {
            CpuStorage::F32(v) => v,
            _ => unreachable!(),
        };
        let (a, b) = (run(&plain), run(&with));
        for n in 0..t {
            let xn: Vec<f64> = x[n * n_embd..(n + 1) * n_embd].iter().map(|&v| f64::from(v)).collect();
            let sg = 1.0 / (1.0 + (-dot(&giw, &xn)).exp());
            let h: Vec<f64> = (0..n_sh)
                .map(|i| {
                    let (g, u) = (
                        dot(&sguw[i * n_embd..(i + 1) * n_embd], &xn),
                        dot(&sguw[(n_sh + i) * n_embd..(n_sh + i + 1) * n_embd], &xn),
                    );
                    g / (1.0 + (-g).exp()) * u
                })
                .collect();
            for o in 0..n_embd {
                let want = sg * dot(&sdw[o * n_sh..(o + 1) * n_sh], &h);
                let got = f64::from(b[n * n_embd + o]) - f64::from(a[n * n_embd + o]);
                assert!((got - want).abs() <= 1e-5 * (1.0 + want.abs()), "token {n} output {o}: {got} against {want}");
            }
        }
    }

    /// The CPU's MoE block (the conformance oracle's) against llama.cpp's `build_moe_ffn`
    /// (src/llama-graph.cpp) restated here in f64 for three tokens: `probs = softmax(x
    /// routerᵀ)`, the k largest, their probabilities normalised to sum 1, each expert's
    /// `down(silu(gate x) * up x)`, the weighted sum. Random dense weights; the chosen
    /// experts differ between the tokens.
    #[test]
    fn moe_block_matches_build_moe_ffn() {
        let (n_expert, k, n_embd, n_ff, t) = (6usize, 2usize, 16usize, 24usize, 3usize);
        let seed = &mut 7u64;
        let (rw, gw, uw, dw, x) = (
            uniform(seed, n_expert * n_embd, 1.0),
            uniform(seed, n_expert * n_ff * n_embd, 1.0),
            uniform(seed, n_expert * n_ff * n_embd, 1.0),
            uniform(seed, n_expert * n_embd * n_ff, 1.0),
            uniform(seed, t * n_embd, 1.0),
        );
        let (router, gate, up, down) = (
            dense(rw.clone(), n_expert, n_embd),
            dense(gw.clone(), n_expert * n_ff, n_embd),
            dense(uw.clone(), n_expert * n_ff, n_embd),
            dense(dw.clone(), n_expert * n_embd, n_ff),
        );
        let routing = Routing { n_expert, k, gating: ExpertGating::Softmax, norm_w: true, w_scale: 0.0 };
        let w = MoeFfn::<CpuStorage> {
            router: &router,
            gate_up: super::super::ExpertGateUp::Split(&gate, &up),
            down: &down,
            routing,
            act: GluActivation::Silu,
            biases: None,
            shared: None,
        };
        let got = match CpuStorage::F32(x.clone()).moe_ffn(&Layout::contiguous((t, n_embd)), &w).unwrap() {
            CpuStorage::F32(v) => v,
            _ => unreachable!(),
        };
        let mut chosen = Vec::new();
        for n in 0..t {
            let xn: Vec<f64> = x[n * n_embd..(n + 1) * n_embd].iter().map(|&v| f64::from(v)).collect();
            let logits: Vec<f64> = (0..n_expert).map(|e| dot(&rw[e * n_embd..(e + 1) * n_embd], &xn)).collect();
            let z: f64 = logits.iter().map(|l| l.exp()).sum();
            let probs: Vec<f64> = logits.iter().map(|l| l.exp() / z).collect();
            let (ids, want) = mix(
                &probs,
                k,
                |e, ids| probs[e] / ids.iter().map(|&i| probs[i]).sum::<f64>(),
                |e, i| {
                    let row = (e * n_ff + i) * n_embd;
                    let (g, u) = (dot(&gw[row..row + n_embd], &xn), dot(&uw[row..row + n_embd], &xn));
                    g / (1.0 + (-g).exp()) * u
                },
                |e, o, h| dot(&dw[(e * n_embd + o) * n_ff..(e * n_embd + o + 1) * n_ff], h),
                (n_ff, n_embd),
            );
            chosen.push(ids);
            for (o, want) in want.iter().enumerate() {
                let g = f64::from(got[n * n_embd + o]);
                assert!((g - want).abs() <= 1e-5 * (1.0 + want.abs()), "token {n} output {o}: {g} against {want}");
            }
        }
        assert!(chosen.windows(2).any(|c| c[0] != c[1]), "the tokens chose the same experts: {chosen:?}");
    }

    /// gpt-oss's block on the CPU storage (`MoeFfn::biases`, `ExpertGating::SoftmaxWeight`,
    /// the clamped SwiGLU) against llama.cpp's `build_moe_ffn` for `openai-moe.cpp` restated
    /// in f64: router bias on the logits, the top k logits' softmax as weights, gate and up
    /// biases before `swiglu_oai`, down bias before the weighting.
    #[test]
    fn gpt_oss_moe_block_matches_build_moe_ffn() {
        let (n_expert, k, n_embd, n_ff, t) = (6usize, 2usize, 16usize, 24usize, 3usize);
        let seed = &mut 11u64;
        let (rw, gw, dw, x) = (
            uniform(seed, n_expert * n_embd, 1.0),
            uniform(seed, 2 * n_expert * n_ff * n_embd, 1.0),
            uniform(seed, n_expert * n_embd * n_ff, 1.0),
            uniform(seed, t * n_embd, 2.0),
        );
        let (rb, gub, db) = (
            uniform(seed, n_expert, 2.0),
            uniform(seed, n_expert * 2 * n_ff, 3.0),
            uniform(seed, n_expert * n_embd, 1.0),
        );
        // Gate and up stacked per expert (rows of gw: expert e's gate, then its up).
        let (router, gate_up, down) = (
            dense(rw.clone(), n_expert, n_embd),
            dense(gw.clone(), 2 * n_expert * n_ff, n_embd),
            dense(dw.clone(), n_expert * n_embd, n_ff),
        );
        let (rbs, gubs, dbs) = (CpuStorage::F32(rb.clone()), CpuStorage::F32(gub.clone()), CpuStorage::F32(db.clone()));
        let routing = Routing { n_expert, k, gating: ExpertGating::SoftmaxWeight, norm_w: false, w_scale: 0.0 };
        let w = MoeFfn::<CpuStorage> {
            router: &router,
            gate_up: super::super::ExpertGateUp::Stacked(&gate_up),
            down: &down,
            routing,
            act: GluActivation::SwigluOai,
            biases: Some(super::super::MoeBiases { router: &rbs, gate_up: &gubs, down: &dbs }),
            shared: None,
        };
        let got = match CpuStorage::F32(x.clone()).moe_ffn(&Layout::contiguous((t, n_embd)), &w).unwrap() {
            CpuStorage::F32(v) => v,
            _ => unreachable!(),
        };
        for n in 0..t {
            let xn: Vec<f64> = x[n * n_embd..(n + 1) * n_embd].iter().map(|&v| f64::from(v)).collect();
            let logits: Vec<f64> =
                (0..n_expert).map(|e| dot(&rw[e * n_embd..(e + 1) * n_embd], &xn) + f64::from(rb[e])).collect();
            let (_, want) = mix(
                &logits,
                k,
                |e, ids| {
                    let z: f64 = ids.iter().map(|&i| (logits[i] - logits[ids[0]]).exp()).sum();
                    (logits[e] - logits[ids[0]]).exp() / z
                },
                |e, i| {
                    let (gr, ur) = ((2 * e * n_ff + i) * n_embd, ((2 * e + 1) * n_ff + i) * n_embd);
                    let g = dot(&gw[gr..gr + n_embd], &xn) + f64::from(gub[e * 2 * n_ff + i]);
                    let u = dot(&gw[ur..ur + n_embd], &xn) + f64::from(gub[e * 2 * n_ff + n_ff + i]);
                    let xg = g.min(7.0);
                    xg / (1.0 + (-1.702 * xg).exp()) * (u.clamp(-7.0, 7.0) + 1.0)
                },
                |e, o, h| {
                    dot(&dw[(e * n_embd + o) * n_ff..(e * n_embd + o + 1) * n_ff], h) + f64::from(db[e * n_embd + o])
                },
                (n_ff, n_embd),
            );
            for (o, want) in want.iter().enumerate() {
                let g = f64::from(got[n * n_embd + o]);
                assert!((g - want).abs() <= 1e-5 * (1.0 + want.abs()), "token {n} output {o}: {g} against {want}");
            }
        }
    }
}
