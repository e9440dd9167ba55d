//! stapes-models
