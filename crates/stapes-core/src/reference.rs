//! Scalar f32 reference backend (the specification). Being written.
