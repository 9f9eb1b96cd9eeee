# What one process pays to take a DataLoader batch of 256 images (3 x 224 x 224) from a worker: receive (unpickle
# the shared-memory handle), first copy (page faults of the mapping + copy), second copy (the copy alone), free
# (unmap + unlink). float32 (ToTensor + Normalize in the workers, the seed's torchvision), float16, uint8. Run on
# the 2-core CPU machine: python intake_probe.py (each dtype 4 batches; the last line of each is kept).
import time, torch
torch.set_num_threads(1)
class DS(torch.utils.data.Dataset):
    def __init__(s, dtype): s.dtype=dtype; s.x=torch.ones(3,224,224,dtype=dtype)
    def __len__(s): return 100000
    def __getitem__(s,i): return s.x, i
for dtype in (torch.float32, torch.float16, torch.uint8):
    bs=256
    dl=torch.utils.data.DataLoader(DS(dtype),batch_size=bs,num_workers=1,prefetch_factor=4,persistent_workers=True)
    it=iter(dl); x,_=next(it); buf=torch.empty_like(x)
    time.sleep(3)
    tr=tc=0
    for k in range(4):
        t0=time.perf_counter(); x,_=next(it); t1=time.perf_counter(); buf.copy_(x); t2=time.perf_counter(); buf.copy_(x); t3=time.perf_counter()
        del x; t4=time.perf_counter()
        print(dtype, f"recv {1e3*(t1-t0):.1f} ms  first copy {1e3*(t2-t1):.1f} ms  second copy {1e3*(t3-t2):.1f} ms free {1e3*(t4-t3):.1f} ms  MB {buf.numel()*buf.element_size()/1e6:.0f}")
        time.sleep(1)
