//! The pipeline cache on disk: `pipelines/<deviceUUID>-<driverVersion>.bin`.

use crate::caps::Capabilities;
use crate::error::{Error, Result};

use super::*;

impl Device {
    /// Bytes of pipeline-cache data loaded from disk when the device was opened.
    pub fn pipeline_cache_loaded_bytes(&self) -> usize {
        self.inner.pipeline_cache_loaded
    }

    /// Where the pipeline cache is persisted, if anywhere.
    pub fn pipeline_cache_path(&self) -> Option<&std::path::Path> {
        self.inner.pipeline_cache_path.as_deref()
    }

    /// Writes the pipeline cache to disk now (it is also written when the device drops).
    ///
    /// # Errors
    /// [`Error::Vulkan`] when the data cannot be read back from the driver; I/O errors are
    /// logged, not returned (the cache is an optimisation).
    pub fn save_pipeline_cache(&self) -> Result<()> {
        self.inner.save_pipeline_cache()
    }
}

impl DeviceInner {
    pub(super) fn save_pipeline_cache(&self) -> Result<()> {
        let Some(path) = &self.pipeline_cache_path else { return Ok(()) };
        // SAFETY: the cache is a live object of this device.
        let data = unsafe { self.raw.get_pipeline_cache_data(self.pipeline_cache) }
            .map_err(Error::vk("vkGetPipelineCacheData"))?;
        let write = || -> std::io::Result<()> {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let tmp = path.with_extension(format!("tmp{}", std::process::id()));
            std::fs::write(&tmp, &data)?;
            std::fs::rename(&tmp, path)
        };
        if let Err(e) = write() {
            tracing::warn!("could not save the pipeline cache to {}: {e}", path.display());
        }
        Ok(())
    }
}

/// Checks a pipeline-cache blob's header (Vulkan spec, "Pipeline Cache", table
/// "Layout for pipeline cache header version VK_PIPELINE_CACHE_HEADER_VERSION_ONE")
/// against the device before handing it to the driver.
pub(super) fn pipeline_cache_header_matches(data: &[u8], caps: &Capabilities) -> bool {
    if data.len() < 32 {
        return false;
    }
    let u32_at = |i: usize| u32::from_le_bytes([data[i], data[i + 1], data[i + 2], data[i + 3]]);
    u32_at(0) >= 32
        && u32_at(4) == 1
        && u32_at(8) == caps.vendor_id
        && u32_at(12) == caps.device_id
        && crate::caps::hex(&data[16..32]) == caps.pipeline_cache_uuid
}
