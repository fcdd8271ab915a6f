//! Device memory: VMA (vk-mem) pools for device-local, upload and readback memory,
//! buffers recycled by size class, and host transfers of any size.
//!
//! On a unified-memory device ([`crate::caps::MemoryCaps::uma`]) device-local buffers are
//! allocated host-visible and written and read in place; elsewhere transfers go through
//! staging buffers from the upload and readback pools, in chunks of at most
//! [`STAGING_CHUNK`] bytes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ash::vk;
use parking_lot::Mutex;
use serde::Serialize;
use vk_mem::Alloc;

use crate::device::DeviceInner;
use crate::error::{Error, Result};

/// Largest staging transfer in one copy, bytes.
pub const STAGING_CHUNK: u64 = 64 << 20;

/// Smallest buffer actually allocated, bytes (a 0-byte buffer is legal for vkml, not for Vulkan).
const MIN_CAPACITY: u64 = 256;

/// Buffers larger than this are freed on drop rather than cached.
const MAX_CACHED_BUFFER: u64 = 1 << 30;

/// What a buffer's memory is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryKind {
    /// Memory the GPU reads and writes at full speed; host-visible only on UMA devices.
    DeviceLocal,
    /// Host-visible memory the host writes sequentially and the GPU reads (staging,
    /// small parameter buffers).
    Upload,
    /// Host-visible, host-cached memory the GPU writes and the host reads.
    Readback,
}

impl std::fmt::Display for MemoryKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MemoryKind::DeviceLocal => "device-local",
            MemoryKind::Upload => "upload",
            MemoryKind::Readback => "readback",
        })
    }
}

impl MemoryKind {
    const ALL: [MemoryKind; 3] = [MemoryKind::DeviceLocal, MemoryKind::Upload, MemoryKind::Readback];
    fn index(self) -> usize {
        self as usize
    }
}

/// Memory statistics of a device (VMA's numbers plus the recycle cache).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MemoryStats {
    /// Live VMA allocations (buffers alive or cached for reuse).
    pub live_allocations: u64,
    /// Bytes in live allocations.
    pub allocation_bytes: u64,
    /// `VkDeviceMemory` blocks.
    pub blocks: u64,
    /// Bytes in those blocks.
    pub block_bytes: u64,
    /// Buffers held in the recycle cache.
    pub cached_buffers: u64,
    /// Bytes held in the recycle cache.
    pub cached_bytes: u64,
}

/// A buffer freed by its owner, kept for reuse.
pub(crate) struct RawBuffer {
    raw: vk::Buffer,
    allocation: vk_mem::Allocation,
    capacity: u64,
    mapped: *mut u8,
}

// SAFETY: a RawBuffer is only handles and a mapping pointer into VMA-owned memory; it
// carries no thread affinity, and the recycle cache that stores it is behind a Mutex.
unsafe impl Send for RawBuffer {}

/// How to set up a device's memory.
#[derive(Clone, Copy)]
pub(crate) struct MemoryConfig<'a> {
    /// Vulkan API version the device was created with.
    pub api_version: u32,
    /// VK_EXT_memory_budget is enabled.
    pub budget_ext: bool,
    /// Device-local buffers are allocated host-visible and mapped (UMA, not forced to stage).
    pub host_visible_device_local: bool,
    /// Queue families that share buffers (CONCURRENT when more than one).
    pub sharing_families: &'a [u32],
    /// Bytes of freed buffers kept for reuse.
    pub cache_limit: u64,
    /// Most bytes allocated from each heap (VMA's `pHeapSizeLimit`); `None`: no limit.
    pub heap_limit: Option<u64>,
}

pub(crate) struct Memory {
    // Field order is drop order: pools before the allocator they came from.
    pools: Vec<vk_mem::AllocatorPool>,
    pub(crate) allocator: Arc<vk_mem::Allocator>,
    heap_of: [u32; 3],
    mapped: [bool; 3],
    cache: Mutex<Cache>,
    cache_limit: u64,
}

#[derive(Default)]
struct Cache {
    free: HashMap<(MemoryKind, u64), Vec<RawBuffer>>,
    bytes: u64,
    count: u64,
}

/// Rounds a request up to its size class: quarter steps between powers of two
/// (at most 25 % waste), at least [`MIN_CAPACITY`]; multiples of 1 MiB above 256 MiB.
pub(crate) fn size_class(size: u64) -> u64 {
    let size = size.max(MIN_CAPACITY);
    if size > 256 << 20 {
        return size.div_ceil(1 << 20) * (1 << 20);
    }
    let pow = size.next_power_of_two();
    let base = pow / 2;
    let step = base / 4;
    base + (size - base).div_ceil(step) * step
}

impl Memory {
    pub(crate) fn new(
        instance: &ash::Instance,
        device: &ash::Device,
        physical: vk::PhysicalDevice,
        cfg: &MemoryConfig<'_>,
    ) -> Result<Memory> {
        let MemoryConfig {
            api_version,
            budget_ext,
            host_visible_device_local,
            sharing_families,
            cache_limit,
            heap_limit,
        } = *cfg;
        // SAFETY: `physical` is a valid handle of `instance`.
        let heaps = unsafe { instance.get_physical_device_memory_properties(physical) }.memory_heap_count as usize;
        let limits: Vec<vk::DeviceSize> = heap_limit.map(|l| vec![l; heaps]).unwrap_or_default();
        let mut info = vk_mem::AllocatorCreateInfo::new(instance, device, physical);
        info.heap_size_limits = &limits;
        info.vulkan_api_version = api_version.min(vk::API_VERSION_1_3);
        if budget_ext {
            info.flags |= vk_mem::AllocatorCreateFlags::EXT_MEMORY_BUDGET;
        }
        // SAFETY: instance, device and physical device are valid and outlive the allocator
        // (DeviceInner drops Memory before destroying the device).
        let allocator = Arc::new(unsafe { vk_mem::Allocator::new(info) }.map_err(Error::vk("vmaCreateAllocator"))?);
        let mut pools = Vec::new();
        let mut heap_of = [0; 3];
        let mut mapped = [false; 3];
        // SAFETY: the allocator is live; get_memory_properties returns its cached copy.
        let mem_props = unsafe { *allocator.get_memory_properties() };
        for kind in MemoryKind::ALL {
            let probe = buffer_info(1 << 16, sharing_families);
            let ainfo = alloc_info(kind, host_visible_device_local);
            // SAFETY: the allocator is live and the create infos are well formed.
            let type_index = unsafe { allocator.find_memory_type_index_for_buffer_info(&probe, &ainfo) }
                .map_err(Error::vk("vmaFindMemoryTypeIndexForBufferInfo"))?;
            let pool = allocator
                .create_pool(&vk_mem::PoolCreateInfo { memory_type_index: type_index, ..Default::default() })
                .map_err(Error::vk("vmaCreatePool"))?;
            heap_of[kind.index()] = mem_props.memory_types[type_index as usize].heap_index;
            mapped[kind.index()] = ainfo.flags.contains(vk_mem::AllocationCreateFlags::MAPPED);
            pools.push(pool);
        }
        Ok(Memory { pools, allocator, heap_of, mapped, cache: Mutex::new(Cache::default()), cache_limit })
    }

    pub(crate) fn is_mapped(&self, kind: MemoryKind) -> bool {
        self.mapped[kind.index()]
    }

    fn heap_state(&self, kind: MemoryKind) -> (u32, u64, u64, u64) {
        let heap = self.heap_of[kind.index()];
        // SAFETY: the allocator is live.
        let size = unsafe { self.allocator.get_memory_properties() }.memory_heaps[heap as usize].size;
        let (budget, usage) = self
            .allocator
            .get_heap_budgets()
            .ok()
            .and_then(|b| b.get(heap as usize).map(|b| (b.budget, b.usage)))
            .unwrap_or((size, 0));
        (heap, size, budget, usage)
    }

    fn oom(&self, kind: MemoryKind, requested: u64) -> Error {
        let (heap, heap_size, budget, usage) = self.heap_state(kind);
        Error::OutOfMemory { kind, requested, heap, heap_size, budget, usage }
    }

    /// Takes a cached buffer of `capacity` bytes, or allocates one.
    pub(crate) fn take(
        &self,
        kind: MemoryKind,
        capacity: u64,
        max_buffer_size: u64,
        sharing_families: &[u32],
        host_visible_device_local: bool,
    ) -> Result<RawBuffer> {
        if let Some(b) = self.cache.lock().pop(kind, capacity) {
            return Ok(b);
        }
        let (_, heap_size, _, _) = self.heap_state(kind);
        if capacity > heap_size || capacity > max_buffer_size {
            return Err(self.oom(kind, capacity));
        }
        let binfo = buffer_info(capacity, sharing_families);
        let ainfo = alloc_info(kind, host_visible_device_local);
        let pool = &self.pools[kind.index()];
        let create = || {
            // SAFETY: the pool and allocator are live; the create infos are well formed
            // and the size is within the heap and maxBufferSize (checked above).
            unsafe { pool.create_buffer(&binfo, &ainfo) }
        };
        let (raw, allocation) = match create() {
            Ok(v) => v,
            Err(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY) => {
                // Give cached buffers back and try once more before failing.
                self.release_cached();
                create().map_err(|_| self.oom(kind, capacity))?
            }
            Err(e) => return Err(Error::vk("vmaCreateBuffer")(e)),
        };
        let mapped = if self.is_mapped(kind) {
            self.allocator.get_allocation_info(&allocation).mapped_data.cast::<u8>()
        } else {
            std::ptr::null_mut()
        };
        Ok(RawBuffer { raw, allocation, capacity, mapped })
    }

    /// Returns a buffer for reuse, or frees it when the cache is full.
    pub(crate) fn give_back(&self, kind: MemoryKind, b: RawBuffer) {
        if b.capacity <= MAX_CACHED_BUFFER {
            let mut cache = self.cache.lock();
            if cache.bytes + b.capacity <= self.cache_limit {
                cache.bytes += b.capacity;
                cache.count += 1;
                cache.free.entry((kind, b.capacity)).or_default().push(b);
                return;
            }
        }
        self.destroy(b);
    }

    fn destroy(&self, mut b: RawBuffer) {
        // SAFETY: the buffer was created by this allocator, no GPU work that uses it is
        // pending (buffers are returned only after their last submission completed), and
        // nothing else refers to it.
        unsafe { self.allocator.destroy_buffer(b.raw, &mut b.allocation) };
    }

    /// Frees every cached buffer.
    pub(crate) fn release_cached(&self) {
        let drained: Vec<RawBuffer> = {
            let mut cache = self.cache.lock();
            cache.bytes = 0;
            cache.count = 0;
            cache.free.drain().flat_map(|(_, v)| v).collect()
        };
        for b in drained {
            self.destroy(b);
        }
    }

    pub(crate) fn stats(&self) -> MemoryStats {
        let (cached_buffers, cached_bytes) = {
            let c = self.cache.lock();
            (c.count, c.bytes)
        };
        let total = self.allocator.calculate_statistics().map(|s| s.total.statistics).ok();
        MemoryStats {
            live_allocations: total.as_ref().map_or(0, |t| u64::from(t.allocationCount)),
            allocation_bytes: total.as_ref().map_or(0, |t| t.allocationBytes),
            blocks: total.as_ref().map_or(0, |t| u64::from(t.blockCount)),
            block_bytes: total.as_ref().map_or(0, |t| t.blockBytes),
            cached_buffers,
            cached_bytes,
        }
    }
}

impl Cache {
    fn pop(&mut self, kind: MemoryKind, capacity: u64) -> Option<RawBuffer> {
        let b = self.free.get_mut(&(kind, capacity))?.pop()?;
        self.bytes -= b.capacity;
        self.count -= 1;
        Some(b)
    }
}

fn buffer_info(size: u64, families: &[u32]) -> vk::BufferCreateInfo<'_> {
    let info = vk::BufferCreateInfo::default().size(size).usage(
        vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST,
    );
    if families.len() > 1 {
        info.sharing_mode(vk::SharingMode::CONCURRENT).queue_family_indices(families)
    } else {
        info.sharing_mode(vk::SharingMode::EXCLUSIVE)
    }
}

fn alloc_info(kind: MemoryKind, host_visible_device_local: bool) -> vk_mem::AllocationCreateInfo {
    use vk_mem::AllocationCreateFlags as F;
    match kind {
        MemoryKind::DeviceLocal if host_visible_device_local => vk_mem::AllocationCreateInfo {
            usage: vk_mem::MemoryUsage::AutoPreferDevice,
            flags: F::HOST_ACCESS_RANDOM | F::MAPPED,
            required_flags: vk::MemoryPropertyFlags::DEVICE_LOCAL | vk::MemoryPropertyFlags::HOST_VISIBLE,
            ..Default::default()
        },
        MemoryKind::DeviceLocal => vk_mem::AllocationCreateInfo {
            usage: vk_mem::MemoryUsage::AutoPreferDevice,
            required_flags: vk::MemoryPropertyFlags::DEVICE_LOCAL,
            ..Default::default()
        },
        MemoryKind::Upload => vk_mem::AllocationCreateInfo {
            usage: vk_mem::MemoryUsage::AutoPreferHost,
            flags: F::HOST_ACCESS_SEQUENTIAL_WRITE | F::MAPPED,
            ..Default::default()
        },
        MemoryKind::Readback => vk_mem::AllocationCreateInfo {
            usage: vk_mem::MemoryUsage::AutoPreferHost,
            flags: F::HOST_ACCESS_RANDOM | F::MAPPED,
            preferred_flags: vk::MemoryPropertyFlags::HOST_CACHED,
            ..Default::default()
        },
    }
}

static NEXT_BUFFER_ID: AtomicU64 = AtomicU64::new(1);

/// A GPU buffer. Cheap to clone (reference counted); the memory goes back to the
/// device's recycle cache when the last clone drops and no submitted work uses it.
///
/// Sizes are in bytes. A buffer may be 0 bytes long.
#[derive(Clone)]
pub struct Buffer {
    pub(crate) inner: Arc<BufferInner>,
}

pub(crate) struct BufferInner {
    pub(crate) device: Arc<DeviceInner>,
    raw: Option<RawBuffer>,
    pub(crate) handle: vk::Buffer,
    pub(crate) size: u64,
    pub(crate) capacity: u64,
    pub(crate) kind: MemoryKind,
    pub(crate) id: u64,
    /// Compute-timeline value of the last submission that used this buffer.
    pub(crate) last_use: AtomicU64,
    host_lock: Mutex<()>,
}

// SAFETY: the only non-thread-safe field is the mapping pointer inside RawBuffer. The
// memory behind it is owned by this buffer's VMA allocation; host access through it
// happens only in `write`/`read`, under `host_lock` and after waiting for GPU work that
// uses the buffer, so no two threads touch the bytes at once. Everything else is
// immutable after creation or atomic.
unsafe impl Send for BufferInner {}
// SAFETY: as above.
unsafe impl Sync for BufferInner {}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer")
            .field("id", &self.inner.id)
            .field("size", &self.inner.size)
            .field("kind", &self.inner.kind)
            .finish()
    }
}

impl Drop for BufferInner {
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take() {
            // Every submission that used the buffer holds a clone until it completes, so
            // the last clone drops only after the GPU is done with it.
            self.device.memory.give_back(self.kind, raw);
        }
    }
}

impl Buffer {
    pub(crate) fn new(device: &Arc<DeviceInner>, size: u64, kind: MemoryKind) -> Result<Buffer> {
        let capacity = size_class(size);
        let raw = device.memory.take(
            kind,
            capacity,
            device.max_buffer_size,
            &device.sharing_families,
            device.host_visible_device_local,
        )?;
        Ok(Buffer {
            inner: Arc::new(BufferInner {
                device: device.clone(),
                handle: raw.raw,
                raw: Some(raw),
                size,
                capacity,
                kind,
                id: NEXT_BUFFER_ID.fetch_add(1, Ordering::Relaxed),
                last_use: AtomicU64::new(0),
                host_lock: Mutex::new(()),
            }),
        })
    }

    /// Size in bytes, as requested.
    pub fn size(&self) -> u64 {
        self.inner.size
    }

    /// Bytes actually allocated (the size class).
    pub fn capacity(&self) -> u64 {
        self.inner.capacity
    }

    /// The kind of memory.
    pub fn kind(&self) -> MemoryKind {
        self.inner.kind
    }

    /// A process-unique id (used for hazard tracking).
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The raw Vulkan handle, for interop. Valid while this `Buffer` (or a clone) lives.
    pub fn handle(&self) -> vk::Buffer {
        self.inner.handle
    }

    fn mapped(&self) -> Option<*mut u8> {
        let p = self.inner.raw.as_ref()?.mapped;
        (!p.is_null()).then_some(p)
    }

    fn check_range(&self, offset: u64, len: u64) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.inner.size => Ok(()),
            _ => Err(Error::OutOfBounds { offset, len, size: self.inner.size }),
        }
    }

    /// Copies `data` into the buffer at byte `offset`, after any submitted GPU work that
    /// uses the buffer has finished. Returns when the data is in the buffer.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when the range exceeds the buffer; memory or device errors
    /// from the staging path.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.check_range(offset, data.len() as u64)?;
        if data.is_empty() {
            return Ok(());
        }
        let dev = &self.inner.device;
        dev.wait_compute_value(self.inner.last_use.load(Ordering::Acquire))?;
        let _guard = self.inner.host_lock.lock();
        if let Some(ptr) = self.mapped() {
            // SAFETY: `ptr` maps the whole allocation (capacity >= size >= offset + len,
            // checked above); no GPU work uses the buffer (waited above) and host access
            // is serialised by host_lock, so nothing else touches these bytes.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr.add(offset as usize), data.len()) };
            let alloc = &self.inner.raw.as_ref().expect("live buffer").allocation;
            dev.memory
                .allocator
                .flush_allocation(alloc, offset, data.len() as u64)
                .map_err(Error::vk("vmaFlushAllocation"))?;
            return Ok(());
        }
        let mut done = 0u64;
        while done < data.len() as u64 {
            let n = (data.len() as u64 - done).min(STAGING_CHUNK);
            let staging = Buffer::new(dev, n, MemoryKind::Upload)?;
            staging.write(0, &data[done as usize..(done + n) as usize])?;
            dev.transfer_copy(&staging, 0, self, offset + done, n)?;
            done += n;
        }
        Ok(())
    }

    /// Copies bytes from byte `offset` into `out`, after submitted GPU work that uses the
    /// buffer has finished.
    ///
    /// # Errors
    /// As [`Buffer::write`].
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        self.check_range(offset, out.len() as u64)?;
        if out.is_empty() {
            return Ok(());
        }
        let dev = &self.inner.device;
        dev.wait_compute_value(self.inner.last_use.load(Ordering::Acquire))?;
        let _guard = self.inner.host_lock.lock();
        if let Some(ptr) = self.mapped() {
            let alloc = &self.inner.raw.as_ref().expect("live buffer").allocation;
            dev.memory
                .allocator
                .invalidate_allocation(alloc, offset, out.len() as u64)
                .map_err(Error::vk("vmaInvalidateAllocation"))?;
            // SAFETY: as in `write`: in range, no GPU work pending, host access serialised.
            unsafe { std::ptr::copy_nonoverlapping(ptr.add(offset as usize), out.as_mut_ptr(), out.len()) };
            return Ok(());
        }
        let mut done = 0u64;
        while done < out.len() as u64 {
            let n = (out.len() as u64 - done).min(STAGING_CHUNK);
            let staging = Buffer::new(dev, n, MemoryKind::Readback)?;
            dev.transfer_copy(self, offset + done, &staging, 0, n)?;
            staging.read(0, &mut out[done as usize..(done + n) as usize])?;
            done += n;
        }
        Ok(())
    }

    /// Reads the whole buffer as a vector of `T` (`size` must be a multiple of
    /// `size_of::<T>()`).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when the size is not a multiple of the element size; as
    /// [`Buffer::read`] otherwise.
    pub fn to_vec<T: bytemuck::Pod>(&self) -> Result<Vec<T>> {
        let elem = std::mem::size_of::<T>() as u64;
        if elem == 0 || !self.inner.size.is_multiple_of(elem) {
            return Err(Error::OutOfBounds { offset: 0, len: self.inner.size, size: self.inner.size });
        }
        let mut v = vec![T::zeroed(); (self.inner.size / elem) as usize];
        self.read(0, bytemuck::cast_slice_mut(&mut v))?;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_bound_waste() {
        assert_eq!(size_class(0), MIN_CAPACITY);
        assert_eq!(size_class(1), MIN_CAPACITY);
        assert_eq!(size_class(256), 256);
        assert_eq!(size_class(257), 320);
        assert_eq!(size_class(1024), 1024);
        assert_eq!(size_class(1025), 1280);
        for s in [300u64, 1000, 4097, 65_537, 1 << 20, (1 << 20) + 1, 100_000_000, (256 << 20) + 5] {
            let c = size_class(s);
            assert!(c >= s, "{s} -> {c}");
            assert!(c - s <= s / 4 + MIN_CAPACITY, "{s} -> {c} wastes too much");
            assert_eq!(size_class(c), c, "classes are fixed points");
        }
    }
}
