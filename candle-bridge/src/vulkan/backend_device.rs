//! `impl BackendDevice for VulkanDevice`: candle's device trait (creation, uploads,
//! random fills, seeding, synchronization).

use std::sync::Arc;

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::{CpuStorage, DType, DeviceLocation, Shape};
use vkml_hal::{Device, DeviceOptions, DeviceSelector};

use super::{cerr, CResult, VulkanDevice, VulkanStorage};

impl BackendDevice for VulkanDevice {
    type Storage = VulkanStorage;

    /// Opens the Vulkan device with enumeration index `ordinal` (as `vkml info` lists).
    fn new(ordinal: usize) -> CResult<Self> {
        let dev = Device::open(&DeviceSelector::Ordinal(ordinal), DeviceOptions::default()).map_err(cerr)?;
        VulkanDevice::from_device(&dev, ordinal).map_err(cerr)
    }

    /// Candle's `DeviceLocation` is a closed enum (Cpu, Cuda, Metal) with no Vulkan
    /// variant; this reports the ordinal as `Cuda { gpu_id }`, the variant for a discrete
    /// GPU index. Use [`VulkanDevice::hal`] for the device's name and capabilities.
    fn location(&self) -> DeviceLocation {
        DeviceLocation::Cuda { gpu_id: self.inner.ordinal }
    }

    fn same_device(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    fn zeros_impl(&self, shape: &Shape, dtype: DType) -> CResult<VulkanStorage> {
        let n = shape.elem_count();
        let buffer = self.alloc(n, dtype)?;
        let bytes = buffer.size();
        self.with_stream(|s| s.fill(&buffer, 0, bytes & !3, 0).map_err(cerr))?;
        Ok(self.storage(buffer, dtype, n))
    }

    unsafe fn alloc_uninit(&self, shape: &Shape, dtype: DType) -> CResult<VulkanStorage> {
        let n = shape.elem_count();
        Ok(self.storage(self.alloc(n, dtype)?, dtype, n))
    }

    fn storage_from_slice<T: candle_core::WithDType>(&self, data: &[T]) -> CResult<VulkanStorage> {
        self.storage_from_cpu_storage(&T::to_cpu_storage(data))
    }

    fn storage_from_cpu_storage(&self, c: &CpuStorage) -> CResult<VulkanStorage> {
        fn b<T: bytemuck::Pod>(v: &[T]) -> &[u8] {
            bytemuck::cast_slice(v)
        }
        if let CpuStorage::F8E4M3(v) = c {
            let bytes: Vec<u8> = v.iter().map(|x| x.to_bits()).collect();
            return self.upload_bytes(&bytes, DType::F8E4M3, v.len());
        }
        let (bytes, len) = match c {
            CpuStorage::U8(v) => (b(v), v.len()),
            CpuStorage::U32(v) => (b(v), v.len()),
            CpuStorage::I16(v) => (b(v), v.len()),
            CpuStorage::I32(v) => (b(v), v.len()),
            CpuStorage::I64(v) => (b(v), v.len()),
            CpuStorage::BF16(v) => (b(v), v.len()),
            CpuStorage::F16(v) => (b(v), v.len()),
            CpuStorage::F32(v) => (b(v), v.len()),
            CpuStorage::F64(v) => (b(v), v.len()),
            other => {
                return Err(candle_core::Error::UnsupportedDTypeForOp(other.dtype(), "vulkan storage_from_cpu_storage"))
            }
        };
        self.upload_bytes(bytes, c.dtype(), len)
    }

    fn storage_from_cpu_storage_owned(&self, c: CpuStorage) -> CResult<VulkanStorage> {
        self.storage_from_cpu_storage(&c)
    }

    fn rand_uniform(&self, shape: &Shape, dtype: DType, lo: f64, hi: f64) -> CResult<VulkanStorage> {
        self.rand(shape, dtype, vkml_ops::rand::Distribution::Uniform { lo, hi })
    }

    fn rand_normal(&self, shape: &Shape, dtype: DType, mean: f64, std: f64) -> CResult<VulkanStorage> {
        self.rand(shape, dtype, vkml_ops::rand::Distribution::Normal { mean, std })
    }

    /// Sets the seed and restarts its sequence: fills after `set_seed(s)` repeat those
    /// after any earlier `set_seed(s)`.
    fn set_seed(&self, seed: u64) -> CResult<()> {
        *self.inner.seed.lock() = (seed, 0);
        Ok(())
    }

    fn get_current_seed(&self) -> CResult<u64> {
        Ok(self.inner.seed.lock().0)
    }

    fn synchronize(&self) -> CResult<()> {
        self.refuse_while_replaying("a synchronize")?;
        self.run_hops()?;
        self.inner.stream.lock().finish_and_wait().map_err(|e| self.named_error(e))?;
        self.check_status()
    }
}
