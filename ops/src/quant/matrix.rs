//! [`QMatrix`]: a quantized weight matrix in device memory (in parts where it exceeds one
//! binding), and the ops that read it whole: dequantize and get_rows.

use super::*;

/// A quantized (or f32/f16/bf16) weight matrix in device-local memory.
///
/// A matrix larger than one storage-buffer binding (`maxStorageBufferRange`: 128 MiB on
/// lavapipe and many phone GPUs, 4 GiB on desktop ones) is held as several parts of whole
/// rows, each in its own buffer ([`QMatrix::parts`]); every op here runs one dispatch per
/// part and writes the part's rows of its output in place.
#[derive(Debug, Clone)]
pub struct QMatrix {
    pub(super) parts: Vec<QPart>,
    pub(super) ty: GgmlType,
    pub(super) rows: usize,
    pub(super) k: usize,
    pub(super) row_bytes: u64,
    /// One u32, zero between dispatches: the count of finished workgroups of a mat-vec with
    /// the post-norm epilogue ([`super::mat_vec_norm_add`]), which its last one resets;
    /// made (and zeroed) by the first such mat-vec, so that other matrices cost nothing.
    pub(super) done_count: std::sync::OnceLock<vkml_hal::Buffer>,
    /// [`super::SLOT_COUNTS`] u32, zero between dispatches: the counts of the expert
    /// down's workgroups per token and row group where the last of them takes the weighted
    /// sums ([`super::WeightedSlots::slot_rows`]); made by the first such mat-vec.
    pub(super) slot_counts: std::sync::OnceLock<vkml_hal::Buffer>,
}

/// Rows `row0 .. row0 + rows` of a [`QMatrix`] in one buffer (raw blocks, row `i` of the
/// part at byte `i * row_bytes`).
#[derive(Debug, Clone)]
pub struct QPart {
    pub(super) buffer: vkml_hal::Buffer,
    pub(super) row0: usize,
    pub(super) rows: usize,
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
fn rows_per_part(dev: &Device, op: &'static str, ty: GgmlType, row_bytes: u64, max_part_bytes: u64) -> Result<usize> {
    let limits = &dev.caps().limits;
    let mut bytes = max_part_bytes.min(limits.max_storage_buffer_range).min(u64::from(u32::MAX)) & !3;
    if ty == GgmlType::MXFP4 {
        // (its last group may hold up to 15 blocks more than the rows have)
        bytes = bytes.saturating_sub(mxfp4_layout::GROUP_BYTES as u64);
    }
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

/// Bytes of a row of `k` values of `ty`, checked for `op`: a type with kernels and a
/// positive whole number of blocks.
fn row_bytes(op: &'static str, ty: GgmlType, k: usize) -> Result<u64> {
    type_kernels(op, ty)?;
    let bs = ty.block_size();
    if k == 0 || !k.is_multiple_of(bs) {
        return Err(OpsError::Shape {
            op,
            reason: format!("row length {k} is not a positive multiple of the {ty:?} block size {bs}"),
        });
    }
    Ok((k / bs * ty.type_size()) as u64)
}

/// Device bytes of a part of `rows` rows of `row_bytes` bytes of `ty`: padded to whole
/// 32-bit words (the kernels read `uint[]`); MXFP4 in its device layout, whole groups of
/// 16 blocks ([`mxfp4_layout`]).
pub(super) fn part_bytes(ty: GgmlType, rows: usize, row_bytes: u64) -> u64 {
    let bytes = rows as u64 * row_bytes;
    if ty == GgmlType::MXFP4 {
        return mxfp4_layout::device_bytes((bytes / mxfp4_layout::BLOCK_BYTES as u64) as usize) as u64;
    }
    bytes.div_ceil(4) * 4
}

/// Device buffers for `rows` rows of `row_bytes` bytes of `ty` in parts of at most
/// `per_part` rows (at least one part, each of [`part_bytes`]).
fn alloc_parts(dev: &Device, ty: GgmlType, rows: usize, row_bytes: u64, per_part: usize) -> Result<Vec<QPart>> {
    let mut parts = Vec::with_capacity(rows.div_ceil(per_part).max(1));
    let mut row0 = 0;
    loop {
        let n = (rows - row0).min(per_part);
        let buffer = dev.alloc(part_bytes(ty, n, row_bytes).max(4), MemoryKind::DeviceLocal)?;
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

    /// Device memory for `rows x k` elements of type `ty` in parts as [`QMatrix::upload`]
    /// makes them, its blocks unwritten: what [`super::quantize`] fills.
    ///
    /// # Errors
    /// As [`QMatrix::upload`] for the type and shape; HAL errors from allocation.
    pub fn alloc(dev: &Device, ty: GgmlType, rows: usize, k: usize) -> Result<QMatrix> {
        let row_bytes = row_bytes("QMatrix::alloc", ty, k)?;
        let per_part = rows_per_part(dev, "QMatrix::alloc", ty, row_bytes, u64::MAX)?;
        let parts = alloc_parts(dev, ty, rows, row_bytes, per_part)?;
        Ok(QMatrix::from_parts(parts, ty, rows, k, row_bytes))
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
        let row_bytes = row_bytes("QMatrix::upload", ty, k)?;
        let want = row_bytes.checked_mul(rows as u64);
        if want != Some(bytes.len() as u64) {
            return Err(OpsError::Shape {
                op: "QMatrix::upload",
                reason: format!("{rows} rows of {k} {ty:?} elements are {want:?} bytes, got {}", bytes.len()),
            });
        }
        let per_part = rows_per_part(dev, "QMatrix::upload", ty, row_bytes, max_part_bytes)?;
        let parts = alloc_parts(dev, ty, rows, row_bytes, per_part)?;
        for part in &parts {
            let at = (part.row0 as u64 * row_bytes) as usize;
            let blocks = &bytes[at..at + (part.rows as u64 * row_bytes) as usize];
            if ty == GgmlType::MXFP4 {
                mxfp4_layout::write(&part.buffer, blocks)?;
            } else {
                part.buffer.write(0, blocks)?;
            }
        }
        Ok(QMatrix::from_parts(parts, ty, rows, k, row_bytes))
    }

    /// Uploads a GGUF tensor as a matrix of rows of `dims[0]` elements: `[k, rows]`; 1-D
    /// tensors are one row; more dims stack their matrices' rows, outermost last (a 3-D
    /// `ffn_*_exps` tensor `[k, rows, n_expert]` is `[n_expert · rows, k]`, expert `e`'s
    /// rows from `e · rows`, as ggml lays it out).
    ///
    /// # Errors
    /// As [`QMatrix::upload`]; [`OpsError::Shape`] for a tensor without dims.
    pub fn from_gguf(dev: &Device, info: &vkml_quant::gguf::TensorInfo, bytes: &[u8]) -> Result<QMatrix> {
        let (k, rows) = match info.dims.as_slice() {
            [k, rest @ ..] => (*k, rest.iter().product::<u64>()),
            [] => {
                return Err(OpsError::Shape {
                    op: "QMatrix::from_gguf",
                    reason: format!("tensor `{}` has no dims; a matrix is [k, rows, ...]", info.name),
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

    /// The raw blocks of every row, in order (`rows * row_bytes` bytes, the GGUF layout),
    /// read back from the device. Each part's read waits for the submission that last used
    /// it; work recorded but not yet submitted is not waited for (submit it first). MXFP4
    /// comes back from its device layout with negative zeros as zeros ([`mxfp4_layout`]).
    ///
    /// # Errors
    /// HAL errors of the reads (device lost).
    pub fn read_blocks(&self) -> Result<Vec<u8>> {
        let rb = self.row_bytes as usize;
        let mut out = vec![0u8; self.rows * rb];
        for part in &self.parts {
            let at = part.row0 * rb;
            let dst = &mut out[at..at + part.rows * rb];
            if self.ty == GgmlType::MXFP4 {
                let mut dev = vec![0u8; part_bytes(self.ty, part.rows, self.row_bytes) as usize];
                part.buffer.read(0, &mut dev)?;
                mxfp4_layout::from_device(&dev, dst);
            } else {
                part.buffer.read(0, dst)?;
            }
        }
        Ok(out)
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
        let per_part = rows_per_part(&dev, "concat_rows", first.ty, rb, u64::MAX)?;
        let out = alloc_parts(&dev, first.ty, rows, rb, per_part)?;
        // Every source part's rows, in order, into the destination parts they fall in.
        let mut at = 0; // destination row
        for src in parts.iter().flat_map(|p| &p.parts) {
            let mut done = 0;
            while done < src.rows {
                let dst = &out[at / per_part];
                let n = (src.rows - done).min(dst.rows - (at - dst.row0));
                if first.ty == GgmlType::MXFP4 {
                    // (blocks move between groups: a kernel, not a byte copy)
                    let b = rb / mxfp4_layout::BLOCK_BYTES as u64;
                    let (from, to) = (done as u64 * b, (at - dst.row0) as u64 * b);
                    mxfp4_layout::copy_blocks(s, &src.buffer, from, &dst.buffer, to, n as u64 * b)?;
                } else {
                    s.copy(&src.buffer, done as u64 * rb, &dst.buffer, (at - dst.row0) as u64 * rb, n as u64 * rb)?;
                }
                done += n;
                at += n;
            }
        }
        Ok(QMatrix::from_parts(out, first.ty, rows, first.k, rb))
    }

    /// A matrix over `parts`, its workgroup counts not yet made.
    fn from_parts(parts: Vec<QPart>, ty: GgmlType, rows: usize, k: usize, row_bytes: u64) -> QMatrix {
        QMatrix {
            parts,
            ty,
            rows,
            k,
            row_bytes,
            done_count: std::sync::OnceLock::new(),
            slot_counts: std::sync::OnceLock::new(),
        }
    }
}

/// Checks that `x` holds `n` f32 rows of `m.k` and `y` holds `n` rows of `m.rows`.
pub(super) fn check_io(
    op: &'static str,
    m: &QMatrix,
    x: &vkml_hal::Buffer,
    n: usize,
    y: &vkml_hal::Buffer,
) -> Result<()> {
    check_io_rows(op, m, m.rows, x, n, y)
}

/// As [`check_io`] for an output of `out_rows` rows per input row.
pub(super) fn check_io_rows(
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
    let p = pipeline(&dev, type_kernels("dequantize", m.ty)?.dequant, ELEMENTWISE_WORKGROUP)?;
    // Per part, in chunks whose f32 output fits one binding too (it is larger than the blocks).
    let chunk = rows_per_part(&dev, "dequantize", GgmlType::F32, 4 * m.k as u64, u64::MAX)?;
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

/// Parts of a matrix that one `get_rows` dispatch binds (`get_rows_parts.comp`).
pub const GET_ROWS_PARTS: usize = 4;

/// Records the embedding lookup `out[i, :] = dequantize(m[ids[i], :])` for `i < n_ids`
/// (`ids`: u32 `[n_ids]`; `out`: f32 `[n_ids * k]`). Ids past the last row give rows of NaN.
/// One dispatch (`get_rows.comp`; `get_rows_parts.comp` for a matrix of up to
/// [`GET_ROWS_PARTS`] parts where the device binds 6 storage buffers, else one per part).
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
    get_rows_scaled(s, m, ids, n_ids, out, 1.0)
}

/// [`get_rows`] with each row multiplied by `scale` in the same pass (Gemma's embedding
/// scale `sqrt(n_embd)`, llama.cpp's `inp_scaled`): `out[r, :] = dequant(m[ids[r], :]) *
/// scale`, the product rounded once in f32.
///
/// # Errors
/// As [`get_rows`].
pub fn get_rows_scaled(
    s: &mut Stream,
    m: &QMatrix,
    ids: &vkml_hal::Buffer,
    n_ids: usize,
    out: &vkml_hal::Buffer,
    scale: f32,
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
    // A table in several parts: one dispatch per GET_ROWS_PARTS of them where the device
    // binds that many storage buffers, else one per part.
    let kernels = type_kernels("get_rows", m.ty)?;
    let per_dispatch =
        if m.parts.len() > 1 && dev.caps().limits.max_storage_buffers_per_stage >= 2 + GET_ROWS_PARTS as u32 {
            GET_ROWS_PARTS
        } else {
            1
        };
    let name = if per_dispatch > 1 { kernels.get_rows_parts } else { kernels.get_rows };
    let p = pipeline(&dev, name, ELEMENTWISE_WORKGROUP)?;
    let gx = (m.k as u64).div_ceil(u64::from(ELEMENTWISE_WORKGROUP));
    let max_y = u64::from(dev.caps().limits.max_workgroup_count[1]);
    let gy = (n_ids as u64).min(max_y);
    let gz = (n_ids as u64).div_ceil(gy);
    if gz > u64::from(dev.caps().limits.max_workgroup_count[2]) {
        return Err(OpsError::Shape { op: "get_rows", reason: format!("{n_ids} ids exceed the device's grid") });
    }
    // Each dispatch writes the ids its parts hold; the last one also NaN for ids past the
    // table.
    let groups = m.parts.chunks(per_dispatch);
    let n_groups = groups.len();
    for (i, group) in groups.enumerate() {
        let last = u32::from(i + 1 == n_groups);
        let at = |j: usize| &group[j.min(group.len() - 1)];
        let end = |j: usize| (at(j).row0 + at(j).rows) as u32;
        let pc = push_words(&[
            m.row_bytes as u32,
            m.k as u32,
            n_ids as u32,
            group[0].row0 as u32,
            end(0),
            end(1),
            end(2),
            end(3),
            last,
            scale.to_bits(),
        ]);
        let mut args: Vec<BufferArg<'_>> = vec![(&group[0].buffer).into(), ids.into(), out.into()];
        if per_dispatch > 1 {
            args.extend((1..GET_ROWS_PARTS).map(|j| BufferArg::from(&at(j).buffer)));
        }
        s.dispatch(&p, &args, &pc, [gx as u32, gy as u32, gz as u32])?;
    }
    Ok(())
}
