//! The one error type of vkml-hal.

use ash::vk;

use crate::memory::MemoryKind;

/// Result alias for vkml-hal.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in vkml-hal, each with a message that says what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The Vulkan loader (libvulkan) could not be loaded.
    #[error(
        "no Vulkan loader: {0}. Install the Vulkan loader (Debian/Ubuntu: `apt-get install libvulkan1`) \
         and a driver: your GPU vendor's, or Mesa's lavapipe for the CPU (`apt-get install mesa-vulkan-drivers`)"
    )]
    NoLoader(String),
    /// The loader found no physical device with Vulkan 1.2 or later.
    #[error(
        "no Vulkan 1.2+ device found{detail}. Check that a GPU driver with Vulkan 1.2 support is installed \
         (`vulkaninfo --summary` lists what the loader sees), that VK_DRIVER_FILES / VK_ICD_FILENAMES do not \
         point at a missing driver, or install Mesa's lavapipe (`apt-get install mesa-vulkan-drivers`) to run on the CPU"
    )]
    NoDevice {
        /// Devices seen but unusable, with why, or empty.
        detail: String,
    },
    /// A device ordinal past the end of the device list.
    #[error("device ordinal {ordinal} is out of range: this system has {count} Vulkan device(s) (run `vkml info` to list them)")]
    BadOrdinal {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices there are.
        count: usize,
    },
    /// `VKML_DEVICE` (or a name query) matched no device.
    #[error("no Vulkan device matches {query:?}; available: {available}")]
    DeviceNotFound {
        /// The index or name asked for.
        query: String,
        /// The devices there are, as `index: name`.
        available: String,
    },
    /// The device exists but cannot run vkml.
    #[error("device `{device}` cannot be used: {reason}")]
    UnsupportedDevice {
        /// Device name.
        device: String,
        /// Why.
        reason: String,
    },
    /// A Vulkan layer that was asked for is not installed.
    #[error("Vulkan layer {layer} is not installed ({hint})")]
    MissingLayer {
        /// Layer name.
        layer: &'static str,
        /// What to install.
        hint: &'static str,
    },
    /// A kernel or operation needs a device feature the device lacks.
    #[error("{needed_by} needs {feature}, which device `{device}` does not support")]
    MissingFeature {
        /// The feature, in Vulkan's terms.
        feature: String,
        /// The kernel or operation that needs it.
        needed_by: String,
        /// Device name.
        device: String,
    },
    /// An allocation that cannot be satisfied.
    #[error(
        "out of {kind} memory: requested {requested} bytes; heap {heap} has {heap_size} bytes, \
         budget {budget} bytes, {usage} in use. Free tensors, use a smaller model or batch, or pick a device with more memory"
    )]
    OutOfMemory {
        /// Kind of memory asked for.
        kind: MemoryKind,
        /// Bytes requested.
        requested: u64,
        /// Heap index the memory comes from.
        heap: u32,
        /// Size of that heap in bytes.
        heap_size: u64,
        /// Budget of that heap in bytes (the heap size where VK_EXT_memory_budget is absent).
        budget: u64,
        /// Bytes of that heap in use by this process.
        usage: u64,
    },
    /// An access past the end of a buffer.
    #[error("range {offset}..{offset}+{len} is outside the {size}-byte buffer")]
    OutOfBounds {
        /// Byte offset of the access.
        offset: u64,
        /// Length of the access in bytes.
        len: u64,
        /// Buffer size in bytes.
        size: u64,
    },
    /// A dispatch or pipeline request that does not fit the kernel or the device.
    #[error("kernel `{kernel}`: {reason}")]
    InvalidDispatch {
        /// Kernel name.
        kernel: String,
        /// What is wrong.
        reason: String,
    },
    /// A kernel name that is neither built in nor registered.
    #[error("no kernel named `{0}` is built in or registered")]
    UnknownKernel(String),
    /// Compilation or reflection of a shader failed.
    #[error(transparent)]
    Shader(#[from] vkml_shaders::compile::CompileError),
    /// The device was lost (driver reset, GPU hang or fault).
    #[error("the Vulkan device was lost during {during} (GPU reset, hang or fault); results are undefined, recreate the device")]
    DeviceLost {
        /// The call that reported it.
        during: &'static str,
    },
    /// A wait did not complete in time.
    #[error("waited {seconds} s for GPU work to finish without completion (set VKML_WAIT_TIMEOUT_S to wait longer)")]
    Timeout {
        /// Seconds waited.
        seconds: u64,
    },
    /// The validation layer reported errors (only with validation enabled).
    #[error("Vulkan validation reported {} error(s):\n{}", .0.len(), .0.join("\n"))]
    Validation(Vec<String>),
    /// Any other failing Vulkan call.
    #[error("Vulkan call {call} failed: {result}")]
    Vulkan {
        /// The function that failed.
        call: &'static str,
        /// Its result code.
        result: vk::Result,
    },
}

impl Error {
    /// Maps a failing `VkResult` of `call` to an error, singling out device loss.
    pub(crate) fn vk(call: &'static str) -> impl Fn(vk::Result) -> Error {
        move |result| match result {
            vk::Result::ERROR_DEVICE_LOST => Error::DeviceLost { during: call },
            result => Error::Vulkan { call, result },
        }
    }
}
