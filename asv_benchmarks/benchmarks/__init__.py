"""asv benchmarks of adrules and executors (numpy's / pandas' layout: one bench_<area>.py
per area, shared seeded data builders in common.py). Run them with ../run_quick.sh."""
