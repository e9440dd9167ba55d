//! stapes
