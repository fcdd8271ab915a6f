//! Launch helpers shared by every op module: pipelines with a workgroup-size
//! specialization constant, push-constant words, and grids split to device limits.

use std::sync::Arc;

use vkml_hal::{Device, Pipeline, PipelineOptions};

use crate::error::{OpsError, Result};

/// The pipeline of kernel `name` with specialization constant 0 (workgroup size) set to
/// `workgroup`.
pub(crate) fn pipeline(dev: &Device, name: &str, workgroup: u32) -> Result<Arc<Pipeline>> {
    pipeline_spec(dev, name, workgroup, &[])
}

/// As [`pipeline`], with further specialization constants `(id, value)` (ids from 1).
pub(crate) fn pipeline_spec(dev: &Device, name: &str, workgroup: u32, spec: &[(u32, u32)]) -> Result<Arc<Pipeline>> {
    let k = dev.kernel(name)?;
    let mut spec_constants = vec![(0, workgroup)];
    spec_constants.extend_from_slice(spec);
    Ok(dev.pipeline(&k, &PipelineOptions { spec_constants, ..Default::default() })?)
}

/// Push constants from 32-bit words (little-endian, the kernels' `uint`/`float` fields).
pub(crate) fn push_words(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// The end of a binding that a kernel reads as 32-bit words: `end` bytes rounded up to a
/// whole word, checked against `buffer`.
///
/// # Errors
/// [`OpsError::Shape`] (naming `op` and `what`) when the rounded end is past the buffer.
pub(crate) fn word_end(op: &'static str, what: &str, buffer: &vkml_hal::Buffer, end: u64) -> Result<u64> {
    let end = end.next_multiple_of(4);
    if end > buffer.size() {
        return Err(OpsError::Shape {
            op,
            reason: format!(
                "{what} is read as 32-bit words up to byte {end}, past its buffer of {} bytes (make its size a \
                 multiple of 4)",
                buffer.size()
            ),
        });
    }
    Ok(end)
}

/// Splits `groups` workgroups over x and y so that neither exceeds the device limit.
///
/// # Errors
/// [`OpsError::Shape`] (naming `op`) when even the y dimension would exceed the limit.
pub(crate) fn grid(dev: &Device, op: &'static str, groups: u64) -> Result<[u32; 3]> {
    let max_x = u64::from(dev.caps().limits.max_workgroup_count[0]);
    let max_y = u64::from(dev.caps().limits.max_workgroup_count[1]);
    let x = groups.min(max_x).max(1);
    let y = groups.div_ceil(x);
    if y > max_y {
        return Err(OpsError::Shape { op, reason: format!("{groups} workgroups exceed the device's grid") });
    }
    Ok([x as u32, y as u32, 1])
}

/// The grid of a kernel with `gx` workgroups along x per row and one row per workgroup
/// along y, `rows` rows split over y and z where they exceed the device's y limit (the
/// kernel reads its row as `gl_GlobalInvocationID.y + gl_GlobalInvocationID.z *
/// gl_NumWorkGroups.y`). `rows` is at least 1.
pub(crate) fn rows_grid(dev: &Device, gx: u32, rows: usize) -> [u32; 3] {
    let gy = rows.clamp(1, dev.caps().limits.max_workgroup_count[1] as usize);
    [gx, gy as u32, rows.div_ceil(gy) as u32]
}
