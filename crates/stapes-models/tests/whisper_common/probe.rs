//! A backend that forwards every op the `Backend` trait requires to another one and calls a hook
//! around each: where the time goes (whisper_bench's profile), who is inside an op at once
//! (whisper_batch's turns). The trait's provided ops compose these, so they pass the hook too.
#![allow(dead_code)]

use stapes_core::*;

/// Called around every forwarded op; `enter`'s value goes back to `exit`.
pub trait Hook: Send + Sync {
    type Token;
    fn enter(&self, op: &'static str) -> Self::Token;
    fn exit(&self, op: &'static str, token: Self::Token);
}

pub struct Probe<B, H> {
    pub inner: B,
    pub hook: H,
    /// What `captures_chains` answers (the inner backend's, unless a test says otherwise).
    pub chains: bool,
}

impl<B: Backend, H: Hook> Probe<B, H> {
    pub fn new(inner: B, hook: H) -> Self {
        let chains = inner.captures_chains();
        Self {
            inner,
            hook,
            chains,
        }
    }

    fn around<R>(&self, op: &'static str, f: impl FnOnce() -> R) -> R {
        let t = self.hook.enter(op);
        let r = f();
        self.hook.exit(op, t);
        r
    }
}

type R<T> = Result<T>;

impl<B: Backend, H: Hook> Backend for Probe<B, H> {
    type Tensor = B::Tensor;
    type Weight = B::Weight;
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn supports_lane(&self, lane: Lane) -> bool {
        self.inner.supports_lane(lane)
    }
    fn counters(&self) -> &Counters {
        self.inner.counters()
    }
    fn captures_chains(&self) -> bool {
        self.chains
    }
    fn upload(&self, t: &HostTensor) -> R<B::Tensor> {
        self.around("upload", || self.inner.upload(t))
    }
    fn download(&self, t: &B::Tensor) -> R<HostTensor> {
        self.around("download", || self.inner.download(t))
    }
    fn weight(&self, w: &HostTensor, lane: Lane) -> R<B::Weight> {
        self.inner.weight(w, lane)
    }
    fn weight_shape(&self, w: &B::Weight) -> (usize, usize) {
        self.inner.weight_shape(w)
    }
    fn reshape(&self, t: &B::Tensor, s: &[usize]) -> R<B::Tensor> {
        self.around("reshape", || self.inner.reshape(t, s))
    }
    fn transpose_last2(&self, t: &B::Tensor) -> R<B::Tensor> {
        self.around("transpose", || self.inner.transpose_last2(t))
    }
    fn slice(&self, t: &B::Tensor, d: usize, s: usize, l: usize) -> R<B::Tensor> {
        self.around("slice", || self.inner.slice(t, d, s, l))
    }
    fn concat(&self, ts: &[&B::Tensor], d: usize) -> R<B::Tensor> {
        self.around("concat", || self.inner.concat(ts, d))
    }
    fn write_rows(&self, dst: &mut B::Tensor, src: &B::Tensor, o: usize) -> R<()> {
        self.around("write_rows", || self.inner.write_rows(dst, src, o))
    }
    fn gather_batch(&self, t: &B::Tensor, i: &[usize]) -> R<B::Tensor> {
        self.around("gather_batch", || self.inner.gather_batch(t, i))
    }
    fn gather_rows(&self, t: &B::Tensor, i: &[u32]) -> R<B::Tensor> {
        self.around("gather_rows", || self.inner.gather_rows(t, i))
    }
    fn linear(&self, x: &B::Tensor, w: &B::Weight, b: Option<&B::Tensor>) -> R<B::Tensor> {
        let m: usize = x.shape().iter().rev().skip(1).product();
        let op = if m > 64 {
            "linear (M>64)"
        } else {
            "linear (M≤64)"
        };
        self.around(op, || self.inner.linear(x, w, b))
    }
    fn matmul(&self, a: &B::Tensor, b: &B::Tensor, t: bool) -> R<B::Tensor> {
        self.around("matmul", || self.inner.matmul(a, b, t))
    }
    fn conv1d(
        &self,
        x: &B::Tensor,
        w: &B::Weight,
        b: Option<&B::Tensor>,
        p: Conv1dParams,
    ) -> R<B::Tensor> {
        self.around("conv1d", || self.inner.conv1d(x, w, b, p))
    }
    fn depthwise_conv1d(
        &self,
        x: &B::Tensor,
        w: &B::Tensor,
        b: Option<&B::Tensor>,
        s: usize,
        p: usize,
    ) -> R<B::Tensor> {
        self.around("dwconv", || self.inner.depthwise_conv1d(x, w, b, s, p))
    }
    fn conv2d(
        &self,
        x: &B::Tensor,
        w: &B::Tensor,
        b: Option<&B::Tensor>,
        p: Conv2dParams,
    ) -> R<B::Tensor> {
        self.around("conv2d", || self.inner.conv2d(x, w, b, p))
    }
    fn attention(
        &self,
        q: &B::Tensor,
        k: &B::Tensor,
        v: &B::Tensor,
        p: &AttnParams,
    ) -> R<B::Tensor> {
        let op = if q.shape()[1] > 64 {
            "attention (Tq>64)"
        } else {
            "attention (Tq≤64)"
        };
        self.around(op, || self.inner.attention(q, k, v, p))
    }
    fn attention_probs(&self, q: &B::Tensor, k: &B::Tensor, p: &AttnParams) -> R<B::Tensor> {
        self.around("attention_probs", || self.inner.attention_probs(q, k, p))
    }
    fn layer_norm(
        &self,
        x: &B::Tensor,
        g: &B::Tensor,
        b: Option<&B::Tensor>,
        e: f32,
    ) -> R<B::Tensor> {
        self.around("layer_norm", || self.inner.layer_norm(x, g, b, e))
    }
    fn rms_norm(&self, x: &B::Tensor, g: &B::Tensor, e: f32) -> R<B::Tensor> {
        self.around("rms_norm", || self.inner.rms_norm(x, g, e))
    }
    fn activation(&self, x: &B::Tensor, a: Activation) -> R<B::Tensor> {
        self.around("activation", || self.inner.activation(x, a))
    }
    fn glu(&self, x: &B::Tensor) -> R<B::Tensor> {
        self.around("glu", || self.inner.glu(x))
    }
    fn softmax(&self, x: &B::Tensor) -> R<B::Tensor> {
        self.around("softmax", || self.inner.softmax(x))
    }
    fn log_softmax(&self, x: &B::Tensor) -> R<B::Tensor> {
        self.around("log_softmax", || self.inner.log_softmax(x))
    }
    fn add(&self, a: &B::Tensor, b: &B::Tensor) -> R<B::Tensor> {
        self.around("add", || self.inner.add(a, b))
    }
    fn mul(&self, a: &B::Tensor, b: &B::Tensor) -> R<B::Tensor> {
        self.around("mul", || self.inner.mul(a, b))
    }
    fn affine(&self, x: &B::Tensor, s: f32, t: f32) -> R<B::Tensor> {
        self.around("affine", || self.inner.affine(x, s, t))
    }
}
