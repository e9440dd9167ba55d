//! Device and lane policy: which home runs a model and in which lane its weights are stored.

use stapes_core::Lane;
use std::fmt;
use std::str::FromStr;

/// Where the user asked the model to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceRequest {
    /// CUDA when a device is usable, else the CPU.
    Auto,
    Cpu,
    Cuda(usize),
    Vulkan,
}

impl FromStr for DeviceRequest {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim().to_ascii_lowercase();
        match s.as_str() {
            "auto" => Ok(DeviceRequest::Auto),
            "cpu" => Ok(DeviceRequest::Cpu),
            "cuda" | "gpu" => Ok(DeviceRequest::Cuda(0)),
            "vulkan" => Ok(DeviceRequest::Vulkan),
            _ => match s.strip_prefix("cuda:") {
                Some(n) => n
                    .parse()
                    .map(DeviceRequest::Cuda)
                    .map_err(|_| format!("bad CUDA device index in `{s}`")),
                None => Err(format!(
                    "unknown device `{s}` (expected auto, cpu, cuda[:N] or vulkan)"
                )),
            },
        }
    }
}

/// The home a model actually runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Cuda(usize),
}

impl Device {
    pub fn is_gpu(self) -> bool {
        !matches!(self, Device::Cpu)
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// Lane request: `--lane` if given (and not `auto`), else `STAPES_AUDIO_LANE`, else the policy.
pub fn requested_lane(flag: Option<&str>) -> Result<Option<Lane>, String> {
    match flag.map(str::trim) {
        Some("auto") | None => match std::env::var("STAPES_AUDIO_LANE") {
            Ok(v) if !v.trim().is_empty() && v.trim() != "auto" => v
                .parse::<Lane>()
                .map(Some)
                .map_err(|e| format!("STAPES_AUDIO_LANE: {e}")),
            _ => Ok(None),
        },
        Some(s) => s.parse::<Lane>().map(Some),
    }
}

/// The policy of design.md §1: CPU → f32, a GPU → q8, unless pinned; f32 on a GPU is refused.
pub fn resolve_lane(device: Device, pinned: Option<Lane>) -> Result<Lane, String> {
    match (device, pinned) {
        (Device::Cpu, None) => Ok(Lane::F32),
        (Device::Cpu, Some(l)) => Ok(l),
        (Device::Cuda(_), None) => Ok(Lane::Q8),
        (Device::Cuda(_), Some(Lane::F32)) => {
            Err("lane f32 is CPU-only; on a GPU use --lane f16 (exact reference lane) or q8".into())
        }
        (Device::Cuda(_), Some(l)) => Ok(l),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_parsing() {
        assert_eq!(
            "cuda:1".parse::<DeviceRequest>(),
            Ok(DeviceRequest::Cuda(1))
        );
        assert_eq!("CPU".parse::<DeviceRequest>(), Ok(DeviceRequest::Cpu));
        assert!("cuda:x".parse::<DeviceRequest>().is_err());
        assert!("tpu".parse::<DeviceRequest>().is_err());
    }

    #[test]
    fn lane_policy() {
        assert_eq!(resolve_lane(Device::Cpu, None), Ok(Lane::F32));
        assert_eq!(resolve_lane(Device::Cuda(0), None), Ok(Lane::Q8));
        assert_eq!(
            resolve_lane(Device::Cuda(0), Some(Lane::F16)),
            Ok(Lane::F16)
        );
        assert!(resolve_lane(Device::Cuda(0), Some(Lane::F32)).is_err());
        assert_eq!(resolve_lane(Device::Cpu, Some(Lane::Q8)), Ok(Lane::Q8));
    }

    #[test]
    fn explicit_flag_beats_env() {
        assert_eq!(requested_lane(Some("16")), Ok(Some(Lane::F16)));
        assert!(requested_lane(Some("int4")).is_err());
    }
}
