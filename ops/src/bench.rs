//! Kernel workloads for benchmarks: what `vkml bench ops` and the criterion benches in
//! `benches/` time, defined once. Each [`Workload`] owns its device buffers and records
//! one call of one op; it knows the bytes the call must move and the flops it must do, so
//! a time becomes GB/s and TFLOP/s, and which measured ceiling ([`Limit`]) the figure is a
//! fraction of:
//!
//! - [`Limit::Bandwidth`]: the `copy_vec4` kernel streaming a large buffer (bytes read +
//!   written per second), the rate a shader that only moves memory achieves;
//! - [`Limit::Fma`]: f32 fma chains on registers (`peak.comp`, variant `fma`);
//! - [`Limit::Matrix`]: 16x16x16 f16 cooperative matrices with f32 accumulators on
//!   registers (`peak.comp`, variant `cm_f16`; VK_KHR_cooperative_matrix), where the device
//!   has them.
//!
//! Bytes count each operand once (weights, inputs, outputs), the least a kernel must move;
//! flops count 2 per multiply-add. Weight-bound workloads rotate over enough copies that
//! the data cannot stay in the last-level cache ([`Scale::Full`]: 256 MiB in all, five
//! times the H100's 50 MB L2).
//!
//! Timing ([`measure`]) is host wall-clock around the submission of many calls recorded
//! into one command buffer (recording not counted), after a warm-up call that creates the
//! pipelines: the submission latency is spread over at least [`MIN_BATCH_SECONDS`] of work.

use std::time::Instant;

use vkml_hal::{Buffer, Device, MemoryKind, PipelineOptions, Stream};
use vkml_quant::GgmlType;

use crate::attention::{self, AttnShape, KvCache};
use crate::elementwise::{self, BinaryOp, View};
use crate::error::{OpsError, Result};
use crate::matmul::{self, MatLayout};
use crate::quant::{self, QMatrix};
use crate::rand::{self, Distribution};
use crate::{nn, tuning, Dtype};

/// Least GPU time one timed submission covers, in seconds.
pub const MIN_BATCH_SECONDS: f64 = 0.05;

/// Sizes of the workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// The shapes of an 8B model (4096-wide mat-vecs, 4096 x 14336 x 512 mat-mats, 4096^3
    /// matmuls) with weights rotating over 256 MiB: for GPUs.
    Full,
    /// Shapes a CPU implementation (lavapipe) runs in seconds: 1024-wide mat-vecs, small
    /// mat-mats, 16 MiB rotations.
    Small,
}

impl Scale {
    /// `full` or `small`.
    pub fn parse(s: &str) -> Option<Scale> {
        match s {
            "full" => Some(Scale::Full),
            "small" => Some(Scale::Small),
            _ => None,
        }
    }

    /// [`Scale::Full`] on a discrete or integrated GPU, [`Scale::Small`] on a CPU device.
    pub fn for_device(dev: &Device) -> Scale {
        if dev.caps().device_type == vkml_hal::caps::DeviceType::Cpu {
            Scale::Small
        } else {
            Scale::Full
        }
    }

    fn rotation_bytes(self) -> u64 {
        match self {
            Scale::Full => 256 << 20,
            Scale::Small => 16 << 20,
        }
    }
}

/// The measured ceiling a workload's figure is a fraction of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    /// Memory bandwidth (the `copy_vec4` kernel).
    Bandwidth,
    /// f32 fma throughput.
    Fma,
    /// f16 cooperative-matrix throughput.
    Matrix,
}

type Record = Box<dyn FnMut(&mut Stream, usize) -> Result<()>>;
type Build = Box<dyn Fn(&Device) -> Result<Parts>>;

/// One op at one shape, ready to record: it owns its buffers.
pub struct Workload {
    /// Kind of op: `copy`, `peak`, `mat_vec`, `mat_mat`, `matmul`, `elementwise`,
    /// `softmax`, `rms_norm`, `attention`.
    pub group: &'static str,
    /// The op with its dtype or GGML type and shape, e.g. `Q4_0 4096x4096`.
    pub name: String,
    /// Bytes one call must read and write.
    pub bytes: f64,
    /// Floating-point operations of one call (2 per multiply-add).
    pub flops: f64,
    /// What the figure is compared with.
    pub limit: Limit,
    /// Calls per rotation: call `i` uses copy `i % copies` of the operands.
    pub copies: usize,
    record: Record,
}

impl std::fmt::Debug for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workload")
            .field("group", &self.group)
            .field("name", &self.name)
            .field("bytes", &self.bytes)
            .field("flops", &self.flops)
            .field("limit", &self.limit)
            .field("copies", &self.copies)
            .finish_non_exhaustive()
    }
}

impl Workload {
    /// Records call `i` (operand copy `i % copies`) on `s`.
    ///
    /// # Errors
    /// The op's errors (shape, dtype, missing feature, HAL).
    pub fn record(&mut self, s: &mut Stream, i: usize) -> Result<()> {
        (self.record)(s, i % self.copies.max(1))
    }
}

/// What a [`Spec`]'s build makes; [`Spec::build`] adds the spec's group and name.
struct Parts {
    bytes: f64,
    flops: f64,
    limit: Limit,
    copies: usize,
    record: Record,
}

/// A workload not built yet: building allocates and fills its buffers.
pub struct Spec {
    /// As [`Workload::group`].
    pub group: &'static str,
    /// As [`Workload::name`].
    pub name: String,
    build: Build,
}

impl std::fmt::Debug for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spec").field("group", &self.group).field("name", &self.name).finish_non_exhaustive()
    }
}

impl Spec {
    fn new(group: &'static str, name: String, build: impl Fn(&Device) -> Result<Parts> + 'static) -> Spec {
        Spec { group, name, build: Box::new(build) }
    }

    /// Allocates and fills the buffers.
    ///
    /// # Errors
    /// Out of device memory, a shape the device cannot bind, a missing feature.
    pub fn build(&self, dev: &Device) -> Result<Workload> {
        let p = (self.build)(dev)?;
        Ok(Workload {
            group: self.group,
            name: self.name.clone(),
            bytes: p.bytes,
            flops: p.flops,
            limit: p.limit,
            copies: p.copies,
            record: p.record,
        })
    }
}

/// Seconds per call of every repetition of [`measure`].
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    /// Calls per timed submission.
    pub calls: usize,
    /// Seconds per call, one value per repetition.
    pub seconds: Vec<f64>,
}

impl Measurement {
    /// Mean and sample standard deviation of the seconds per call.
    pub fn mean_sd(&self) -> (f64, f64) {
        mean_sd(&self.seconds)
    }
}

/// Mean and sample standard deviation (n - 1) of `v`; 0 deviation for fewer than two
/// values, NaN mean for none.
pub fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (m, 0.0);
    }
    let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1.0);
    (m, var.sqrt())
}

/// Times `w`: one warm-up call, then calls recorded into one submission in batches that
/// grow until one takes [`MIN_BATCH_SECONDS`] (whole rotations once past one), then `reps`
/// timed submissions of that many calls. The timer covers submitting and waiting only:
/// recording comes before it, and releasing the finished command buffer after it. The
/// call index runs on across submissions, so every operand copy is used in turn even when
/// a submission holds fewer calls than there are copies.
///
/// # Errors
/// The workload's errors; HAL errors.
pub fn measure(dev: &Device, w: &mut Workload, reps: usize) -> Result<Measurement> {
    let mut s = Stream::new(dev)?;
    let copies = w.copies.max(1);
    let mut next = 0usize;
    let mut run = |s: &mut Stream, w: &mut Workload, calls: usize| -> Result<f64> {
        for _ in 0..calls {
            w.record(s, next)?;
            next = next.wrapping_add(1);
        }
        let t = Instant::now();
        s.submit()?.wait()?;
        let secs = t.elapsed().as_secs_f64();
        // Nothing left to submit: this only releases the finished command buffer.
        s.finish_and_wait()?;
        Ok(secs)
    };
    // Warm-up: one call creates the pipelines; a slow kernel is not run a whole rotation.
    run(&mut s, w, 1)?;
    let mut calls = 1;
    let mut t = run(&mut s, w, calls)?;
    while t < MIN_BATCH_SECONDS && calls < 1 << 16 {
        let grow = (MIN_BATCH_SECONDS * 1.2 / t.max(1e-6)).ceil().clamp(2.0, 64.0) as usize;
        calls *= grow;
        // Whole rotations once past one, so every operand copy is read equally often.
        if calls > copies {
            calls = calls.div_ceil(copies) * copies;
        }
        t = run(&mut s, w, calls)?;
    }
    let mut seconds = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        seconds.push(run(&mut s, w, calls)? / calls as f64);
    }
    Ok(Measurement { calls, seconds })
}

/// Pseudo-random block bytes for a `rows x k` matrix of `ty`, with every 16-bit word's
/// top exponent bit cleared so that f16 scales (and F32/F16/BF16 values) are finite. A
/// kernel's speed does not depend on the values; the grid i-quants cannot be quantized
/// from floats at all (vkml-quant has no quantizer for them).
pub fn random_blocks(ty: GgmlType, rows: usize, k: usize, seed: u64) -> Vec<u8> {
    let n = rows * (k / ty.block_size()) * ty.type_size();
    let mut s = seed | 1;
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        out.extend_from_slice(&(s & 0xBFFF_BFFF_BFFF_BFFF).to_le_bytes());
    }
    out.truncate(n);
    out
}

fn alloc(dev: &Device, bytes: usize) -> Result<Buffer> {
    Ok(dev.alloc(bytes.max(4) as u64, MemoryKind::DeviceLocal)?)
}

/// A device buffer of `n` values of `dt` uniform in [-1, 1), made on the GPU.
fn random_buffer(dev: &Device, dt: Dtype, n: usize, seed: u64) -> Result<Buffer> {
    let b = alloc(dev, n * dt.size())?;
    let mut s = Stream::new(dev)?;
    rand::fill(&mut s, dt, Distribution::Uniform { lo: -1.0, hi: 1.0 }, seed, 0, n, &b)?;
    s.finish_and_wait()?;
    Ok(b)
}

fn copies_for(scale: Scale, bytes: usize) -> usize {
    (scale.rotation_bytes().div_ceil(bytes.max(1) as u64)).max(1) as usize
}

/// Two buffers of `bytes` copied into each other in turn by `op(stream, from, to)`: the
/// copy workloads. Counted bytes: read + written.
fn ping_pong(
    dev: &Device,
    bytes: u64,
    op: impl Fn(&mut Stream, &Buffer, &Buffer) -> Result<()> + 'static,
) -> Result<Parts> {
    let (a, b) = (alloc(dev, bytes as usize)?, alloc(dev, bytes as usize)?);
    Ok(Parts {
        bytes: 2.0 * bytes as f64,
        flops: 0.0,
        limit: Limit::Bandwidth,
        copies: 2,
        record: Box::new(move |s, i| if i == 0 { op(s, &a, &b) } else { op(s, &b, &a) }),
    })
}

/// The `copy_vec4` kernel over `bytes` (rounded down to 16; at most the device's
/// `maxStorageBufferRange`, which [`suite`] respects): the [`Limit::Bandwidth`]
/// reference. Counted bytes: read + written.
pub fn copy_kernel(bytes: u64) -> Spec {
    let bytes = bytes / 16 * 16;
    Spec::new("copy", format!("copy_vec4 kernel {} MiB", bytes >> 20), move |dev| {
        let k = dev.kernel("copy_vec4")?;
        let p = dev.pipeline(&k, &PipelineOptions { spec_constants: vec![(0, 256)], ..Default::default() })?;
        let n = (bytes / 16) as u32;
        let groups = n.div_ceil(256);
        let max_x = dev.caps().limits.max_workgroup_count[0];
        let grid = [groups.min(max_x), groups.div_ceil(groups.min(max_x).max(1)), 1];
        ping_pong(dev, bytes, move |s, x, y| Ok(s.dispatch(&p, &[x.into(), y.into()], &n.to_le_bytes(), grid)?))
    })
}

/// `vkCmdCopyBuffer` over `bytes` (read + written), for comparison with the kernel copy.
pub fn copy_command(bytes: u64) -> Spec {
    Spec::new("copy", format!("vkCmdCopyBuffer {} MiB", bytes >> 20), move |dev| {
        ping_pong(dev, bytes, move |s, x, y| Ok(s.copy(x, 0, y, 0, bytes)?))
    })
}

/// The register-only loops of `peak.comp`: [`Limit::Fma`] (`matrix` false) or
/// [`Limit::Matrix`] (`matrix` true). `None` for the matrix loop on a device without
/// f16 cooperative matrices of 16x16x16 ([`tuning::coopmat_subgroup_size`]). The operands
/// are constants (splats and fma chains near a fixed point); a power-limited GPU may run
/// such data faster than random data, so the ceilings can read somewhat high.
pub fn peak(dev: &Device, matrix: bool, scale: Scale) -> Option<Spec> {
    let sg = if matrix { Some(tuning::coopmat_subgroup_size(dev.caps())?) } else { None };
    let name = if matrix { "f16 cooperative matrix 16x16x16, f32 accumulators" } else { "f32 fma" };
    Some(Spec::new("peak", name.into(), move |dev| {
        let kernel = dev.kernel(if matrix { "peak.cm_f16" } else { "peak.fma" })?;
        let opts = match sg {
            Some((size, true)) => {
                PipelineOptions { required_subgroup_size: Some(size), full_subgroups: true, ..Default::default() }
            }
            _ => PipelineOptions::default(),
        };
        let p = dev.pipeline(&kernel, &opts)?;
        // Enough workgroups to fill any GPU several times over; at Full, one dispatch is
        // 0.28 PFLOP (fma) or 4.4 PFLOP (matrix): 18 ms and 7 ms on an H100.
        let (groups, iters) = match scale {
            Scale::Full => (4096u32, 4096u32),
            Scale::Small => (64, 256),
        };
        let y = alloc(dev, 4 * 1024 * groups as usize * 8)?;
        let sub = sg.map_or(dev.caps().subgroup.size, |(size, _)| size).max(1);
        let per_group = if matrix { f64::from(256 / sub) * 32768.0 } else { 256.0 * 256.0 };
        let pc: Vec<u8> =
            [iters, 0, 0.999_999f32.to_bits(), 1e-7f32.to_bits()].iter().flat_map(|w| w.to_le_bytes()).collect();
        Ok(Parts {
            bytes: 0.0,
            flops: per_group * f64::from(groups) * f64::from(iters),
            limit: if matrix { Limit::Matrix } else { Limit::Fma },
            copies: 1,
            record: Box::new(move |s, _| {
                s.dispatch(&p, &[(&y).into()], &pc, [groups, 1, 1])?;
                Ok(())
            }),
        })
    }))
}

/// Batch-1 fused mat-vec `y = W x` of a `rows x k` weight of `ty` on the device's default
/// launch ([`quant::mat_vec`]). Bytes: the weight, x (f32) and y (f32). Each operand copy
/// writes its own y, so consecutive calls are independent and may overlap on the GPU (no
/// barrier between them): the figure is the kernel's streaming rate, not the latency of
/// one mat-vec in a dependent chain as a model runs it.
pub fn mat_vec(ty: GgmlType, rows: usize, k: usize, scale: Scale) -> Spec {
    Spec::new("mat_vec", format!("{ty:?} {rows}x{k}"), move |dev| {
        let MatVecOperands { weight_bytes, mats, x, ys } = mat_vec_operands(dev, ty, rows, k, scale)?;
        Ok(Parts {
            bytes: (weight_bytes + 4 * k + 4 * rows) as f64,
            flops: 2.0 * (rows * k) as f64,
            limit: Limit::Bandwidth,
            copies: mats.len(),
            record: Box::new(move |s, i| quant::mat_vec(s, &mats[i], &x, 1, &ys[i])),
        })
    })
}

/// The expert-indexed mat-vec of a mixture-of-experts decode step ([`quant::mat_vec_id`]):
/// `slots` of `n_expert` random experts of `rows x k` each, x shared (gate / up). Each call
/// takes the next `slots` experts in turn (the expert sets rotate through the whole tensor,
/// so the chosen weights come from memory, not the cache). Bytes: the chosen experts'
/// weights, x and the slots' outputs.
pub fn mat_vec_id(ty: GgmlType, n_expert: usize, rows: usize, k: usize, slots: usize) -> Spec {
    Spec::new("mat_vec_id", format!("{ty:?} {slots} of {n_expert} experts {rows}x{k}"), move |dev| {
        let blocks = random_blocks(ty, n_expert * rows, k, 11);
        let m = QMatrix::upload(dev, ty, n_expert * rows, k, &blocks)?;
        let copies = (n_expert / slots.max(1)).max(1);
        let ids = (0..copies)
            .map(|c| {
                let set: Vec<u32> = (0..slots).map(|j| ((c * slots + j) % n_expert) as u32).collect();
                Ok(dev.upload(&set)?)
            })
            .collect::<Result<Vec<_>>>()?;
        let x = random_buffer(dev, Dtype::F32, k, 3)?;
        let ys = (0..copies).map(|_| alloc(dev, 4 * slots * rows)).collect::<Result<Vec<_>>>()?;
        Ok(Parts {
            bytes: (blocks.len() / n_expert * slots + 4 * k + 4 * slots * rows) as f64,
            flops: 2.0 * (slots * rows * k) as f64,
            limit: Limit::Bandwidth,
            copies,
            record: Box::new(move |s, i| quant::mat_vec_id(s, &m, n_expert, &ids[i], slots, &x, 0, &ys[i])),
        })
    })
}

/// A MoE decode step's gate|up kernel ([`quant::mat_vec_id_fused`]): one token routed in
/// the kernel from random logits over `n_expert` experts (softmax, `k` chosen, weights
/// normalised), each slot's stacked gate|up rows (`2 rows x k` per expert) multiplied into
/// its SwiGLU products. Calls rotate through copies of the logits that choose disjoint
/// expert sets where `n_expert / k` allows (the chosen weights come from memory), each
/// with its own ids and weights for the kernel to write, so that calls are independent as
/// in [`mat_vec`]. Bytes:
/// the chosen experts' weights, x, the logits and the products.
pub fn mat_vec_id_routed_glu(ty: GgmlType, n_expert: usize, rows: usize, k: usize, slots: usize) -> Spec {
    mat_vec_id_glu(ty, n_expert, rows, k, slots, true)
}

/// [`mat_vec_id_routed_glu`], or with `routed` false the same kernel given the chosen
/// experts' ids (the same sets, uploaded), without the routing: the difference is what
/// routing in the kernel costs.
pub fn mat_vec_id_glu(ty: GgmlType, n_expert: usize, rows: usize, k: usize, slots: usize, routed: bool) -> Spec {
    let tag = if routed { " routed" } else { "" };
    Spec::new("mat_vec_id_glu", format!("{ty:?} {slots} of {n_expert} experts 2x{rows}x{k}{tag}"), move |dev| {
        let blocks = random_blocks(ty, n_expert * 2 * rows, k, 13);
        let m = QMatrix::upload(dev, ty, n_expert * 2 * rows, k, &blocks)?;
        let copies = (n_expert / slots.max(1)).max(1);
        // Logits that put experts c k .. c k + k on top for copy c.
        let logits = (0..copies)
            .map(|c| {
                let l: Vec<f32> = (0..n_expert)
                    .map(|e| {
                        if (c * slots..(c + 1) * slots).contains(&e) {
                            4.0 + e as f32 * 1e-3
                        } else {
                            -(e as f32) * 1e-3
                        }
                    })
                    .collect();
                Ok(dev.upload(&l)?)
            })
            .collect::<Result<Vec<_>>>()?;
        let x = random_buffer(dev, Dtype::F32, k, 3)?;
        // (per copy, so that calls stay independent: routed, written by the kernel; else
        // copy c's experts c k .. c k + k)
        let weights = (0..copies).map(|_| alloc(dev, 4 * slots)).collect::<Result<Vec<_>>>()?;
        let ids = (0..copies)
            .map(|c| {
                if routed {
                    return alloc(dev, 4 * slots);
                }
                let v: Vec<u32> = (0..slots).map(|j| ((c * slots + j) % n_expert) as u32).collect();
                Ok(dev.upload(&v)?)
            })
            .collect::<Result<Vec<_>>>()?;
        let ys = (0..copies).map(|_| alloc(dev, 4 * slots * rows)).collect::<Result<Vec<_>>>()?;
        let routing = crate::moe::Routing {
            n_expert,
            k: slots,
            gating: crate::moe::ExpertGating::Softmax,
            norm_w: true,
            w_scale: 0.0,
        };
        Ok(Parts {
            bytes: (blocks.len() / n_expert * slots + 4 * k + 4 * n_expert + 4 * slots * rows) as f64,
            flops: 4.0 * (slots * rows * k) as f64,
            limit: Limit::Bandwidth,
            copies,
            record: Box::new(move |s, i| {
                let route = quant::RoutedSlots { logits: &logits[i], logit_bias: None, routing, weights: &weights[i] };
                let e = quant::ExpertMatVec {
                    n_expert,
                    ids: &ids[i],
                    n_slots: slots,
                    x_slots: 0,
                    norm: None,
                    glu: Some(nn::GluActivation::Silu),
                    bias: None,
                    route: routed.then_some(route),
                    sum: None,
                };
                quant::mat_vec_id_fused(s, &m, &x, &ys[i], &e)
            }),
        })
    })
}

/// The operands of the batch-1 mat-vec workloads: one random `rows x k` weight of `ty`
/// uploaded as often as `scale`'s rotation needs ([`Scale::rotation_bytes`]), an f32 `x`
/// of `k` values and one f32 `y` of `rows` per copy.
struct MatVecOperands {
    weight_bytes: usize,
    mats: Vec<QMatrix>,
    x: Buffer,
    ys: Vec<Buffer>,
}

fn mat_vec_operands(dev: &Device, ty: GgmlType, rows: usize, k: usize, scale: Scale) -> Result<MatVecOperands> {
    let blocks = random_blocks(ty, rows, k, 7);
    let copies = copies_for(scale, blocks.len());
    let mats = (0..copies).map(|_| QMatrix::upload(dev, ty, rows, k, &blocks)).collect::<Result<Vec<_>>>()?;
    let x = random_buffer(dev, Dtype::F32, k, 3)?;
    let ys = (0..copies).map(|_| alloc(dev, 4 * rows)).collect::<Result<Vec<_>>>()?;
    Ok(MatVecOperands { weight_bytes: blocks.len(), mats, x, ys })
}

/// The decode mat-vec on Q8_1 activations, `y[rows] = W x` through
/// [`quant::mat_vec_q8_1`] (packed int8 dot products), with `x` quantized once outside the
/// timed calls as a decode step shares it; the device's default launch
/// ([`tuning::mat_vec_config`]). Bytes: the weight, the Q8_1 `x` (36 bytes per 32 values)
/// and `y`. Calls are independent, as in [`mat_vec`]. Building it fails with
/// [`OpsError::Shape`] where the device lacks the integer-dot kernel or `ty` is not in
/// [`quant::DOT_TYPES`].
pub fn mat_vec_q8_1(ty: GgmlType, rows: usize, k: usize, scale: Scale) -> Spec {
    Spec::new("mat_vec_q8_1", format!("{ty:?} {rows}x{k}"), move |dev| {
        let MatVecOperands { weight_bytes, mats, x, ys } = mat_vec_operands(dev, ty, rows, k, scale)?;
        let xq = alloc(dev, 36 * k / 32)?;
        let mut s = Stream::new(dev)?;
        quant::quantize_q8_1(&mut s, &x, k / 32, &xq)?;
        s.finish_and_wait()?;
        let cfg = tuning::mat_vec_config(dev.caps());
        Ok(Parts {
            bytes: (weight_bytes + 36 * k / 32 + 4 * rows) as f64,
            flops: 2.0 * (rows * k) as f64,
            limit: Limit::Bandwidth,
            copies: mats.len(),
            record: Box::new(move |s, i| quant::mat_vec_q8_1(s, &mats[i], &xq, 1, &ys[i], cfg)),
        })
    })
}

/// Prompt mat-mat `y[n_tok, rows] = x[n_tok, k] Wᵀ` of a weight of `ty` on the device's
/// fastest path ([`quant::mat_mat`]). Compared with [`Limit::Matrix`] where that path is
/// the cooperative-matrix one, else [`Limit::Fma`]. Rotates over copies of the weights
/// ([`Scale`]'s rotation bytes), as a model's layers do: each call then reads its
/// weights from memory, not from a cache that still holds them from the call before.
pub fn mat_mat(ty: GgmlType, rows: usize, k: usize, n_tok: usize, scale: Scale) -> Spec {
    mat_mat_on("mat_mat", None, ty, rows, k, n_tok, scale)
}

/// [`mat_mat`] on [`quant::MatMatPath::CoopMatInt8`] (x quantized to Q8_1 inside each
/// call, int8 tensor cores), group `mat_mat_int8`. Compared with [`Limit::Matrix`], the
/// f16 cooperative-matrix peak (the int8 peak is not measured). Building it fails where
/// the device or `ty` lacks that path.
pub fn mat_mat_int8(ty: GgmlType, rows: usize, k: usize, n_tok: usize, scale: Scale) -> Spec {
    mat_mat_on("mat_mat_int8", Some(quant::MatMatPath::CoopMatInt8), ty, rows, k, n_tok, scale)
}

fn mat_mat_on(
    group: &'static str,
    path: Option<quant::MatMatPath>,
    ty: GgmlType,
    rows: usize,
    k: usize,
    n_tok: usize,
    scale: Scale,
) -> Spec {
    Spec::new(group, format!("{ty:?} {rows}x{k}x{n_tok}"), move |dev| {
        let blocks = random_blocks(ty, rows, k, 9);
        let copies = copies_for(scale, blocks.len());
        let mats = (0..copies).map(|_| QMatrix::upload(dev, ty, rows, k, &blocks)).collect::<Result<Vec<_>>>()?;
        let x = random_buffer(dev, Dtype::F32, n_tok * k, 5)?;
        let y = alloc(dev, 4 * n_tok * rows)?;
        let path = path.unwrap_or_else(|| quant::MatMatPath::best(dev.caps(), &mats[0]));
        let coop = path != quant::MatMatPath::Scalar;
        Ok(Parts {
            bytes: (blocks.len() + 4 * n_tok * (k + rows)) as f64,
            flops: 2.0 * (rows * k * n_tok) as f64,
            limit: if coop { Limit::Matrix } else { Limit::Fma },
            copies,
            record: Box::new(move |s, i| {
                quant::mat_mat_with(s, &mats[i], &x, n_tok, &y, quant::MatMatOptions::new(path))
            }),
        })
    })
}

/// Float matmul `y = a b` of `n x n` row-major matrices of `dt` on the device's default
/// kernel ([`matmul::matmul`]); [`Limit::Matrix`] where that kernel uses cooperative
/// matrices, else [`Limit::Fma`].
pub fn float_matmul(dt: Dtype, n: usize) -> Spec {
    Spec::new("matmul", format!("{} {n}x{n}x{n}", dt.name()), move |dev| {
        let a = random_buffer(dev, dt, n * n, 1)?;
        let b = random_buffer(dev, dt, n * n, 2)?;
        let y = alloc(dev, n * n * dt.size())?;
        let coop = matches!(tuning::matmul_config(dev.caps(), dt, n), tuning::MatmulPath::CoopMat { .. });
        let lay = MatLayout { offset: 0, batch: 0, row: n, col: 1 };
        Ok(Parts {
            bytes: (3 * n * n * dt.size()) as f64,
            flops: 2.0 * (n as f64).powi(3),
            limit: if coop { Limit::Matrix } else { Limit::Fma },
            copies: 1,
            record: Box::new(move |s, _| matmul::matmul(s, dt, (1, n, n, n), &a, lay, &b, lay, &y)),
        })
    })
}

/// Quantizing `rows x k` f32 values to `ty` blocks on the GPU ([`quant::quantize`]).
/// Bytes: the f32 read and the blocks written (GB/s of f32 input is 4 / (4 + bytes per
/// value of `ty`) of the figure).
pub fn quantize(ty: GgmlType, rows: usize, k: usize) -> Spec {
    Spec::new("quantize", format!("f32 to {ty:?} {rows}x{k}"), move |dev| {
        let x = random_buffer(dev, Dtype::F32, rows * k, 9)?;
        let m = QMatrix::alloc(dev, ty, rows, k)?;
        let block_bytes = rows * k / ty.block_size() * ty.type_size();
        Ok(Parts {
            bytes: (4 * rows * k + block_bytes) as f64,
            flops: 0.0,
            limit: Limit::Bandwidth,
            copies: 1,
            record: Box::new(move |s, _| quant::quantize(s, &x, &m)),
        })
    })
}

/// Element-wise `y = a + b` over `len` contiguous f32 values. Bytes: 2 reads + 1 write.
pub fn add(len: usize) -> Spec {
    Spec::new("elementwise", format!("add f32 {len}"), move |dev| {
        let a = random_buffer(dev, Dtype::F32, len, 3)?;
        let b = random_buffer(dev, Dtype::F32, len, 4)?;
        let y = alloc(dev, 4 * len)?;
        Ok(Parts {
            bytes: 12.0 * len as f64,
            flops: len as f64,
            limit: Limit::Bandwidth,
            copies: 1,
            record: Box::new(move |s, _| {
                let st = [1usize];
                let (va, vb) =
                    (View { buffer: &a, offset: 0, strides: &st }, View { buffer: &b, offset: 0, strides: &st });
                elementwise::binary(s, BinaryOp::Add, Dtype::F32, &[len], va, vb, &y)
            }),
        })
    })
}

/// Softmax over the last dim of f32 `[rows, n]` (scale 1, no mask). Bytes: read + write.
pub fn softmax(rows: usize, n: usize) -> Spec {
    Spec::new("softmax", format!("f32 {rows}x{n}"), move |dev| {
        let x = random_buffer(dev, Dtype::F32, rows * n, 6)?;
        let y = alloc(dev, 4 * rows * n)?;
        Ok(Parts {
            bytes: 8.0 * (rows * n) as f64,
            flops: 0.0,
            limit: Limit::Bandwidth,
            copies: 1,
            record: Box::new(move |s, _| nn::softmax(s, Dtype::F32, &x, None, rows, n, 1.0, &y)),
        })
    })
}

/// rms_norm with a weight over rows of f32 `[rows, n]`. Bytes: read + write (+ weight).
pub fn rms_norm(rows: usize, n: usize) -> Spec {
    Spec::new("rms_norm", format!("f32 {rows}x{n}"), move |dev| {
        let x = random_buffer(dev, Dtype::F32, rows * n, 7)?;
        let w = random_buffer(dev, Dtype::F32, n, 8)?;
        let y = alloc(dev, 4 * rows * n)?;
        Ok(Parts {
            bytes: (8 * rows * n + 4 * n) as f64,
            flops: 0.0,
            limit: Limit::Bandwidth,
            copies: 1,
            record: Box::new(move |s, _| nn::rms_norm(s, Dtype::F32, &x, Some(&w), rows, n, 1e-5, &y)),
        })
    })
}

/// Causal flash attention with f32 queries over an f16 KV cache: `t_q` queries at the end
/// of `kv_len` positions, `n_heads` query heads sharing `n_kv_heads` KV heads of dim `d`.
/// Prefill (`t_q > 1`) is compared with [`Limit::Matrix`] where it runs on the
/// tensor-core kernel ([`attention::tensor_core_prefill`]), else with [`Limit::Fma`]
/// (flops: 4 d per unmasked query-key pair); decode (`t_q == 1`, split over the KV length as the model does,
/// [`tuning::attn_splits`]) with [`Limit::Bandwidth`] (bytes: the K and V read), rotating
/// over caches at [`Scale::Full`].
pub fn attention(t_q: usize, kv_len: usize, n_heads: usize, n_kv_heads: usize, d: usize, scale: Scale) -> Spec {
    let what = if t_q == 1 { "decode" } else { "prefill" };
    let name = format!("{what} f32 q, f16 KV: {t_q} x {kv_len}, {n_heads}/{n_kv_heads} heads, d {d}");
    Spec::new("attention", name, move |dev| {
        if t_q == 0 || t_q > kv_len {
            return Err(OpsError::Shape {
                op: "bench::attention",
                reason: format!("{t_q} queries need 1..={kv_len} (the KV length)"),
            });
        }
        let kv_bytes = 2 * 2 * n_kv_heads * kv_len * d;
        let copies = if t_q == 1 { copies_for(scale, kv_bytes) } else { 1 };
        let caches = (0..copies)
            .map(|_| Ok((KvCache::new(dev, n_kv_heads, kv_len, d)?, KvCache::new(dev, n_kv_heads, kv_len, d)?)))
            .collect::<Result<Vec<_>>>()?;
        let q = random_buffer(dev, Dtype::F32, t_q * n_heads * d, 10)?;
        let out = alloc(dev, 4 * t_q * n_heads * d)?;
        let sh = AttnShape {
            t_q,
            n_heads,
            kv_len,
            q_pos0: kv_len - t_q,
            causal: true,
            window: 0,
            softcap: 0.0,
            scale: 1.0 / (d as f32).sqrt(),
            n_splits: tuning::attn_splits(t_q, kv_len),
            sinks: None,
        };
        let (po, pm) = attention::split_scratch_len(&sh, d);
        let scratch = (alloc(dev, 4 * po)?, alloc(dev, 4 * pm)?);
        // Unmasked pairs per head: t_q queries, query i sees kv_len - t_q + i + 1 keys.
        let pairs = (t_q * (kv_len - t_q) + t_q * (t_q + 1) / 2) as f64;
        Ok(Parts {
            bytes: (kv_bytes + 8 * t_q * n_heads * d) as f64,
            flops: 4.0 * d as f64 * pairs * n_heads as f64,
            limit: if t_q == 1 {
                Limit::Bandwidth
            } else if attention::tensor_core_prefill(dev.caps(), d, &sh) {
                Limit::Matrix
            } else {
                Limit::Fma
            },
            copies,
            record: Box::new(move |s, i| {
                let (k, v) = &caches[i];
                let scr = if sh.n_splits > 1 { Some((&scratch.0, &scratch.1)) } else { None };
                attention::flash_attn(s, Dtype::F32, &q, k, v, sh, &out, scr)
            }),
        })
    })
}

/// The suite of `vkml bench ops` and the criterion benches: the ceilings first (copy
/// kernel, `vkCmdCopyBuffer`, fma and matrix peaks), then mat-vec for every type in
/// [`quant::SUPPORTED`], the Q8_1 decode mat-vec of [`quant::DOT_TYPES`] where
/// [`tuning::q8_1_activations`] holds (at 4096x4096, 4096x14336 and 14336x4096 at full
/// scale, as is their mat-vec on f32 x), mat-mat for Q4_0, Q8_0 and Q4_K (and on int8
/// tensor cores for Q4_0 and Q8_0 where [`tuning::coopmat_int8`] holds), the expert-indexed
/// mat-vec, float matmul (f32, and f16 where the device has 16-bit storage), quantizing to
/// every type of [`quant::GPU_QUANTIZED`], add, softmax, rms_norm and attention (prefill
/// and decode), at `scale`'s shapes. The expert-indexed mat-vecs run plain, as gated
/// products on given ids and as a decode step's routed gate|up kernel.
pub fn suite(dev: &Device, scale: Scale) -> Vec<Spec> {
    let full = scale == Scale::Full;
    let mut v =
        vec![copy_kernel(if full { 1 << 30 } else { 64 << 20 }), copy_command(if full { 1 << 30 } else { 64 << 20 })];
    v.extend(peak(dev, false, scale));
    v.extend(peak(dev, true, scale));
    let (rows, k) = if full { (4096, 4096) } else { (1024, 1024) };
    for &ty in quant::SUPPORTED {
        v.push(mat_vec(ty, rows, k, scale));
    }
    // The decode path of the types that have it, where the model uses it: on Q8_1 x, and
    // (the 4096² one above) on f32 x also at a feed-forward's shapes, where the weight read
    // outweighs each workgroup's quantizing of x.
    if tuning::q8_1_activations(dev.caps()) {
        for &ty in quant::DOT_TYPES {
            let shapes = if full { vec![(4096, 4096), (4096, 14336), (14336, 4096)] } else { vec![(rows, k)] };
            for &(r, kk) in &shapes[1..] {
                v.push(mat_vec(ty, r, kk, scale));
            }
            for (r, kk) in shapes {
                v.push(mat_vec_q8_1(ty, r, kk, scale));
            }
        }
    }
    // Mixture-of-experts decode: gpt-oss-20b's MXFP4 gate / up (4 of 32 experts of 2880 x
    // 2880) and Qwen3-30B-A3B's (8 of 128 of 768 x 2048, Q4_0).
    if full {
        v.push(mat_vec_id(GgmlType::MXFP4, 32, 2880, 2880, 4));
        v.push(mat_vec_id(GgmlType::Q4_0, 128, 768, 2048, 8));
        for routed in [false, true] {
            v.push(mat_vec_id_glu(GgmlType::MXFP4, 32, 2880, 2880, 4, routed));
            v.push(mat_vec_id_glu(GgmlType::Q4_0, 128, 768, 2048, 8, routed));
        }
    } else {
        v.push(mat_vec_id(GgmlType::MXFP4, 8, 256, 256, 2));
        v.push(mat_vec_id_routed_glu(GgmlType::MXFP4, 8, 256, 256, 2));
    }
    // Both shapes of a Llama-3-8B feed-forward (gate / up, and down: the issue's
    // 4096x14336x512).
    let (mm_shapes, n_tok) = if full { (vec![(14336, 4096), (4096, 14336)], 512) } else { (vec![(1024, 512)], 64) };
    for &(mm_rows, mm_k) in &mm_shapes {
        for ty in [GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K] {
            v.push(mat_mat(ty, mm_rows, mm_k, n_tok, scale));
        }
    }
    if tuning::coopmat_int8(dev.caps()) {
        for &(mm_rows, mm_k) in &mm_shapes {
            for &ty in quant::COOPMAT_INT8_TYPES {
                v.push(mat_mat_int8(ty, mm_rows, mm_k, n_tok, scale));
            }
        }
    }
    let n = if full { 4096 } else { 256 };
    v.push(float_matmul(Dtype::F32, n));
    if dev.caps().types.float16 {
        v.push(float_matmul(Dtype::F16, n));
    }
    let (q_rows, q_k) = if full { (4096, 4096) } else { (256, 1024) };
    for &ty in &quant::GPU_QUANTIZED {
        v.push(quantize(ty, q_rows, q_k));
    }
    v.push(add(if full { 1 << 26 } else { 1 << 22 }));
    let (rows, n) = if full { (8192, 4096) } else { (256, 4096) };
    v.push(softmax(rows, n));
    v.push(rms_norm(rows, n));
    let (t, ctx) = if full { (512, 4096) } else { (64, 512) };
    v.push(attention(t, t, 32, 8, 128, scale));
    v.push(attention(1, ctx, 32, 8, 128, scale));
    v
}

/// Checks that an op name filter matches something, for a clear error on a typo.
///
/// # Errors
/// [`OpsError::Shape`] naming the groups when `filter` matches no spec's group or name.
pub fn select(specs: Vec<Spec>, filter: Option<&str>) -> Result<Vec<Spec>> {
    let Some(f) = filter else { return Ok(specs) };
    let groups: Vec<&str> = {
        let mut g: Vec<&str> = specs.iter().map(|s| s.group).collect();
        g.dedup();
        g
    };
    let groups = groups.join(", ");
    let keep: Vec<Spec> = specs.into_iter().filter(|s| s.group == f || s.name.contains(f)).collect();
    if keep.is_empty() {
        return Err(OpsError::Shape { op: "bench", reason: format!("no workload matches {f:?} (groups: {groups})") });
    }
    Ok(keep)
}
