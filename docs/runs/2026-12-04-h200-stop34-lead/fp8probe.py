# FP8 / int8 / f16 GEMM rates at the encoder shapes (torch -> cuBLAS / cuBLASLt), H200.
import torch, sys, math
torch.backends.cuda.matmul.allow_tf32 = False
dev = "cuda"
E4 = torch.float8_e4m3fn
def bench(fn, n_inner=20, reps=5):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3): fn(0)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(n_inner): fn(i)
    best = 1e9
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); torch.cuda.synchronize()
        best = min(best, a.elapsed_time(b) / n_inner)
    return best * 1000.0  # us
shapes = [("turbo qkv",1500,3840,1280),("turbo out",1500,1280,1280),("turbo fc1",1500,5120,1280),("turbo fc2",1500,1280,5120),
          ("turbo16 qkv",24000,3840,1280),("turbo16 out",24000,1280,1280),("turbo16 fc1",24000,5120,1280),("turbo16 fc2",24000,1280,5120),
          ("pk qkv",140,3072,1024),("pk out",140,1024,1024),("pk fc1",140,4096,1024),("pk fc2",140,1024,4096),
          ("pk16 qkv",2240,3072,1024),("pk16 out",2240,1024,1024),("pk16 fc1",2240,4096,1024),("pk16 fc2",2240,1024,4096)]
print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())
print(f"{'shape':14s} {'M':>6s} {'N':>5s} {'K':>5s} | f16 us (TF) | fp8 tw fast | fp8 tw slow | fp8 row fast | i8 _int_mm")
for name, M, N, K in shapes:
    nb = max(2, math.ceil(160e6 / (N * K)))
    x16 = torch.randn(M, K, device=dev, dtype=torch.float16)
    w16 = [torch.randn(N, K, device=dev, dtype=torch.float16) * 0.05 for _ in range(nb)]
    x8 = x16.to(E4); w8 = [w.to(E4) for w in w16]
    xi = torch.randint(-100, 100, (M, K), device=dev, dtype=torch.int8)
    wi = [torch.randint(-100, 100, (N, K), device=dev, dtype=torch.int8) for _ in range(nb)]
    one = torch.ones((), device=dev); sa = torch.ones(M, 1, device=dev); sb = torch.ones(1, N, device=dev)
    fl = 2 * M * N * K
    r = []
    r.append(bench(lambda i: torch.mm(x16, w16[i % nb].t())))
    r.append(bench(lambda i: torch._scaled_mm(x8, w8[i % nb].t(), one, one, out_dtype=torch.float16, use_fast_accum=True)))
    r.append(bench(lambda i: torch._scaled_mm(x8, w8[i % nb].t(), one, one, out_dtype=torch.float16, use_fast_accum=False)))
    try:
        r.append(bench(lambda i: torch._scaled_mm(x8, w8[i % nb].t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)))
    except Exception as e:
        print("rowwise failed:", str(e)[:200]); r.append(float('nan'))
    try:
        r.append(bench(lambda i: torch._int_mm(xi, wi[i % nb].t())))
    except Exception as e:
        print("int_mm failed:", str(e)[:200]); r.append(float('nan'))
    print(f"{name:14s} {M:6d} {N:5d} {K:5d} | " + " | ".join(f"{t:7.2f} ({fl/t/1e6:5.0f})" for t in r), flush=True)
# kernel names
from torch.profiler import profile, ProfilerActivity
M,N,K=1500,5120,1280
x8 = torch.randn(M,K,device=dev,dtype=torch.float16).to(E4); w8 = torch.randn(N,K,device=dev,dtype=torch.float16).to(E4)
one = torch.ones((), device=dev); sa = torch.ones(M,1,device=dev); sb = torch.ones(1,N,device=dev)
with profile(activities=[ProfilerActivity.CUDA]) as p:
    torch._scaled_mm(x8, w8.t(), one, one, out_dtype=torch.float16, use_fast_accum=True)
    torch._scaled_mm(x8, w8.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)
    torch.cuda.synchronize()
for e in p.events():
    if e.device_type.name == "CUDA": print("kernel:", e.name[:160])
