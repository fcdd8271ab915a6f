//! vkml-hal: the only vkml crate that calls Vulkan (through ash 0.38 and vk-mem 0.5).
//!
//! - [`Instance`]: the loader, validation layers (`VKML_VALIDATION=1`), adapter
//!   enumeration and device selection ([`DeviceSelector`], `VKML_DEVICE`).
//! - [`Capabilities`]: what a device can do, probed once; kernel choice reads only this.
//! - [`Device`]: logical device, compute queue (plus a transfer queue where one exists),
//!   timeline semaphores, VMA memory pools, pipeline cache, kernel registry.
//! - [`Buffer`]: GPU memory, recycled by size class, readable and writable at any size.
//! - [`Kernel`], [`Pipeline`]: SPIR-V with reflected interface; pipelines with
//!   specialization constants and required subgroup sizes.
//! - [`Stream`], [`Recording`], [`Submission`]: recording with automatic hazard
//!   barriers, timeline submission, replay.
//! - [`shader`]: GLSL / HLSL / SPIR-V frontends for run-time kernels.
//!
//! Every `unsafe` Vulkan call in vkml lives in this crate, with the invariant it relies on.

pub mod caps;
pub mod device;
pub mod error;
pub mod instance;
pub mod memory;
pub mod pipeline;
pub mod shader;
pub mod stream;

pub use caps::Capabilities;
pub use device::{Device, DeviceOptions, KernelTime, PipelineStatistic, QueueKind, LEAKED_DEVICES};
pub use error::{Error, Result};
pub use instance::{Adapter, DeviceSelector, Instance, InstanceOptions};
pub use memory::{Buffer, MemoryKind, MemoryStats};
pub use pipeline::{Kernel, Pipeline, PipelineOptions};
pub use stream::{BufferArg, Recording, Stream, StreamStats, Submission};
pub use vkml_shaders::compile::{Access, TargetEnv};
