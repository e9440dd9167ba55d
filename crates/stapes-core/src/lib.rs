//! The op contract every home implements, the lanes, host tensors and the scalar reference.
//!
//! Model code is written once over [`Backend`]; [`reference::ReferenceBackend`] is the
//! specification every other home is tested against.

pub mod backend;
pub mod counters;
pub mod error;
pub mod lane;
pub mod reference;
pub mod select;
pub mod shapes;
pub mod tensor;
pub mod tolerance;
pub mod transducer;

pub use backend::{
    Activation, AttnParams, Backend, Conv1dParams, Conv2dParams, DeviceTensor, LinearFusion,
    NormRef, StepParams,
};
pub use counters::Counters;
pub use error::{Error, Result};
pub use lane::{Lane, Q8Block, Q8_BLOCK};
pub use tensor::{HostTensor, WeightData, WeightView};
