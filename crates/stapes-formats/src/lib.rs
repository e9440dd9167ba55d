//! stapes-formats
