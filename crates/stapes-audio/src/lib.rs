//! stapes-audio
