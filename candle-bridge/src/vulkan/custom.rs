//! Users' own kernels on tensors (SCOPE.md: "users register their own GLSL/HLSL/SPIR-V and
//! run them on tensors"): [`VulkanDevice::register_kernel`] and [`CustomKernel::run`], a
//! dispatch on the device's stream like any op's, so hazard tracking (from the kernel's
//! reflected read/write access) and recording ahead hold for it too.

use candle_core::{DType, Shape};
use vkml_hal::shader::ShaderFrontend;
use vkml_hal::{BufferArg, Pipeline, PipelineOptions};

use super::{cerr, CResult, VulkanDevice, VulkanStorage};
use crate::front::Tensor;

/// A kernel registered on a [`VulkanDevice`] ([`VulkanDevice::register_kernel`]), to run on
/// tensors ([`CustomKernel::run`]). Its interface follows vkml's kernel ABI: storage
/// buffers in set 0, bindings dense from 0 (the inputs first, then the outputs), at most
/// one push-constant block; workgroup sizes in the source or as specialization constants
/// ([`PipelineOptions`]).
#[derive(Debug, Clone)]
pub struct CustomKernel {
    pipeline: std::sync::Arc<Pipeline>,
    device: VulkanDevice,
}

impl VulkanDevice {
    /// Compiles `source` with `frontend` (`vkml_hal::shader::{Glsl, Hlsl, SpirvPassthrough}`),
    /// reflects its interface, registers it as `name` and builds its pipeline with `opts`.
    ///
    /// # Errors
    /// The compiler's message (file, line), an interface outside the kernel ABI, a
    /// pipeline the device cannot build (shared memory, subgroup size), naming the kernel.
    pub fn register_kernel(
        &self,
        name: &str,
        frontend: &dyn ShaderFrontend,
        source: &[u8],
        opts: &PipelineOptions,
    ) -> CResult<CustomKernel> {
        let kernel = self.hal().register_kernel(name, frontend, source).map_err(cerr)?;
        let pipeline = self.hal().pipeline(&kernel, opts).map_err(cerr)?;
        Ok(CustomKernel { pipeline, device: self.clone() })
    }
}

impl CustomKernel {
    /// Records one dispatch of `grid` workgroups on the device's stream: bindings
    /// `0..inputs.len()` are `inputs` (each packed, row-major from element 0: a strided
    /// view is copied first), the next ones fresh tensors of `outputs`' shapes and dtypes
    /// (contents as the kernel leaves them), and `push` the push-constant bytes. Returns
    /// the outputs; nothing waits (reads of them submit, as for any op).
    ///
    /// # Errors
    /// A binding count other than `inputs + outputs`, an input binding the kernel may
    /// write (declare it `readonly`, or take it as an output: inputs can be shared), push
    /// constants of another size than the kernel's block, a tensor of another device,
    /// kernel and device errors.
    pub fn run(
        &self,
        inputs: &[&Tensor<VulkanStorage>],
        outputs: &[(Shape, DType)],
        push: &[u8],
        grid: [u32; 3],
    ) -> CResult<Vec<Tensor<VulkanStorage>>> {
        use candle_core::backend::{BackendDevice, BackendStorage};
        let iface = self.pipeline.kernel().interface();
        let name = self.pipeline.kernel().name();
        let n = inputs.len() + outputs.len();
        if iface.bindings.len() != n {
            candle_core::bail!(
                "kernel `{name}` has {} bindings, not {} inputs + {} outputs",
                iface.bindings.len(),
                inputs.len(),
                outputs.len()
            )
        }
        if let Some(b) = iface.bindings[..inputs.len()].iter().find(|b| b.access.writes()) {
            candle_core::bail!(
                "kernel `{name}` may write binding {}, an input: declare it readonly, or take it as an output",
                b.binding
            )
        }
        if push.len() != iface.push_constant_size as usize {
            candle_core::bail!(
                "kernel `{name}` takes {} bytes of push constants, got {}",
                iface.push_constant_size,
                push.len()
            )
        }
        let mut packed = Vec::with_capacity(inputs.len());
        for (i, t) in inputs.iter().enumerate() {
            if !t.storage().device().same_device(&self.device) {
                candle_core::bail!("kernel `{name}`: input {i} is on {:?}, not {:?}", t.storage().device(), self.device)
            }
            packed.push(t.storage().packed(t.layout())?);
        }
        let outs: Vec<Tensor<VulkanStorage>> = outputs
            .iter()
            .map(|(shape, dt)| {
                let len = shape.elem_count();
                let buffer = self.device.alloc(len, *dt)?;
                Ok(Tensor::from_storage(self.device.storage(buffer, *dt, len), shape.clone()))
            })
            .collect::<CResult<_>>()?;
        let mut bindings: Vec<BufferArg<'_>> = packed.iter().map(|p| p.buffer().into()).collect();
        bindings.extend(outs.iter().map(|o| BufferArg::from(o.storage().buffer())));
        self.device.with_stream(|s| s.dispatch(&self.pipeline, &bindings, push, grid).map_err(cerr))?;
        Ok(outs)
    }
}
