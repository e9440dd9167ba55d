//! NeMo's `AudioToMelSpectrogramPreprocessor` as Parakeet and Canary configure it.
