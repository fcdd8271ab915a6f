//! Tensor ops (issue 4 onward).
