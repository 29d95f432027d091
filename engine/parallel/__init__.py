"""One model across several devices: sequence parallelism (``sequence``), pipeline parallelism
over DiT blocks (``pipeline_stages``), FSDP2 weight sharding (``sharding``), pinned offload with
block prefetch (``offload``), the decoder on a device of its own (``disaggregate``); the ranks
that carry them (``ranks``, ``follower``, ``mirror``) and how a ``ParallelPlan`` becomes an
engine (``build``). Importing this package imports nothing heavy: the web process reads plans."""
