//! Candle bridge (issue 5 onward).
