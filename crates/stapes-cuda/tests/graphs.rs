//! CUDA graphs: a captured encoder-like chain replays bit-identically to the eager run, replays
//! see new inputs, and the counters prove the graph path ran.

mod common;

use stapes_core::{Activation, AttnParams, Backend, HostTensor, Lane};
use stapes_cuda::{CudaBackend, CudaTensor, CudaWeight};

struct Layer {
    ln_g: CudaTensor,
    ln_b: CudaTensor,
    qkv: CudaWeight,
    /// separate q/k/v weights too, so the shared-input path is captured as well
    q: CudaWeight,
    k: CudaWeight,
    out: CudaWeight,
    fc1: CudaWeight,
    fc2: CudaWeight,
    b1: CudaTensor,
}

fn layer(g: &CudaBackend, d: usize, lane: Lane, seed: u64) -> Layer {
    let r = |s: &[usize], k: u64, sc: f32| HostTensor::random(s.to_vec(), seed * 100 + k, sc);
    let inv = 1.0 / (d as f32).sqrt();
    Layer {
        ln_g: g.upload(&r(&[d], 1, 1.0)).unwrap(),
        ln_b: g.upload(&r(&[d], 2, 0.1)).unwrap(),
        qkv: g.weight(&r(&[3 * d, d], 3, inv), lane).unwrap(),
        q: g.weight(&r(&[d, d], 8, inv), lane).unwrap(),
        k: g.weight(&r(&[d, d], 9, inv), lane).unwrap(),
        out: g.weight(&r(&[d, d], 4, inv), lane).unwrap(),
        fc1: g.weight(&r(&[4 * d, d], 5, inv), lane).unwrap(),
        fc2: g.weight(&r(&[d, 4 * d], 6, inv * 0.5), lane).unwrap(),
        b1: g.upload(&r(&[4 * d], 7, 0.1)).unwrap(),
    }
}

/// Pre-norm transformer layers over x (1, T, d): the Whisper encoder's op sequence.
fn forward(
    g: &CudaBackend,
    x: &CudaTensor,
    layers: &[Layer],
    heads: usize,
) -> stapes_core::Result<CudaTensor> {
    let d = *x.shape_ref().last().unwrap();
    let mut h = x.clone();
    for l in layers {
        let n = g.layer_norm(&h, &l.ln_g, Some(&l.ln_b), 1e-5)?;
        let qkv = g.linear(&n, &l.qkv, None)?;
        let q = g.slice(&qkv, 2, 0, d)?;
        let k = g.slice(&qkv, 2, d, d)?;
        let v = g.slice(&qkv, 2, 2 * d, d)?;
        // and q, k once more from separate weights reading the same input (prepared once)
        let q = g.add(&q, &g.linear(&n, &l.q, None)?)?;
        let k = g.add(&k, &g.linear(&n, &l.k, None)?)?;
        let p = AttnParams {
            n_heads: heads,
            scale: 1.0 / ((d / heads) as f32).sqrt(),
            kv_len: None,
            causal: false,
        };
        let a = g.attention(&q, &k, &v, &p)?;
        h = g.add(&h, &g.linear(&a, &l.out, None)?)?;
        let n = g.layer_norm(&h, &l.ln_g, Some(&l.ln_b), 1e-5)?;
        let f = g.activation(&g.linear(&n, &l.fc1, Some(&l.b1))?, Activation::Gelu)?;
        h = g.add(&h, &g.linear(&f, &l.fc2, None)?)?;
    }
    Ok(h)
}

trait ShapeRef {
    fn shape_ref(&self) -> &[usize];
}
impl ShapeRef for CudaTensor {
    fn shape_ref(&self) -> &[usize] {
        stapes_core::DeviceTensor::shape(self)
    }
}

#[test]
fn graph_replay_is_bit_identical_to_eager() {
    let (g, _serial) = require_gpu!("graph_replay_is_bit_identical_to_eager");
    if !g.graphs_enabled() {
        eprintln!("SKIPPED (STAPES_CUDA_GRAPHS=0): graph_replay_is_bit_identical_to_eager");
        return;
    }
    let (t, d, heads) = (150, 128, 2);
    for lane in [Lane::F16, Lane::Q8] {
        let layers: Vec<Layer> = (0..2).map(|i| layer(g, d, lane, 7 + i)).collect();
        let x0 = HostTensor::random(vec![1, t, d], 1, 1.0);
        let x1 = HostTensor::random(vec![1, t, d], 2, 1.0);
        let eager0 = g
            .download(&forward(g, &g.upload(&x0).unwrap(), &layers, heads).unwrap())
            .unwrap();
        let eager1 = g
            .download(&forward(g, &g.upload(&x1).unwrap(), &layers, heads).unwrap())
            .unwrap();

        let mut input = g.upload(&x0).unwrap();
        let before = g.counters().snapshot();
        let key = format!("test-encoder-{lane}");
        let out = g
            .run_graph(&key, |b| Ok(vec![forward(b, &input, &layers, heads)?]))
            .unwrap();
        let graph0 = g.download(&out[0]).unwrap();
        assert_eq!(
            graph0.data, eager0.data,
            "{lane}: first graph launch differs from eager"
        );

        g.write_host(&mut input, &x1).unwrap();
        let out = g
            .run_graph(&key, |_| panic!("must replay, not re-capture"))
            .unwrap();
        let graph1 = g.download(&out[0]).unwrap();
        assert_eq!(
            graph1.data, eager1.data,
            "{lane}: replay with a new input differs from eager"
        );

        g.write_host(&mut input, &x0).unwrap();
        let out = g.replay(&key).unwrap();
        assert_eq!(
            g.download(&out[0]).unwrap().data,
            eager0.data,
            "{lane}: second replay differs"
        );

        let after = g.counters().snapshot();
        assert_eq!(
            after.graph_captures,
            before.graph_captures + 1,
            "{lane}: one capture"
        );
        assert!(
            after.graph_replays >= before.graph_replays + 3,
            "{lane}: replays counted"
        );
        eprintln!("ok   {lane}: graph == eager bit for bit over 2 layers; counters {after:?}");
        g.drop_graph(&key);
    }
}

#[test]
fn host_transfers_inside_capture_are_declined() {
    let (g, _serial) = require_gpu!("host_transfers_inside_capture_are_declined");
    if !g.graphs_enabled() {
        eprintln!("SKIPPED (STAPES_CUDA_GRAPHS=0): host_transfers_inside_capture_are_declined");
        return;
    }
    let x = g.upload(&HostTensor::random(vec![4, 8], 3, 1.0)).unwrap();
    let r = g.capture("bad", |b| {
        let y = b.affine(&x, 2.0, 0.0)?;
        b.download(&y)?;
        Ok(vec![y])
    });
    assert!(
        matches!(r, Err(stapes_core::Error::Decline { .. })),
        "{r:?}"
    );
    // the stream must still work after the failed capture
    let y = g.download(&g.affine(&x, 2.0, 1.0).unwrap()).unwrap();
    let want: Vec<f32> = HostTensor::random(vec![4, 8], 3, 1.0)
        .data
        .iter()
        .map(|v| v * 2.0 + 1.0)
        .collect();
    assert_eq!(y.data, want);
}
