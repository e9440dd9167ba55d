# simulate the plain form's ring of position rows: loads per tile, reads per warp per tile
BK=32; PW=48
def sim(T, nw, bx):
    ring=16*nw+2*BK
    pb0=T-16*nw*(bx+1)
    slots=[None]*ring
    pending=[]
    def load(k0):
        fresh=0 if k0==0 else 16*nw
        rows=16*nw+BK if k0==0 else BK
        s0=(k0+fresh)%ring
        out=[]
        for r in range(rows):
            slot=s0+r
            if slot>=ring: slot-=ring
            out.append((slot, pb0+k0+fresh+r))
        return out
    pending=load(0)
    k0=0
    while k0<T:
        for slot,row in pending: slots[slot]=row   # wait + sync: tile k0's loads landed
        # after sync: next tile's loads issued; they land before the next wait, but may land at any
        # time during this tile's compute: apply them now (worst case) and check reads
        nxt=load(k0+BK) if k0+BK<T else []
        for slot,row in nxt: slots[slot]=row
        for w in range(nw):
            off=16*(nw-1-w)
            for lane in range(32):
                lr=(lane&7)+((lane>>4)<<3)
                s0=(k0+off+lr)%ring
                for n in range(PW//16):
                    slot=s0+16*n
                    if slot>=ring: slot-=ring
                    want=pb0+k0+off+lr+16*n
                    assert slots[slot]==want,(T,nw,bx,k0,w,lane,n,slots[slot],want)
        pending=[]
        k0+=BK
    return True
for T in [1,2,16,33,37,70,140,141,203,300,1000]:
    for nw in range(1,10):
        for bx in range((T+16*nw-1)//(16*nw)):
            sim(T,nw,bx)
print("ok")
