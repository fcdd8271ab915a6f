//! The blocks every architecture is wired from: [`Embedding`], [`RmsNorm`],
//! [`Attention`], [`FeedForward`] or [`MoeFeedForward`], [`OutputHead`], each loaded from GGUF tensors by
//! llama.cpp's names through [`Weights`] and run on any [`ModelStorage`].

mod attention;
mod embedding;
mod feed_forward;
mod moe;
mod norm;
mod output;

pub use attention::{Attention, AttentionSpec, QkvLayout};
pub use embedding::Embedding;
pub use feed_forward::{FeedForward, GateUpLayout};
pub use moe::{GateUpExperts, MoeFeedForward};
pub use norm::RmsNorm;
pub use output::OutputHead;

use candle_core::backend::BackendDevice;
use vkml_candle::front::Tensor;
use vkml_quant::gguf::{GgufFile, TensorInfo};

use crate::error::{model_err, Result};
use crate::storage::{ModelStorage, WeightFormat};

/// Weight matrices that one product computes as one, `[Σ rows, k]`: stacked into one
/// matrix where they share a GGML type (one kernel run), else kept apart (llama.cpp's
/// Q4_K_M, for one, stores `attn_v` in another type than `attn_q` and `attn_k`).
#[derive(Debug)]
pub enum Stacked<S: ModelStorage> {
    /// One matrix of the parts' rows in order.
    One(S::QWeight),
    /// The parts as they are.
    Parts(Vec<S::QWeight>),
}

impl<S: ModelStorage> Stacked<S>
where
    S::Device: BackendDevice<Storage = S>,
{
    /// Stacks `parts` where their types agree.
    ///
    /// # Errors
    /// Device errors of the stacking copy.
    pub fn new(dev: &S::Device, parts: Vec<S::QWeight>) -> Result<Self> {
        let ty = S::qweight_type(&parts[0]);
        if parts.iter().all(|p| S::qweight_type(p) == ty) {
            let refs: Vec<&S::QWeight> = parts.iter().collect();
            Ok(Stacked::One(S::qweight_concat(dev, &refs)?))
        } else {
            Ok(Stacked::Parts(parts))
        }
    }
}

/// Loads a GGUF file's tensors onto a device, checking each shape, and reports progress in
/// bytes of weight matrices uploaded.
pub struct Weights<'a, S: ModelStorage> {
    /// The file.
    pub file: &'a GgufFile,
    /// The device.
    pub dev: &'a S::Device,
    /// How weight matrices are kept.
    pub format: WeightFormat,
    done: u64,
    total: u64,
    progress: &'a mut dyn FnMut(u64, u64),
}

impl<S: ModelStorage> std::fmt::Debug for Weights<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Weights({} of {} bytes)", self.done, self.total)
    }
}

impl<'a, S: ModelStorage> Weights<'a, S>
where
    S::Device: BackendDevice<Storage = S>,
{
    /// A loader of `file` onto `dev`, keeping matrices as `format` says where the backend
    /// offers a choice, calling `progress(done, total)` in bytes.
    pub fn new(
        file: &'a GgufFile,
        dev: &'a S::Device,
        format: WeightFormat,
        progress: &'a mut dyn FnMut(u64, u64),
    ) -> Self {
        let total = file.tensors().iter().map(|t| t.n_bytes).sum();
        Weights { file, dev, format, done: 0, total, progress }
    }

    /// Whether the file has tensor `name`.
    pub fn has(&self, name: &str) -> bool {
        self.file.header().tensor(name).is_some()
    }

    /// Weight matrix `name` of `rows` rows of `k` values (GGUF dims `[k, rows]`), kept in
    /// its GGML type.
    ///
    /// # Errors
    /// [`crate::Error::Model`] for a missing or misshapen tensor; the backend's errors for
    /// types without kernels and device errors.
    pub fn matrix(&mut self, name: &str, rows: usize, k: usize) -> Result<S::QWeight> {
        let (info, bytes) =
            self.file.tensor_data_by_name(name).map_err(|_| model_err(format!("tensor {name} is missing")))?;
        if info.row_len() as usize != k || info.n_rows() as usize != rows || info.dims.len() > 2 {
            return Err(model_err(format!("tensor {name} has shape {:?}, expected [{k}, {rows}]", info.dims)));
        }
        let w = S::qweight(self.dev, info, bytes, self.format)?;
        self.done += info.n_bytes;
        (self.progress)(self.done, self.total);
        Ok(w)
    }

    /// The 3-D expert tensor `name` (GGUF dims `[k, rows, n_expert]`) as one
    /// `[n_expert · rows, k]` matrix, experts outermost.
    ///
    /// # Errors
    /// [`crate::Error::Model`] for a missing tensor or one of another shape (naming both);
    /// the backend's errors.
    pub fn experts(&mut self, name: &str, n_expert: usize, rows: usize, k: usize) -> Result<S::QWeight> {
        let (info, bytes) = expert_tensor(self.file, name, n_expert, rows, k)?;
        let w = S::qweight(self.dev, info, bytes, self.format)?;
        self.done += info.n_bytes;
        (self.progress)(self.done, self.total);
        Ok(w)
    }

    /// The 3-D expert tensors `gate` and `up` (GGUF dims `[k, rows, n_expert]` each) as
    /// one `[n_expert · 2 rows, k]` matrix, each expert's gate rows then its up rows, where
    /// their types agree; else each as [`Weights::experts`] loads it.
    ///
    /// # Errors
    /// As [`Weights::experts`].
    pub fn experts_gate_up(
        &mut self,
        gate: &str,
        up: &str,
        n_expert: usize,
        rows: usize,
        k: usize,
    ) -> Result<GateUpExperts<S>> {
        let file = self.file;
        let load = |name: &str| expert_tensor(file, name, n_expert, rows, k);
        let ((gi, gb), (ui, ub)) = (load(gate)?, load(up)?);
        if gi.ty != ui.ty {
            return Ok(GateUpExperts::Split(
                self.experts(gate, n_expert, rows, k)?,
                self.experts(up, n_expert, rows, k)?,
            ));
        }
        let eb = gb.len() / n_expert.max(1);
        let mut bytes = Vec::with_capacity(gb.len() + ub.len());
        for e in 0..n_expert {
            bytes.extend_from_slice(&gb[e * eb..(e + 1) * eb]);
            bytes.extend_from_slice(&ub[e * eb..(e + 1) * eb]);
        }
        let info = TensorInfo {
            name: format!("{gate} + {up}"),
            dims: vec![k as u64, 2 * rows as u64, n_expert as u64],
            n_elements: gi.n_elements + ui.n_elements,
            n_bytes: gi.n_bytes + ui.n_bytes,
            ..gi.clone()
        };
        let w = S::qweight(self.dev, &info, &bytes, self.format)?;
        self.done += info.n_bytes;
        (self.progress)(self.done, self.total);
        Ok(GateUpExperts::Stacked(w))
    }

    /// [`Weights::matrix`] of a tensor loaded a second time (onto another device), its
    /// bytes added to the progress total.
    ///
    /// # Errors
    /// As [`Weights::matrix`].
    pub fn matrix_again(&mut self, name: &str, rows: usize, k: usize) -> Result<S::QWeight> {
        self.total += self.file.header().tensor(name).map_or(0, |t| t.n_bytes);
        self.matrix(name, rows, k)
    }

    /// The `n` values of tensor `name`, dequantized to f32 on the host.
    ///
    /// # Errors
    /// [`crate::Error::Model`] for a missing tensor or one of another length.
    pub fn values(&self, name: &str, n: usize) -> Result<Vec<f32>> {
        let v = self.file.dequantize(name).map_err(|_| model_err(format!("tensor {name} is missing")))?;
        if v.len() != n {
            return Err(model_err(format!("tensor {name} has {} elements, expected {n}", v.len())));
        }
        Ok(v)
    }

    /// Tensor `name` of `n` values as an `f32[n]` tensor on the device.
    ///
    /// # Errors
    /// As [`Weights::values`], and device errors.
    pub fn vector(&self, name: &str, n: usize) -> Result<Tensor<S>> {
        Ok(Tensor::from_slice(&self.values(name, n)?, n, self.dev)?)
    }
}

/// The 3-D expert tensor `name` of `file` and its bytes, checked to be `[k, rows, n_expert]`.
///
/// # Errors
/// [`crate::Error::Model`] for a missing tensor or one of another shape (naming both).
fn expert_tensor<'f>(
    file: &'f GgufFile,
    name: &str,
    n_expert: usize,
    rows: usize,
    k: usize,
) -> Result<(&'f TensorInfo, &'f [u8])> {
    let (info, bytes) = file.tensor_data_by_name(name).map_err(|_| model_err(format!("tensor {name} is missing")))?;
    if info.dims != [k as u64, rows as u64, n_expert as u64] {
        return Err(model_err(format!(
            "tensor {name} has shape {:?}, expected [{k}, {rows}, {n_expert}] ({n_expert} experts)",
            info.dims
        )));
    }
    Ok((info, bytes))
}
