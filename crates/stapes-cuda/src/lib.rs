//! stapes-cuda
