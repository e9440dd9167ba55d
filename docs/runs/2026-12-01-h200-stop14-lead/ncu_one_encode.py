import csv,sys,io,collections
f=sys.argv[1]
import lzma
lines=lzma.open(f,'rt').read().split("\n")
i=[k for k,l in enumerate(lines) if l.startswith("\"ID\"")][0]
r=list(csv.DictReader(io.StringIO("\n".join(lines[i:]))))
names=[(x["Kernel Name"], float(x["Metric Value"].replace(",",""))/1000, x["Grid Size"], x["Block Size"]) for x in r]
idx=[k for k,(n,_,_,_) in enumerate(names) if n.startswith("im2col_1d")]
print("im2col at", idx)
for a,b in zip(idx, idx[1:]):
    seq=names[a:b]
    tot=sum(v for _,v,_,_ in seq)
    print(f"--- encode window from {a} to {b}: {b-a} kernels, sum {tot:.1f} us")
a=int(sys.argv[2]) if len(sys.argv)>2 else idx[-2]
b=[x for x in idx if x>a][0] if len(sys.argv)<4 else int(sys.argv[3])
seq=names[a:b]
agg=collections.OrderedDict()
for n,v,g,bl in seq:
    k=n[:70]
    c=agg.setdefault(k,[0,0.0,g,bl]); c[0]+=1; c[1]+=v
tot=sum(v for _,v,_,_ in seq)
for k,(c,v,g,bl) in sorted(agg.items(), key=lambda x:-x[1][1]):
    print(f"{v:9.1f} us {c:4d}x  avg {v/c:7.2f}  {k}  grid {g} block {bl}")
print("total", tot)
