#!/usr/bin/env python3
"""Prints torch's ScheduleInterleavedZeroBubble orders (each rank's actions, the idle slots left out) that
test_pipeline_schedule.cpp's ZeroBubbleEqualsTorch holds: .venv-bench/bin/python tests/cpp/zero_bubble_orders.py
(the schedule's __init__ needs real stages; its per-rank calculation only these fields)."""
from torch.distributed.pipelining.schedules import ScheduleInterleavedZeroBubble, _ComputationType as C
def orders(pp, v, m):
    out=[]
    for rank in range(pp):
        o=object.__new__(ScheduleInterleavedZeroBubble)
        o.pp_group_size=pp; o.n_local_stages=v; o.rank=rank; o._n_microbatches=m
        o.number_of_rounds=max(1,m//pp); o.microbatches_per_round=m//o.number_of_rounds
        ops=o._calculate_single_rank_operations(rank)
        out.append(" ".join(str(a) for a in ops if a is not None))
    return " | ".join(out)
for args in ((2,2,4),(4,2,8),(2,1,4)):
    print(args, orders(*args))
