//! Quantized weights on the GPU: raw GGUF block bytes uploaded once and read directly by
//! the kernels (`shader-src/shaders/{dequant,get_rows,mul_mat_vec}.comp`, block decoding
//! in `include/quant.glsl`).
//!
//! Mat-vec kernels, fastest first ([`mat_vec_with`] picks by [`MatVecConfig`] and type):
//! block-wise, one subgroup per `rows_per_subgroup` rows with lanes decoding 32-element
//! slices of blocks ([`BLOCK_TYPES`]: `mul_mat_vec_q32.comp`, `mul_mat_vec_k.comp`,
//! `mul_mat_vec_iq.comp`; optionally integer dot, [`DOT_TYPES`]); one workgroup per row
//! with 4 elements per step ([`VEC4_TYPES`], `mul_mat_vec_vec4.comp`); one workgroup per
//! row decoding element by element with `dq()` (every type, `mul_mat_vec.comp`).
//!
//! Layout: a matrix of `rows` rows of `k` elements, GGUF/ggml order (`ne[0] = k` is the
//! contiguous dimension); each row is `k / block_size` blocks, `row_bytes` bytes.

use vkml_hal::{BufferArg, Device, MemoryKind, PipelineOptions, Stream};
use vkml_quant::GgmlType;

use crate::dtype::Dtype;
use crate::error::{OpsError, Result};
use crate::launch::{grid, pipeline, push_words};
use crate::nn::GluActivation;
use crate::tuning::{self, MatVecConfig, ELEMENTWISE_WORKGROUP};

/// Types with GPU dequantize, get_rows and mat-vec kernels today.
pub const SUPPORTED: &[GgmlType] = &[
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q8_1,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q8_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
    GgmlType::MXFP4,
    GgmlType::NVFP4,
    GgmlType::TQ1_0,
    GgmlType::TQ2_0,
    GgmlType::Q1_0,
    GgmlType::Q2_0,
    GgmlType::IQ2_XXS,
    GgmlType::IQ2_XS,
    GgmlType::IQ2_S,
    GgmlType::IQ3_XXS,
    GgmlType::IQ3_S,
    GgmlType::IQ1_S,
    GgmlType::IQ1_M,
];

/// Types with a vectorised mat-vec kernel (`mul_mat_vec_vec4.comp`, decoders in
/// `include/quant_vec4.glsl`).
pub const VEC4_TYPES: &[GgmlType] = &[
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
];

/// The 32-element types of the block-wise mat-vec kernel `mul_mat_vec_q32.comp` (a lane
/// decodes whole blocks).
pub const Q32_TYPES: &[GgmlType] = &[GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0];

/// Types with a block-wise mat-vec kernel: one subgroup per `rows_per_subgroup` rows, each
/// lane decoding 32-element slices of blocks with 32-bit loads, subgroup add at the end
/// (see [`MatVecConfig::subgroup_rows`]). The kernel per type ([`block_kernel`]):
/// [`Q32_TYPES`] in `mul_mat_vec_q32.comp`; the K-quants (256-element super-blocks, 8 lanes
/// each) in `mul_mat_vec_k.comp`; the code-book, FP4, ternary/binary and IQ2/IQ3 grid
/// types in `mul_mat_vec_iq.comp` (launch scheme in `include/mul_mat_vec_block.glsl`). The
/// other [`SUPPORTED`] types use the per-workgroup kernels `mul_mat_vec_vec4.comp` /
/// `mul_mat_vec.comp`: F32, F16, BF16, Q8_1, and IQ1_S and IQ1_M, whose 2048-entry grid
/// as an indexed constant array makes lavapipe's compile of an unrolled block kernel take
/// many minutes (a shared-memory copy of the grids needs a workgroup barrier, with which
/// lavapipe compiled the grid kernels far too slowly as well).
pub const BLOCK_TYPES: &[GgmlType] = &[
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q8_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
    GgmlType::MXFP4,
    GgmlType::NVFP4,
    GgmlType::TQ1_0,
    GgmlType::TQ2_0,
    GgmlType::Q1_0,
    GgmlType::Q2_0,
    GgmlType::IQ2_XXS,
    GgmlType::IQ2_XS,
    GgmlType::IQ2_S,
    GgmlType::IQ3_XXS,
    GgmlType::IQ3_S,
];

/// The block-wise mat-vec shader (file stem) for `ty`, `None` for types not in
/// [`BLOCK_TYPES`].
pub fn block_kernel(ty: GgmlType) -> Option<&'static str> {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0 => Some("mul_mat_vec_q32"),
        GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K | GgmlType::Q8_K => {
            Some("mul_mat_vec_k")
        }
        GgmlType::IQ4_NL
        | GgmlType::IQ4_XS
        | GgmlType::MXFP4
        | GgmlType::NVFP4
        | GgmlType::TQ1_0
        | GgmlType::TQ2_0
        | GgmlType::Q1_0
        | GgmlType::Q2_0
        | GgmlType::IQ2_XXS
        | GgmlType::IQ2_XS
        | GgmlType::IQ2_S
        | GgmlType::IQ3_XXS
        | GgmlType::IQ3_S => Some("mul_mat_vec_iq"),
        _ => None,
    }
}

/// Types with an integer-dot mat-vec kernel (`mul_mat_vec_dot.comp`).
pub const DOT_TYPES: &[GgmlType] = &[GgmlType::Q4_0, GgmlType::Q8_0];

/// Most batch columns one mat-vec dispatch handles (`MAX_BATCH` in the shader).
pub const MAX_MAT_VEC_BATCH: usize = 8;

fn variant(op: &'static str, ty: GgmlType) -> Result<&'static str> {
    Ok(match ty {
        GgmlType::F32 => "f32",
        GgmlType::F16 => "f16",
        GgmlType::BF16 => "bf16",
        GgmlType::Q4_0 => "q4_0",
        GgmlType::Q4_1 => "q4_1",
        GgmlType::Q5_0 => "q5_0",
        GgmlType::Q5_1 => "q5_1",
        GgmlType::Q8_0 => "q8_0",
        GgmlType::Q8_1 => "q8_1",
        GgmlType::Q2_K => "q2_k",
        GgmlType::Q3_K => "q3_k",
        GgmlType::Q4_K => "q4_k",
        GgmlType::Q5_K => "q5_k",
        GgmlType::Q6_K => "q6_k",
        GgmlType::Q8_K => "q8_k",
        GgmlType::IQ4_NL => "iq4_nl",
        GgmlType::IQ4_XS => "iq4_xs",
        GgmlType::MXFP4 => "mxfp4",
        GgmlType::NVFP4 => "nvfp4",
        GgmlType::TQ1_0 => "tq1_0",
        GgmlType::TQ2_0 => "tq2_0",
        GgmlType::Q1_0 => "q1_0",
        GgmlType::Q2_0 => "q2_0",
        GgmlType::IQ2_XXS => "iq2_xxs",
        GgmlType::IQ2_XS => "iq2_xs",
        GgmlType::IQ2_S => "iq2_s",
        GgmlType::IQ3_XXS => "iq3_xxs",
        GgmlType::IQ3_S => "iq3_s",
        GgmlType::IQ1_S => "iq1_s",
        GgmlType::IQ1_M => "iq1_m",
        ty => {
            let supported = SUPPORTED.iter().map(|t| format!("{t:?}")).collect::<Vec<_>>().join(", ");
            return Err(OpsError::UnsupportedType { op, ty, supported });
        }
    })
}

/// A quantized (or f32/f16/bf16) weight matrix in device-local memory.
///
/// A matrix larger than one storage-buffer binding (`maxStorageBufferRange`: 128 MiB on
/// lavapipe and many phone GPUs, 4 GiB on desktop ones) is held as several parts of whole
/// rows, each in its own buffer ([`QMatrix::parts`]); every op here runs one dispatch per
/// part and writes the part's rows of its output in place.
#[derive(Debug, Clone)]
pub struct QMatrix {
    parts: Vec<QPart>,
    ty: GgmlType,
    rows: usize,
    k: usize,
    row_bytes: u64,
}

/// Rows `row0 .. row0 + rows` of a [`QMatrix`] in one buffer (raw blocks, row `i` of the
/// part at byte `i * row_bytes`).
#[derive(Debug, Clone)]
pub struct QPart {
    buffer: vkml_hal::Buffer,
    row0: usize,
    rows: usize,
}

impl QPart {
    /// The buffer holding the part's blocks (padded to whole 32-bit words).
    pub fn buffer(&self) -> &vkml_hal::Buffer {
        &self.buffer
    }
    /// The matrix row the part starts at.
    pub fn row0(&self) -> usize {
        self.row0
    }
    /// Rows in the part.
    pub fn rows(&self) -> usize {
        self.rows
    }
}

/// Rows per part of a matrix of `row_bytes`-byte rows on `dev`, parts holding at most
/// `max_part_bytes` (and at most one storage-buffer binding): a multiple of the rows whose
/// f32 outputs span `minStorageBufferOffsetAlignment` bytes, so that each part's outputs
/// can be bound where they start.
fn rows_per_part(dev: &Device, op: &'static str, row_bytes: u64, max_part_bytes: u64) -> Result<usize> {
    let limits = &dev.caps().limits;
    let bytes = max_part_bytes.min(limits.max_storage_buffer_range).min(u64::from(u32::MAX)) & !3;
    let align_rows = (limits.min_storage_buffer_offset_alignment / 4).max(1);
    let rows = bytes / row_bytes.max(1) / align_rows * align_rows;
    if rows == 0 {
        return Err(OpsError::Shape {
            op,
            reason: format!(
                "{align_rows} rows of {row_bytes} bytes (the fewest a part can hold) exceed a storage binding of {bytes} bytes"
            ),
        });
    }
    Ok(usize::try_from(rows).unwrap_or(usize::MAX))
}

/// Device buffers for `rows` rows of `row_bytes` bytes in parts of at most `per_part` rows
/// (at least one part, each padded to whole 32-bit words: the kernels read `uint[]`).
fn alloc_parts(dev: &Device, rows: usize, row_bytes: u64, per_part: usize) -> Result<Vec<QPart>> {
    let mut parts = Vec::with_capacity(rows.div_ceil(per_part).max(1));
    let mut row0 = 0;
    loop {
        let n = (rows - row0).min(per_part);
        let buffer = dev.alloc((n as u64 * row_bytes).div_ceil(4).max(1) * 4, MemoryKind::DeviceLocal)?;
        parts.push(QPart { buffer, row0, rows: n });
        row0 += n;
        if row0 >= rows {
            return Ok(parts);
        }
    }
}

impl QMatrix {
    /// Uploads `rows x k` elements of type `ty` given as raw GGML block bytes
    /// (`rows * k / block_size * type_size` bytes, the layout of a GGUF tensor with
    /// `dims = [k, rows]`), in parts of at most one storage-buffer binding each.
    ///
    /// # Errors
    /// [`OpsError::Shape`] when `k` is not a multiple of the block size, `bytes` has the
    /// wrong length, or one row is too long for a binding; [`OpsError::UnsupportedType`]
    /// for types without GPU kernels; HAL errors from allocation and upload.
    pub fn upload(dev: &Device, ty: GgmlType, rows: usize, k: usize, bytes: &[u8]) -> Result<QMatrix> {
        Self::upload_in_parts(dev, ty, rows, k, bytes, u64::MAX)
    }

    /// [`QMatrix::upload`] with parts of at most `max_part_bytes` each (capped at the
    /// device's storage-buffer binding; tests use it to split small matrices).
    ///
    /// # Errors
    /// As [`QMatrix::upload`].
    pub fn upload_in_parts(
        dev: &Device,
        ty: GgmlType,
        rows: usize,
        k: usize,
        bytes: &[u8],
        max_part_bytes: u64,
    ) -> Result<QMatrix> {
        variant("QMatrix::upload", ty)?;
        let bs = ty.block_size();
        if k == 0 || !k.is_multiple_of(bs) {
            return Err(OpsError::Shape {
                op: "QMatrix::upload",
                reason: format!("row length {k} is not a positive multiple of the {ty:?} block size {bs}"),
            });
        }
        let row_bytes = (k / bs * ty.type_size()) as u64;
        let want = row_bytes.checked_mul(rows as u64);
        if want != Some(bytes.len() as u64) {
            return Err(OpsError::Shape {
                op: "QMatrix::upload",
                reason: format!("{rows} rows of {k} {ty:?} elements are {want:?} bytes, got {}", bytes.len()),
            });
        }
        let per_part = rows_per_part(dev, "QMatrix::upload", row_bytes, max_part_bytes)?;
        let parts = alloc_parts(dev, rows, row_bytes, per_part)?;
        for part in &parts {
            let at = (part.row0 as u64 * row_bytes) as usize;
            part.buffer.write(0, &bytes[at..at + (part.rows as u64 * row_bytes) as usize])?;
        }
        Ok(QMatrix { parts, ty, rows, k, row_bytes })
    }

    /// Uploads a 2-D GGUF tensor (`dims = [k, rows]`; 1-D tensors are one row).
    ///
    /// # Errors
    /// As [`QMatrix::upload`]; [`OpsError::Shape`] for tensors of more than 2 dims.
    pub fn from_gguf(dev: &Device, info: &vkml_quant::gguf::TensorInfo, bytes: &[u8]) -> Result<QMatrix> {
        let (k, rows) = match info.dims.as_slice() {
            [k] => (*k, 1),
            [k, r] => (*k, *r),
            [k, r, rest @ ..] if rest.iter().all(|&d| d == 1) => (*k, *r),
            dims => {
                return Err(OpsError::Shape {
                    op: "QMatrix::from_gguf",
                    reason: format!("tensor `{}` has dims {dims:?}; a matrix is [k, rows]", info.name),
                })
            }
        };
        Self::upload(dev, info.ty, rows as usize, k as usize, bytes)
    }

    /// GGML type.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }
    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// Elements per row.
    pub fn k(&self) -> usize {
        self.k
    }
    /// Bytes per row.
    pub fn row_bytes(&self) -> u64 {
        self.row_bytes
    }
    /// The parts holding the rows, in order (one unless the matrix is larger than a
    /// storage-buffer binding).
    pub fn parts(&self) -> &[QPart] {
        &self.parts
    }

    /// The rows of the matrices `parts`, in order, as one matrix (a copy recorded on `s`,
    /// itself in [`QPart`]s where it passes one binding): Q, K and V projections become one
    /// mat-vec ([`mat_vec`] writes `[q | k | v]` per batch column), gate and up one gated
    /// product ([`MatVecEpilogue::Glu`]). The source matrices can be dropped once the copy
    /// is recorded.
    ///
    /// # Errors
    /// [`OpsError::Shape`] for no matrices, or matrices of different types or row lengths;
    /// HAL errors (allocation).
    pub fn concat_rows(s: &mut Stream, parts: &[&QMatrix]) -> Result<QMatrix> {
        let Some(first) = parts.first() else {
            return Err(OpsError::Shape { op: "concat_rows", reason: "no matrices to concatenate".into() });
        };
        if let Some(p) = parts.iter().find(|p| p.ty != first.ty || p.k != first.k) {
            return Err(OpsError::Shape {
                op: "concat_rows",
                reason: format!(
                    "every part needs the type and row length of the first ({:?}, k = {}); got {:?}, k = {}",
                    first.ty, first.k, p.ty, p.k
                ),
            });
        }
        let rows: usize = parts.iter().map(|p| p.rows).sum();
        let rb = first.row_bytes;
        let dev = s.device().clone();
        let per_part = rows_per_part(&dev, "concat_rows", rb, u64::MAX)?;
        let out = alloc_parts(&dev, rows, rb, per_part)?;
        // Every source part's rows, in order, into the destination parts they fall in.
        let mut at = 0; // destination row
        for src in parts.iter().flat_map(|p| &p.parts) {
            let mut done = 0;
            while done < src.rows {
                let dst = &out[at / per_part];
                let n = (src.rows - done).min(dst.rows - (at - dst.row0));
                s.copy(&src.buffer, done as u64 * rb, &dst.buffer, (at - dst.row0) as u64 * rb, n as u64 * rb)?;
                done += n;
                at += n;
            }
        }
        Ok(QMatrix { ty: first.ty, rows, k: first.k, row_bytes: rb, parts: out })
    }
}

/// Checks that `x` holds `n` f32 rows of `m.k` and `y` holds `n` rows of `m.rows`.
fn check_io(op: &'static str, m: &QMatrix, x: &vkml_hal::Buffer, n: usize, y: &vkml_hal::Buffer) -> Result<()> {
    check_io_rows(op, m, m.rows, x, n, y)
}

/// As [`check_io`] for an output of `out_rows` rows per input row.
fn check_io_rows(
    op: &'static str,
    m: &QMatrix,
    out_rows: usize,
    x: &vkml_hal::Buffer,
    n: usize,
    y: &vkml_hal::Buffer,
) -> Result<()> {
    if x.size() < 4 * (n * m.k) as u64 || y.size() < 4 * (n * out_rows) as u64 {
        return Err(OpsError::Shape {
            op,
            reason: format!(
                "an input of {n} rows through a {}x{} matrix needs x of {} bytes and y of {} bytes, got {} and {}",
                m.rows,
                m.k,
                4 * n * m.k,
                4 * n * out_rows,
                x.size(),
                y.size()
            ),
        });
    }
    Ok(())
}

/// Records `out[0 .. rows*k] = dequantize(m)` as f32, row-major.
///
/// # Errors
/// [`OpsError::Shape`] when `out` holds fewer than `rows * k` f32; HAL dispatch errors.
pub fn dequantize(s: &mut Stream, m: &QMatrix, out: &vkml_hal::Buffer) -> Result<()> {
    let dev = s.device().clone();
    let n = (m.rows * m.k) as u64;
    if out.size() < 4 * n {
        return Err(OpsError::Shape {
            op: "dequantize",
            reason: format!("output holds {} bytes, needs {}", out.size(), 4 * n),
        });
    }
    let p = pipeline(&dev, &format!("dequant.{}", variant("dequantize", m.ty)?), ELEMENTWISE_WORKGROUP)?;
    // Per part, in chunks whose f32 output fits one binding too (it is larger than the blocks).
    let chunk = rows_per_part(&dev, "dequantize", 4 * m.k as u64, u64::MAX)?;
    for part in &m.parts {
        for r in (0..part.rows).step_by(chunk) {
            let rows = (part.rows - r).min(chunk);
            let n = (rows * m.k) as u64;
            let n_blocks = n / m.ty.block_size() as u64;
            let groups = grid(&dev, "dequantize", n.div_ceil(u64::from(ELEMENTWISE_WORKGROUP)))?;
            let pc = push_words(&[(r as u64 * m.row_bytes) as u32, n_blocks as u32, 0]);
            let y = BufferArg::range(out, 4 * ((part.row0 + r) * m.k) as u64, 4 * n);
            s.dispatch(&p, &[(&part.buffer).into(), y], &pc, groups)?;
        }
    }
    Ok(())
}

/// Records the embedding lookup `out[i, :] = dequantize(m[ids[i], :])` for `i < n_ids`
/// (`ids`: u32 `[n_ids]`; `out`: f32 `[n_ids * k]`). Ids past the last row give rows of NaN.
///
/// # Errors
/// [`OpsError::Shape`] for buffers too small or more than 65535 × 65535 ids; HAL errors.
pub fn get_rows(
    s: &mut Stream,
    m: &QMatrix,
    ids: &vkml_hal::Buffer,
    n_ids: usize,
    out: &vkml_hal::Buffer,
) -> Result<()> {
    let dev = s.device().clone();
    if ids.size() < 4 * n_ids as u64 || out.size() < 4 * (n_ids * m.k) as u64 {
        return Err(OpsError::Shape {
            op: "get_rows",
            reason: format!("{n_ids} ids need {} id bytes and {} output bytes", 4 * n_ids, 4 * n_ids * m.k),
        });
    }
    if n_ids == 0 {
        return Ok(());
    }
    let p = pipeline(&dev, &format!("get_rows.{}", variant("get_rows", m.ty)?), ELEMENTWISE_WORKGROUP)?;
    let gx = (m.k as u64).div_ceil(u64::from(ELEMENTWISE_WORKGROUP));
    let max_y = u64::from(dev.caps().limits.max_workgroup_count[1]);
    let gy = (n_ids as u64).min(max_y);
    let gz = (n_ids as u64).div_ceil(gy);
    if gz > u64::from(dev.caps().limits.max_workgroup_count[2]) {
        return Err(OpsError::Shape { op: "get_rows", reason: format!("{n_ids} ids exceed the device's grid") });
    }
    // One dispatch per part, each writing the ids it holds (the last one also NaN for ids
    // past the table).
    for (i, part) in m.parts.iter().enumerate() {
        let last = u32::from(i + 1 == m.parts.len());
        let pc =
            push_words(&[0, m.row_bytes as u32, m.k as u32, n_ids as u32, part.rows as u32, part.row0 as u32, last]);
        s.dispatch(&p, &[(&part.buffer).into(), ids.into(), out.into()], &pc, [gx as u32, gy as u32, gz as u32])?;
    }
    Ok(())
}

/// Records the fused mat-vec `y[b, r] = sum_c m[r, c] * x[b, c]` for `b < batch`
/// (`x`: f32[batch * k], `y`: f32[batch * rows], both row-major), with the launch from
/// [`tuning::mat_vec_config`]. Batches above [`MAX_MAT_VEC_BATCH`] are split into
/// several dispatches.
///
/// # Errors
/// [`OpsError::Shape`] for buffers too small; HAL errors.
pub fn mat_vec(s: &mut Stream, m: &QMatrix, x: &vkml_hal::Buffer, batch: usize, y: &vkml_hal::Buffer) -> Result<()> {
    let cfg = tuning::mat_vec_config(s.device().caps());
    mat_vec_with(s, m, x, batch, y, cfg)
}

/// [`mat_vec`] with an explicit launch configuration (tests use it to run every path).
///
/// # Errors
/// As [`mat_vec`]; [`OpsError::Shape`] for a workgroup size that is not a power of two
/// in 1..=128.
pub fn mat_vec_with(
    s: &mut Stream,
    m: &QMatrix,
    x: &vkml_hal::Buffer,
    batch: usize,
    y: &vkml_hal::Buffer,
    cfg: MatVecConfig,
) -> Result<()> {
    mat_vec_fused(s, m, x, batch, y, cfg, MatVecEpilogue::Store)
}

/// What a mat-vec does with its dot products (`include/mat_vec_out.glsl`): the decode
/// step's fusions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatVecEpilogue {
    /// `y[b, r] = t`.
    Store,
    /// `y[b, r] += t`: a residual add folded into the producing kernel.
    Add,
    /// Gated products in one pass: the matrix holds the gate rows then the up rows
    /// ([`QMatrix::concat_rows`] of gate and up, `2 n` rows), and `y[b, r] = act(gate_r . x)
    /// * (up_r . x)` for `r < n` (`y`: f32 `[batch, n]`), each `x` load serving both.
    Glu(GluActivation),
}

impl MatVecEpilogue {
    fn spec(self) -> u32 {
        match self {
            MatVecEpilogue::Store => 0,
            MatVecEpilogue::Add => 1,
            MatVecEpilogue::Glu(GluActivation::Silu) => 2,
            MatVecEpilogue::Glu(GluActivation::Gelu) => 3,
            MatVecEpilogue::Glu(GluActivation::GeluErf) => 4,
        }
    }
}

/// [`mat_vec_with`] with an output [`MatVecEpilogue`]: `y = W x` ([`MatVecEpilogue::Store`]),
/// `y += W x` ([`MatVecEpilogue::Add`]) or the gated product of a gate/up matrix
/// ([`MatVecEpilogue::Glu`]; `y` then has `m.rows() / 2` rows per batch column). Every
/// mat-vec kernel has every epilogue, the integer-dot one (`cfg.integer_dot`, x quantized
/// to Q8_1 by this call) included.
///
/// # Errors
/// As [`mat_vec_with`]; [`OpsError::Shape`] for a gated product over an odd row count.
pub fn mat_vec_fused(
    s: &mut Stream,
    m: &QMatrix,
    x: &vkml_hal::Buffer,
    batch: usize,
    y: &vkml_hal::Buffer,
    cfg: MatVecConfig,
    epilogue: MatVecEpilogue,
) -> Result<()> {
    mat_vec_core(s, m, x, false, None, batch, y, cfg, epilogue)
}

/// The integer-dot mat-vec on activations already quantized to Q8_1 by [`quantize_q8_1`]
/// (`xq`: `batch * k / 32` blocks of 36 bytes): quantize once per decode step and share
/// `xq` between every matrix that reads the same activations (Q, K, V; gate, up).
///
/// # Errors
/// [`OpsError::Shape`] where the integer-dot kernel does not apply (a type outside
/// [`DOT_TYPES`], a device without integer dot products or subgroup rows, `cfg` without
/// `subgroup_rows`) or `xq` is too small; as [`mat_vec_with`] otherwise.
pub fn mat_vec_q8_1(
    s: &mut Stream,
    m: &QMatrix,
    xq: &vkml_hal::Buffer,
    batch: usize,
    y: &vkml_hal::Buffer,
    cfg: MatVecConfig,
) -> Result<()> {
    mat_vec_q8_1_fused(s, m, xq, batch, y, cfg, MatVecEpilogue::Store)
}

/// [`mat_vec_q8_1`] with an output stage ([`MatVecEpilogue`], as [`mat_vec_fused`]):
/// `y += x Wᵀ`, or the gated product of a stacked gate/up matrix into `y: f32[batch, rows / 2]`.
///
/// # Errors
/// As [`mat_vec_q8_1`]; for [`MatVecEpilogue::Glu`], [`OpsError::Shape`] for an odd row count.
pub fn mat_vec_q8_1_fused(
    s: &mut Stream,
    m: &QMatrix,
    xq: &vkml_hal::Buffer,
    batch: usize,
    y: &vkml_hal::Buffer,
    cfg: MatVecConfig,
    epilogue: MatVecEpilogue,
) -> Result<()> {
    let cfg = MatVecConfig { integer_dot: true, ..cfg };
    mat_vec_core(s, m, xq, true, None, batch, y, cfg, epilogue)
}

/// Whether [`mat_vec_fused`] with `cfg` runs `m` on the integer-dot kernel, quantizing x
/// to Q8_1 first: then [`mat_vec_q8_1_fused`] on x quantized elsewhere (by
/// [`quantize_q8_1`], or by [`crate::nn::rms_norm_q8_1`] as it normalises) gives the same
/// result. Needs `cfg.integer_dot` and `cfg.subgroup_rows`, a type in [`DOT_TYPES`], and
/// a device with integer dot products and a usable subgroup size.
pub fn mat_vec_uses_q8_1(caps: &vkml_hal::Capabilities, m: &QMatrix, cfg: &MatVecConfig) -> bool {
    cfg.subgroup_rows
        && cfg.integer_dot
        && block_kernel(m.ty).is_some()
        && tuning::row_subgroup_size(caps).is_some()
        && caps.integer_dot.supported
        && DOT_TYPES.contains(&m.ty)
}

/// Whether [`rms_norm_mat_vec`] runs the norm inside the mat-vec (`include/mat_vec_norm.glsl`)
/// for `m`: on the block kernels with subgroup rows (not the integer-dot kernel, whose
/// workgroups would each quantize the whole normalised x: on the H100 that made llama-8b
/// Q4_0 decode 259 -> 139 t/s, every workgroup of 4 rows reading x's 16 KiB beside its
/// 9 KiB of weights; benches/RESULTS.md), for a matrix in one part.
pub fn mat_vec_fuses_norm(caps: &vkml_hal::Capabilities, m: &QMatrix, cfg: &MatVecConfig) -> bool {
    let row_sg = tuning::row_subgroup_size(caps).is_some() && cfg.subgroup_rows && block_kernel(m.ty).is_some();
    row_sg && !mat_vec_uses_q8_1(caps, m, cfg) && m.parts.len() == 1 && cfg.workgroup <= 128
}

/// Bytes of scratch [`rms_norm_mat_vec`] needs for `m` and `batch` rows of x: 0 where the
/// norm runs inside the mat-vec, else room for the normalised x (Q8_1 where the
/// integer-dot kernel runs, f32 otherwise). A caller with a buffer pool passes one of
/// these from it.
pub fn rms_norm_mat_vec_scratch(caps: &vkml_hal::Capabilities, m: &QMatrix, batch: usize, cfg: &MatVecConfig) -> u64 {
    if mat_vec_fuses_norm(caps, m, cfg) {
        0
    } else if mat_vec_uses_q8_1(caps, m, cfg) && m.k.is_multiple_of(32) {
        36 * (batch * m.k / 32) as u64
    } else {
        4 * (batch * m.k) as u64
    }
}

/// The mat-vec of a normalised x: `y = rms_norm(x) Wᵀ` (candle-nn's `rms_norm` with
/// weight `nw: f32[k]` and `eps`, then [`mat_vec_fused`] with `epilogue`) for `x:
/// f32[batch, k]`. Where [`mat_vec_fuses_norm`] holds, one dispatch: each workgroup
/// normalises x itself as it loads it; else the norm's own kernel first into `scratch`
/// (at least [`rms_norm_mat_vec_scratch`] bytes): `norm.rms_q8_1_f32`, writing Q8_1,
/// where the integer-dot kernel runs, `norm.rms_f32` otherwise. The results agree to
/// float rounding (the sum of squares is reduced in another order).
///
/// # Errors
/// As [`mat_vec_fused`]; [`OpsError::Shape`] for a norm weight shorter than `k` or a
/// scratch buffer too small.
#[allow(clippy::too_many_arguments)]
pub fn rms_norm_mat_vec(
    s: &mut Stream,
    x: &vkml_hal::Buffer,
    nw: &vkml_hal::Buffer,
    eps: f32,
    m: &QMatrix,
    batch: usize,
    y: &vkml_hal::Buffer,
    cfg: MatVecConfig,
    epilogue: MatVecEpilogue,
    scratch: Option<&vkml_hal::Buffer>,
) -> Result<()> {
    let dev = s.device().clone();
    let need = rms_norm_mat_vec_scratch(dev.caps(), m, batch, &cfg);
    let bad = |reason: String| Err(OpsError::Shape { op: "rms_norm_mat_vec", reason });
    if nw.size() < 4 * m.k as u64 {
        return bad(format!("the norm weight holds {} bytes, less than {} f32", nw.size(), m.k));
    }
    if need == 0 {
        return mat_vec_core(s, m, x, false, Some((nw, eps)), batch, y, cfg, epilogue);
    }
    let Some(scratch) = scratch.filter(|b| b.size() >= need) else {
        return bad(format!("the normalised x needs a scratch buffer of {need} bytes"));
    };
    if mat_vec_uses_q8_1(dev.caps(), m, &cfg) && m.k.is_multiple_of(32) {
        crate::nn::rms_norm_q8_1(s, x, Some(nw), batch, m.k, eps, scratch)?;
        return mat_vec_q8_1_fused(s, m, scratch, batch, y, cfg, epilogue);
    }
    crate::nn::rms_norm(s, Dtype::F32, x, Some(nw), batch, m.k, eps, scratch)?;
    mat_vec_fused(s, m, scratch, batch, y, cfg, epilogue)
}

#[allow(clippy::too_many_arguments)]
fn mat_vec_core(
    s: &mut Stream,
    m: &QMatrix,
    x: &vkml_hal::Buffer,
    pre_quantized: bool,
    norm: Option<(&vkml_hal::Buffer, f32)>,
    batch: usize,
    y: &vkml_hal::Buffer,
    cfg: MatVecConfig,
    epilogue: MatVecEpilogue,
) -> Result<()> {
    let dev = s.device().clone();
    let glu = matches!(epilogue, MatVecEpilogue::Glu(_));
    if glu && !m.rows.is_multiple_of(2) {
        return Err(OpsError::Shape {
            op: "mat_vec",
            reason: format!("a gated product needs the gate and up rows stacked (an even count), got {}", m.rows),
        });
    }
    let out_rows = if glu { m.rows / 2 } else { m.rows };
    if pre_quantized {
        let need = 36 * (batch * m.k / 32) as u64;
        if x.size() < need || y.size() < 4 * (batch * out_rows) as u64 {
            return Err(OpsError::Shape {
                op: "mat_vec_q8_1",
                reason: format!(
                    "{batch} Q8_1 rows of {} need xq of {need} bytes and y of {} bytes, got {} and {}",
                    m.k,
                    4 * batch * out_rows,
                    x.size(),
                    y.size()
                ),
            });
        }
    } else {
        check_io_rows("mat_vec", m, out_rows, x, batch, y)?;
    }
    if !(1..=8).contains(&cfg.rows_per_subgroup) || !(1..=8).contains(&cfg.dot_rows_per_subgroup) {
        return Err(OpsError::Shape {
            op: "mat_vec",
            reason: format!(
                "rows_per_subgroup {} and dot_rows_per_subgroup {} must be in 1..=8",
                cfg.rows_per_subgroup, cfg.dot_rows_per_subgroup
            ),
        });
    }
    if !cfg.workgroup.is_power_of_two() || cfg.workgroup > 128 {
        return Err(OpsError::Shape {
            op: "mat_vec",
            reason: format!("workgroup {} is not a power of two ≤ 128", cfg.workgroup),
        });
    }
    if batch == 0 || m.rows == 0 {
        return Ok(());
    }
    if glu && m.parts.len() > 1 {
        // The gate and up rows of a split matrix lie in different parts: both halves into
        // a scratch [batch, 2 out_rows], then act(gate) * up on its strided halves.
        let both = dev.alloc(4 * (batch * m.rows) as u64, MemoryKind::DeviceLocal)?;
        mat_vec_core(s, m, x, pre_quantized, norm, batch, &both, cfg, MatVecEpilogue::Store)?;
        let MatVecEpilogue::Glu(act) = epilogue else { unreachable!("glu is a Glu epilogue") };
        return crate::nn::glu_halves(s, act, &both, batch, out_rows, y);
    }
    let caps = dev.caps();
    let block = block_kernel(m.ty);
    let row_sg = tuning::row_subgroup_size(caps).filter(|_| cfg.subgroup_rows && block.is_some());
    let use_dot = mat_vec_uses_q8_1(caps, m, &cfg);
    if pre_quantized && !use_dot {
        return Err(OpsError::Shape {
            op: "mat_vec_q8_1",
            reason: format!(
                "Q8_1 activations need the integer-dot kernel: a type in {DOT_TYPES:?} (got {:?}), integer dot products and subgroup rows on the device (integer dot {}, subgroup rows {}), and cfg.subgroup_rows",
                m.ty,
                caps.integer_dot.supported,
                tuning::row_subgroup_size(caps).is_some()
            ),
        });
    }
    if norm.is_some() && (pre_quantized || use_dot || row_sg.is_none()) {
        return Err(OpsError::Shape {
            op: "mat_vec",
            reason: "the norm prologue needs a block kernel with subgroup rows (see mat_vec_fuses_norm)".into(),
        });
    }
    // x as Q8_1 for the integer-dot kernel: 36 bytes per 32 values, all batch rows.
    let xq = if pre_quantized {
        None
    } else if use_dot {
        let xq = dev.alloc(36 * (batch * m.k / 32) as u64, MemoryKind::DeviceLocal)?;
        quantize_q8_1(s, x, batch * m.k / 32, &xq)?;
        Some(xq)
    } else {
        None
    };
    let nr = if use_dot { cfg.dot_rows_per_subgroup } else { cfg.rows_per_subgroup };
    let groups = |rows: usize| match row_sg {
        Some((sg, _)) => grid(&dev, "mat_vec", (rows as u64).div_ceil(u64::from(cfg.workgroup.max(sg) / sg * nr))),
        None => grid(&dev, "mat_vec", rows as u64),
    };
    let pipeline_for = |nb: usize| -> Result<std::sync::Arc<vkml_hal::Pipeline>> {
        let (name, options) = match row_sg {
            Some((sg, require)) => (
                format!(
                    "{}.{}",
                    if use_dot { "mul_mat_vec_dot" } else { block.unwrap_or("mul_mat_vec_q32") },
                    variant("mat_vec", m.ty)?
                ),
                PipelineOptions {
                    spec_constants: {
                        let mut spec = vec![(0, cfg.workgroup.max(sg)), (1, nb as u32), (2, nr), (10, epilogue.spec())];
                        if !use_dot {
                            spec.push((11, u32::from(norm.is_some())));
                        }
                        spec
                    },
                    required_subgroup_size: require.then_some(sg),
                    full_subgroups: caps.subgroup.full_subgroups,
                },
            ),
            None => {
                let kernel = if cfg.vec4 && m.k.is_multiple_of(4) && VEC4_TYPES.contains(&m.ty) {
                    "mul_mat_vec_vec4"
                } else {
                    "mul_mat_vec"
                };
                let sg = if cfg.subgroup_reduce { "_sg" } else { "" };
                (
                    format!("{kernel}.{}{sg}", variant("mat_vec", m.ty)?),
                    PipelineOptions {
                        spec_constants: vec![(0, cfg.workgroup), (10, epilogue.spec())],
                        ..Default::default()
                    },
                )
            }
        };
        Ok(dev.pipeline(&dev.kernel(&name)?, &options)?)
    };
    for b0 in (0..batch).step_by(MAX_MAT_VEC_BATCH) {
        let nb = (batch - b0).min(MAX_MAT_VEC_BATCH);
        // Later batch chunks bind sub-ranges of x and y, which must meet the device's
        // storage-buffer offset alignment.
        let x_off = (4 * b0 * m.k) as u64;
        let y_off = (4 * b0 * out_rows) as u64;
        let align = dev.caps().limits.min_storage_buffer_offset_alignment.max(1);
        if !x_off.is_multiple_of(align) || !y_off.is_multiple_of(align) {
            return Err(OpsError::Shape {
                op: "mat_vec",
                reason: format!("batch > {MAX_MAT_VEC_BATCH} needs k and rows giving {align}-byte aligned chunks"),
            });
        }
        let p = pipeline_for(nb)?;
        let xq_ref = if pre_quantized { Some(x) } else { xq.as_ref() };
        let x_arg = match xq_ref {
            // Q8_1 rows: 36 bytes per 32 values; the chunk's offset must be aligned as well.
            Some(xq) => {
                let off = (36 * b0 * m.k / 32) as u64;
                if !off.is_multiple_of(align) {
                    return Err(OpsError::Shape {
                        op: "mat_vec",
                        reason: format!(
                            "batch > {MAX_MAT_VEC_BATCH} with integer dot needs {align}-byte aligned Q8_1 rows"
                        ),
                    });
                }
                BufferArg::range(xq, off, (36 * nb * m.k / 32) as u64)
            }
            None => BufferArg::range(x, x_off, (4 * nb * m.k) as u64),
        };
        // One dispatch per part: its rows of each batch column, y bound from the part's
        // first output (an aligned offset: QPart rows start at multiples of the alignment)
        // with the matrix's row stride. A gated product has one part (handled above).
        for part in &m.parts {
            let rows = if glu { out_rows } else { part.rows };
            let eps = norm.map_or(0, |(_, e)| e.to_bits());
            let pc = push_words(&[0, m.row_bytes as u32, m.k as u32, rows as u32, nb as u32, out_rows as u32, eps]);
            let y_arg = BufferArg::range(y, y_off + 4 * part.row0 as u64, (4 * ((nb - 1) * out_rows + rows)) as u64);
            let mut args = vec![(&part.buffer).into(), x_arg, y_arg];
            if row_sg.is_some() && !use_dot {
                // The norm weight (binding 3 of the block kernels; unread without the
                // prologue, where x stands in).
                args.push(match norm {
                    Some((nw, _)) => BufferArg::range(nw, 0, 4 * m.k as u64),
                    None => x_arg,
                });
            }
            s.dispatch(&p, &args, &pc, groups(rows)?)?;
        }
    }
    Ok(())
}

/// Invocations per workgroup of the Q8_1 quantizers (`quantize_q8_1.comp`,
/// `quantize_q8_1_tiles.comp`).
const Q8_1_WORKGROUP: u32 = 64;

/// Records the quantization of `n_blocks * 32` f32 values of `x` to Q8_1 blocks in `out`
/// (36 bytes each: f16 d, f16 s = d * sum(q), 32 x i8), as ggml's `quantize_row_q8_1_ref`
/// up to GPU division rounding (a quant may differ by one step at a rounding boundary).
///
/// # Errors
/// [`OpsError::Shape`] for buffers too small; HAL errors.
pub fn quantize_q8_1(s: &mut Stream, x: &vkml_hal::Buffer, n_blocks: usize, out: &vkml_hal::Buffer) -> Result<()> {
    if x.size() < 128 * n_blocks as u64 || out.size() < 36 * n_blocks as u64 {
        return Err(OpsError::Shape {
            op: "quantize_q8_1",
            reason: format!("{n_blocks} blocks need x of {} bytes and out of {} bytes", 128 * n_blocks, 36 * n_blocks),
        });
    }
    if n_blocks == 0 {
        return Ok(());
    }
    let dev = s.device().clone();
    let p = pipeline(&dev, "quantize_q8_1", Q8_1_WORKGROUP)?;
    let groups = grid(&dev, "quantize_q8_1", (n_blocks as u64).div_ceil(u64::from(Q8_1_WORKGROUP)))?;
    s.dispatch(&p, &[x.into(), out.into()], &push_words(&[n_blocks as u32]), groups)?;
    Ok(())
}

/// Rows and tokens per tile of the scalar quantized mat-mat (`mul_mat_q.comp`).
pub const MAT_MAT_TILE: usize = 64;

/// Tokens per tile of the cooperative-matrix mat-mats, and rows per tile of
/// `mul_mat_cm.comp` (`mul_mat_cm256.comp`'s tiles have 256 rows; [`mat_mat_kernel`]).
pub const MAT_MAT_CM_TILE: usize = 128;

/// Workgroups the cooperative-matrix mat-mats aim to launch: a grid of fewer tiles is
/// split over k (split-K) up to this many.
const MAT_MAT_TARGET_GROUPS: u64 = 128;

/// The kernel `mat_mat_with` runs on `path` for a `rows x k` matrix of type `ty` times
/// `n_tok` tokens on a device with `caps`, and its tile: (name, rows, tokens) per
/// workgroup ([`MAT_MAT_TILE`] square for the scalar kernel, [`MAT_MAT_CM_TILE`] tokens for
/// every cooperative-matrix one). [`MatMatPath::CoopMat`] runs `mul_mat_cm256`
/// (256 rows) where [`tuning::mat_mat_tall_tile`] says so and its grid alone has at least
/// 128 tiles, else `mul_mat_cm` (128 rows). A smaller grid would need split-K, whose
/// partial products cost more in a model's prompt than the taller tile saves (measured
/// with Q4_0 on tall tiles: llama-8b pp512 on the H100 at 3 460 t/s against 4 670 on
/// 128-row tiles; benches/RESULTS.md).
pub fn mat_mat_kernel(
    caps: &vkml_hal::Capabilities,
    path: MatMatPath,
    ty: GgmlType,
    rows: usize,
    n_tok: usize,
) -> (&'static str, usize, usize) {
    let tall_tiles = rows.div_ceil(256) as u64 * n_tok.div_ceil(MAT_MAT_CM_TILE) as u64;
    match path {
        MatMatPath::Scalar => ("mul_mat_q", MAT_MAT_TILE, MAT_MAT_TILE),
        MatMatPath::CoopMat2 => ("mul_mat_cm2", MAT_MAT_CM_TILE, MAT_MAT_CM_TILE),
        MatMatPath::CoopMatInt8 => ("mul_mat_cm_i8", MAT_MAT_CM_TILE, MAT_MAT_CM_TILE),
        MatMatPath::CoopMat if tuning::mat_mat_tall_tile(caps, ty) && tall_tiles >= MAT_MAT_TARGET_GROUPS => {
            ("mul_mat_cm256", 256, MAT_MAT_CM_TILE)
        }
        MatMatPath::CoopMat => ("mul_mat_cm", MAT_MAT_CM_TILE, MAT_MAT_CM_TILE),
    }
}

/// Which quantized mat-mat kernel to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatMatPath {
    /// `mul_mat_q.comp`: f32 FMA on 64 x 64 tiles; runs on every device. Results equal
    /// the f32 dot products of the dequantized weights (up to summation order).
    Scalar,
    /// `mul_mat_cm.comp`: f16 cooperative matrices (tensor cores) with f32 accumulation
    /// on 128 x 128 tiles (`mul_mat_cm256.comp`'s 256 x 128 for Q8_0 on big grids where
    /// [`tuning::mat_mat_tall_tile`] says so: [`mat_mat_kernel`]); needs
    /// [`tuning::coopmat_subgroup_size`] and `k % 32 == 0`.
    /// Weights and activations are rounded to f16 before the products.
    CoopMat,
    /// `mul_mat_cm2.comp`: workgroup-scope cooperative matrices (`VK_NV_cooperative_matrix2`)
    /// on 128 x 128 tiles, weights decoded inside the tensor loads; the same rounding as
    /// [`MatMatPath::CoopMat`]. Needs [`tuning::coopmat2`], `k % 32 == 0` and a type in
    /// [`COOPMAT2_TYPES`]. On the H100 (driver 580.159.04) it runs at 35–62 TFLOP/s against
    /// 99–161 for [`MatMatPath::CoopMat`] (benches/RESULTS.md), so [`MatMatPath::best`]
    /// does not pick it.
    CoopMat2,
    /// `mul_mat_cm_i8.comp`: int8 cooperative matrices (16x16x32, int32 accumulation) on
    /// `x` quantized to Q8_1 (as [`quantize_q8_1`], in a tiled layout of
    /// `quantize_q8_1_tiles.comp`), each 32-block's scales applied to its exact int32
    /// product (ggml's `vec_dot_q4_0_q8_1` / `vec_dot_q8_0_q8_1` per pair), 128 x 128
    /// tiles, warp-specialized. Needs [`tuning::coopmat_int8`], `k % 32 == 0` and a type
    /// in [`COOPMAT_INT8_TYPES`]. Results carry the Q8_1 rounding of `x`. On the H100 it
    /// runs at 114-124 TFLOP/s against 148-159 for [`MatMatPath::CoopMat`]
    /// (benches/RESULTS.md), so [`MatMatPath::best`] does not pick it.
    CoopMatInt8,
}

/// The types [`MatMatPath::CoopMatInt8`] runs (`mul_mat_cm_i8.comp`'s variants).
pub const COOPMAT_INT8_TYPES: &[GgmlType] = &[GgmlType::Q4_0, GgmlType::Q8_0];

/// The types [`MatMatPath::CoopMat2`] has a decode for (`mul_mat_cm2.comp`'s variants).
pub const COOPMAT2_TYPES: &[GgmlType] = &[GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K];

impl MatMatPath {
    /// The fastest path for `m` on a device: [`MatMatPath::CoopMat`] where
    /// [`tuning::coopmat_subgroup_size`] allows it and `k % 32 == 0`, else
    /// [`MatMatPath::Scalar`]. [`MatMatPath::CoopMat2`] is never chosen: on the H100 it is
    /// slower (benches/RESULTS.md).
    pub fn best(caps: &vkml_hal::Capabilities, m: &QMatrix) -> MatMatPath {
        if tuning::coopmat_subgroup_size(caps).is_some() && m.k.is_multiple_of(32) {
            MatMatPath::CoopMat
        } else {
            MatMatPath::Scalar
        }
    }
}

/// Launch options of [`mat_mat_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatMatOptions {
    /// The kernel.
    pub path: MatMatPath,
    /// Add the product to `y` instead of overwriting it (a residual add folded into the
    /// producing kernel).
    pub accumulate: bool,
    /// Split-K for [`MatMatPath::CoopMat`]: how many workgroups share each output tile's
    /// `k` range (their partial products are added by a second kernel). `None` splits
    /// only grids of fewer than 128 tiles, up to about 128 workgroups with chunks of at
    /// least 1024 `k` (on the H100 a split of a 128-tile grid is slower, benches/RESULTS.md).
    /// A matrix held in several [`QPart`]s runs without a split (its outputs are written
    /// in place per part).
    pub split_k: Option<u32>,
}

impl MatMatOptions {
    /// `path`, overwriting `y`, automatic split-K.
    pub fn new(path: MatMatPath) -> Self {
        MatMatOptions { path, accumulate: false, split_k: None }
    }
}

/// Records the quantized mat-mat for prompts, `y[n, r] = sum_c m[r, c] * x[n, c]` for
/// `n < n_tok` (`x`: f32 `[n_tok, k]`, `y`: f32 `[n_tok, rows]`, row-major), on the
/// fastest path the device offers ([`MatMatPath::CoopMat`] where it applies, else
/// [`MatMatPath::Scalar`]). Weight blocks are decoded into shared memory once per tile and
/// reused by every token of the tile. Use [`mat_vec`] for a few tokens and this from
/// about 8 on.
///
/// # Errors
/// [`OpsError::Shape`] for buffers too small or a grid past the device's limits;
/// [`OpsError::UnsupportedType`]; HAL errors.
pub fn mat_mat(s: &mut Stream, m: &QMatrix, x: &vkml_hal::Buffer, n_tok: usize, y: &vkml_hal::Buffer) -> Result<()> {
    let path = MatMatPath::best(s.device().caps(), m);
    mat_mat_with(s, m, x, n_tok, y, MatMatOptions::new(path))
}

/// [`mat_mat`] with explicit [`MatMatOptions`].
///
/// # Errors
/// As [`mat_mat`]; [`OpsError::Shape`] when the path is [`MatMatPath::CoopMat`] and the
/// device lacks cooperative matrices (f16, 16x16x16, subgroups of 32) or `k % 32 != 0`,
/// or for a split-K of 0.
pub fn mat_mat_with(
    s: &mut Stream,
    m: &QMatrix,
    x: &vkml_hal::Buffer,
    n_tok: usize,
    y: &vkml_hal::Buffer,
    opts: MatMatOptions,
) -> Result<()> {
    let dev = s.device().clone();
    check_io("mat_mat", m, x, n_tok, y)?;
    let (_, tile_rows, tile_tokens) = mat_mat_kernel(dev.caps(), opts.path, m.ty, m.rows, n_tok);
    let options = match opts.path {
        MatMatPath::Scalar => PipelineOptions::default(),
        MatMatPath::CoopMat | MatMatPath::CoopMat2 | MatMatPath::CoopMatInt8 => {
            // The special paths' own needs first: (path, what it is, device check, what
            // the device needs, the types it has).
            let special = match opts.path {
                MatMatPath::CoopMat2 => Some((
                    "workgroup-scope",
                    tuning::coopmat2(dev.caps()),
                    "VK_NV_cooperative_matrix2 (workgroup scope, flexible dimensions, tensor addressing, block loads) and bufferDeviceAddress",
                    COOPMAT2_TYPES,
                )),
                MatMatPath::CoopMatInt8 => Some((
                    "int8",
                    tuning::coopmat_int8(dev.caps()),
                    "VK_KHR_cooperative_matrix with 16x16x32 s8 x s8 + s32 and 16x16x16 f16 x f16 + f32 subgroup shapes, int8 arithmetic and subgroups of 32",
                    COOPMAT_INT8_TYPES,
                )),
                _ => None,
            };
            if let Some((what, offered, needs, types)) = special {
                if !offered {
                    return Err(OpsError::Shape {
                        op: "mat_mat",
                        reason: format!("the {what} cooperative-matrix path needs {needs}; this device lacks them"),
                    });
                }
                if !m.k.is_multiple_of(32) || !types.contains(&m.ty) {
                    return Err(OpsError::Shape {
                        op: "mat_mat",
                        reason: format!(
                            "the {what} cooperative-matrix path needs k % 32 == 0 and one of {types:?}; got {:?} with k = {}",
                            m.ty, m.k
                        ),
                    });
                }
            }
            // Every kernel tiles subgroups of 32 (tuning::coopmat2 and coopmat_int8 imply it);
            // specialization constants per part's kernel, below.
            let Some(options) = tuning::coopmat_pipeline_options(dev.caps(), Vec::new()) else {
                return Err(OpsError::Shape {
                    op: "mat_mat",
                    reason: "the cooperative-matrix path needs VK_KHR_cooperative_matrix with a 16x16x16 f16 x f16 + f32 shape and subgroups of 32; this device has none".into(),
                });
            };
            if !m.k.is_multiple_of(32) {
                return Err(OpsError::Shape {
                    op: "mat_mat",
                    reason: format!("the cooperative-matrix path needs k % 32 == 0, k = {}", m.k),
                });
            }
            options
        }
    };
    if opts.split_k == Some(0) {
        return Err(OpsError::Shape { op: "mat_mat", reason: "split_k must be at least 1".into() });
    }
    if n_tok == 0 || m.rows == 0 {
        return Ok(());
    }
    let gx = m.rows.div_ceil(tile_rows) as u64;
    let gy = n_tok.div_ceil(tile_tokens) as u64;
    let lim = dev.caps().limits.max_workgroup_count;
    if gx > u64::from(lim[0]) || gy > u64::from(lim[1]) {
        return Err(OpsError::Shape { op: "mat_mat", reason: format!("{gx} x {gy} tiles exceed the device's grid") });
    }
    // y from row `row0` on, with the matrix's row stride: a part's outputs (QPart rows
    // start at offsets meeting the storage-buffer alignment).
    let y_from =
        |row0: usize, rows: usize| BufferArg::range(y, 4 * row0 as u64, (4 * ((n_tok - 1) * m.rows + rows)) as u64);
    // Split-K: each output tile's k range is shared by `splits` workgroups (chunks a
    // multiple of 256, so no block straddles two), so that a grid of few tiles still
    // keeps every multiprocessor's memory pipeline busy.
    let max_splits = (m.k / 1024).max(1) as u64;
    // (The scalar kernel has none; a matrix in several parts is large and runs without
    // one, each part's outputs written in place.)
    let want = if m.parts.len() > 1 || opts.path == MatMatPath::Scalar {
        1
    } else {
        opts.split_k.map_or_else(|| MAT_MAT_TARGET_GROUPS.div_ceil(gx * gy).min(max_splits), u64::from).max(1)
    };
    let k_chunk = (m.k as u64).div_ceil(want).next_multiple_of(256);
    let splits = (m.k as u64).div_ceil(k_chunk);
    if splits > u64::from(lim[2]) {
        return Err(OpsError::Shape { op: "mat_mat", reason: format!("split-K {splits} exceeds the device's grid") });
    }
    // The tensor-core kernels read x as f16 or Q8_1: converted once here, it is half the
    // bytes (or less) each of the rows / 128 workgroup columns re-reads from L2.
    let x16 = if opts.path == MatMatPath::Scalar {
        None
    } else if opts.path == MatMatPath::CoopMatInt8 {
        // Q8_1 in the kernel's tiled layout (quantize_q8_1_tiles.comp): per 128-token tile
        // and k-block, 4 KiB of quants; then the f16 scales, 256 bytes per tile and block.
        let n_pad = (gy as usize) * tile_tokens;
        let xq = dev.alloc((n_pad * m.k + n_pad * m.k / 16) as u64, MemoryKind::DeviceLocal)?;
        let qp = pipeline(&dev, "quantize_q8_1_tiles", Q8_1_WORKGROUP)?;
        let pairs = (n_pad / 2 * m.k / 32) as u64;
        let groups = grid(&dev, "mat_mat", pairs.div_ceil(u64::from(Q8_1_WORKGROUP)))?;
        s.dispatch(&qp, &[x.into(), (&xq).into()], &push_words(&[n_tok as u32, m.k as u32, n_pad as u32]), groups)?;
        Some(xq)
    } else {
        let n4 = (n_tok * m.k / 4) as u64;
        let x16 = dev.alloc(8 * n4, MemoryKind::DeviceLocal)?;
        let cvt = pipeline(&dev, "convert_f16", ELEMENTWISE_WORKGROUP)?;
        let groups = grid(&dev, "mat_mat", n4.div_ceil(u64::from(ELEMENTWISE_WORKGROUP)))?;
        s.dispatch(&cvt, &[x.into(), (&x16).into()], &push_words(&[n4 as u32]), groups)?;
        Some(x16)
    };
    let x_arg = x16.as_ref().unwrap_or(x);
    let out_len = (n_tok * m.rows) as u64;
    let partials = if splits > 1 { Some(dev.alloc(4 * splits * out_len, MemoryKind::DeviceLocal)?) } else { None };
    let accumulate = opts.accumulate && partials.is_none();
    for part in &m.parts {
        // Each part its own kernel choice and grid (one kernel but for a short last part).
        let (name, tile_rows, _) = mat_mat_kernel(dev.caps(), opts.path, m.ty, part.rows, n_tok);
        let options = if opts.path == MatMatPath::Scalar {
            options.clone()
        } else {
            PipelineOptions {
                spec_constants: tuning::mat_mat_spec_constants(dev.caps(), name, m.ty),
                ..options.clone()
            }
        };
        let p = dev.pipeline(&dev.kernel(&format!("{name}.{}", variant("mat_mat", m.ty)?))?, &options)?;
        let pc = push_words(&[
            0,
            m.row_bytes as u32,
            m.k as u32,
            part.rows as u32,
            n_tok as u32,
            u32::from(accumulate),
            k_chunk as u32,
            m.rows as u32,
        ]);
        let c_arg = partials.as_ref().map_or_else(|| y_from(part.row0, part.rows), Into::into);
        let groups = [part.rows.div_ceil(tile_rows) as u32, gy as u32, splits as u32];
        s.dispatch(&p, &[(&part.buffer).into(), x_arg.into(), c_arg], &pc, groups)?;
    }
    if let Some(part) = &partials {
        let red = pipeline(&dev, "reduce_partials", ELEMENTWISE_WORKGROUP)?;
        let groups = grid(&dev, "mat_mat", out_len.div_ceil(u64::from(ELEMENTWISE_WORKGROUP)))?;
        let pc = push_words(&[out_len as u32, splits as u32, u32::from(opts.accumulate)]);
        s.dispatch(&red, &[part.into(), y.into()], &pc, groups)?;
    }
    Ok(())
}
