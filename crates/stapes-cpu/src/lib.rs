//! stapes-cpu
