//! Which device each layer of a model runs on: one device, or a layer split over several
//! (llama.cpp's `--split-mode layer`). The token embedding sits on the first device, the
//! output head on the last; the hidden state moves between devices where consecutive
//! layers sit on different ones ([`crate::tensor::ModelTensor::to_device`]).

use candle_core::backend::BackendDevice;

use crate::error::{model_err, Result};
use crate::storage::ModelStorage;

/// Devices in pipeline order and the device of each layer.
pub struct DeviceMap<S: ModelStorage> {
    devices: Vec<S::Device>,
    /// Index into `devices` of layer `i`; empty: every layer on `devices[0]`.
    layer: Vec<usize>,
}

impl<S: ModelStorage> Clone for DeviceMap<S> {
    fn clone(&self) -> Self {
        DeviceMap { devices: self.devices.clone(), layer: self.layer.clone() }
    }
}

impl<S: ModelStorage> std::fmt::Debug for DeviceMap<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceMap({} devices, layers {:?})", self.devices.len(), self.ranges())
    }
}

/// The device (index into `fractions`) of each of `n_layers` layers for a split in
/// proportion to `fractions` (any positive scale), as llama.cpp assigns layers
/// (`llama_model::load_tensors`): the output head counts as layer `n_layers`, and layer
/// `i` goes to the first device whose cumulative share exceeds `i / (n_layers + 1)`.
/// Every device with a positive share gets the layers of its share, rounded by that rule;
/// a zero share gets none.
///
/// # Errors
/// No fractions, a negative or non-finite one, or all zero.
pub fn split_layers(n_layers: usize, fractions: &[f64]) -> Result<Vec<usize>> {
    if fractions.is_empty() || fractions.iter().any(|f| !f.is_finite() || *f < 0.0) {
        return Err(model_err(format!("a layer split needs finite shares >= 0, one per device; got {fractions:?}")));
    }
    let sum: f64 = fractions.iter().sum();
    if sum <= 0.0 {
        return Err(model_err("a layer split needs at least one share above 0"));
    }
    let mut cum = Vec::with_capacity(fractions.len());
    let mut acc = 0.0;
    for f in fractions {
        acc += f / sum;
        cum.push(acc);
    }
    let last = fractions.len() - 1;
    Ok((0..n_layers)
        .map(|i| {
            let x = i as f64 / (n_layers + 1) as f64;
            cum.iter().position(|&c| c > x).unwrap_or(last)
        })
        .collect())
}

impl<S: ModelStorage> DeviceMap<S> {
    /// Every layer on `dev`.
    pub fn single(dev: &S::Device) -> Self {
        DeviceMap { devices: vec![dev.clone()], layer: Vec::new() }
    }

    /// Layer `i` on `devices[layer[i]]`; the embedding on `devices[0]`, the output head on
    /// the last device.
    ///
    /// # Errors
    /// No devices, one device given twice (open it twice for two logical devices), or an
    /// index past them.
    pub fn new(devices: Vec<S::Device>, layer: Vec<usize>) -> Result<Self> {
        if devices.is_empty() {
            return Err(model_err("a device map needs at least one device"));
        }
        for (i, d) in devices.iter().enumerate() {
            if let Some(j) = devices[..i].iter().position(|e| e.same_device(d)) {
                return Err(model_err(format!(
                    "devices {j} and {i} of a layer split are the same device (open it twice for two logical devices)"
                )));
            }
        }
        if let Some(bad) = layer.iter().find(|&&d| d >= devices.len()) {
            return Err(model_err(format!("layer placed on device {bad} of {}", devices.len())));
        }
        Ok(DeviceMap { devices, layer })
    }

    /// The devices, in pipeline order.
    pub fn devices(&self) -> &[S::Device] {
        &self.devices
    }

    /// The first device: token ids and the embedding.
    pub fn first(&self) -> &S::Device {
        &self.devices[0]
    }

    /// The last device: the output head and the logits.
    pub fn last(&self) -> &S::Device {
        &self.devices[self.devices.len() - 1]
    }

    /// Index (into [`DeviceMap::devices`]) of the device of layer `i`.
    pub fn index(&self, i: usize) -> usize {
        self.layer.get(i).copied().unwrap_or(0)
    }

    /// The device of layer `i`.
    pub fn device(&self, i: usize) -> &S::Device {
        &self.devices[self.index(i)]
    }

    /// Whether more than one device is in use.
    pub fn is_split(&self) -> bool {
        self.devices.len() > 1
    }

    /// The layers of each device as `start..end` ranges of layer indices, in device order
    /// (empty for a device without layers; a single-device map: one empty range, as it
    /// does not know the layer count).
    pub fn ranges(&self) -> Vec<std::ops::Range<usize>> {
        (0..self.devices.len())
            .map(|d| {
                let start = self.layer.iter().position(|&x| x == d).unwrap_or(0);
                let end = self.layer.iter().rposition(|&x| x == d).map_or(start, |e| e + 1);
                start..end
            })
            .collect()
    }

    /// One value per device of `make(device)`: what every device needs its own copy of
    /// (rope tables).
    ///
    /// # Errors
    /// `make`'s.
    pub fn per_device<T>(&self, make: impl Fn(&S::Device) -> Result<T>) -> Result<Vec<T>> {
        self.devices.iter().map(make).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::split_layers;

    #[test]
    fn split_follows_llama_cpp() {
        // 32 layers + the head over two equal devices: 17 layers on the first.
        let s = split_layers(32, &[1.0, 1.0]).unwrap();
        assert_eq!(s.iter().filter(|&&d| d == 0).count(), 17);
        assert!(s.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(split_layers(4, &[1.0, 1.0]).unwrap(), vec![0, 0, 0, 1]);
        // 3:1 puts 0.75 of (4 + 1) slots on the first: every layer; the head on the second.
        assert_eq!(split_layers(4, &[3.0, 1.0]).unwrap(), vec![0, 0, 0, 0]);
        assert_eq!(split_layers(3, &[0.0, 1.0]).unwrap(), vec![1, 1, 1]);
        assert_eq!(split_layers(3, &[1.0]).unwrap(), vec![0, 0, 0]);
        assert!(split_layers(3, &[]).is_err());
        assert!(split_layers(3, &[0.0, 0.0]).is_err());
        assert!(split_layers(3, &[-1.0, 2.0]).is_err());
        assert!(split_layers(3, &[f64::NAN, 2.0]).is_err());
    }
}
