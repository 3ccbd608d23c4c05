"""``--engine ray``: the job's missing shards as a Ray Data dataset, run by a pool of actors.

The dataset holds one small row per shard (its ``ShardSpec``), not the texts: each actor reads
its shard straight from the input and writes the result into the job's shard directory with
the same ``run_shard`` / ``ShardStore.write`` the local engine uses, so the output is
byte-identical to a local run and a Ray job can resume a local one (and the other way round).
``map_batches`` with a class (``ShardActor``) gives an actor pool of ``concurrency`` actors,
each loading the model once in its constructor; ``batch_size=1`` hands out one shard at a
time, so fast actors take more shards. The driver only counts the rows that come back for the
progress bar. The trade-off: input and output must be on storage every node sees (a shared
file system on a multi-node cluster); in exchange no embeddings travel through the driver.

Ray itself serializes the actor class and its constructor arguments (plain dicts here) with
cloudpickle: that is Ray's own transport between its processes, not a file format of ours.
Without ``RAY_ADDRESS`` a local Ray is started bound to 127.0.0.1 with its dashboard off.
"""

from __future__ import annotations

import os

from openhood.batch.job import BatchJob, run_shard
from openhood.batch.sources import ShardSpec
from openhood.batch.store import ShardStore

SPEC_FIELDS = tuple(ShardSpec.__dataclass_fields__)


class ShardActor:
    """One Ray actor: loads the job's model once, then runs shards handed to it."""

    def __init__(self, job: dict):
        self.job = BatchJob(**job)
        self.source = self.job.source()
        self.task = self.job.make_task()
        self.store = ShardStore(self.job.output)

    def __call__(self, batch: dict) -> dict:
        import numpy as np

        done = []
        for i in range(len(batch["index"])):
            spec = ShardSpec(**{k: int(batch[k][i]) for k in SPEC_FIELDS})
            table, errors = run_shard(self.task, self.source, spec)
            self.store.write(spec.index, table, errors)
            done.append(spec.rows)
        return {"rows": np.asarray(done, dtype=np.int64)}


# Ray turns a node address of 127.0.0.1 into the machine's interface address (so other nodes
# could reach it) unless it runs in its single-machine mode; this switch selects that mode, and
# with the node on 127.0.0.1 its GCS, raylet and workers listen and connect on loopback only.
# It is read when ray is imported, by the driver and by every process Ray starts (inherited).
LOCAL_ONLY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def init_ray(num_cpus: int | None = None) -> bool:
    """Connect to ``RAY_ADDRESS`` when set, else start a private single-node Ray on loopback;
    False when this process is already connected (then the caller's Ray is used as it is)."""
    import logging

    if not os.environ.get("RAY_ADDRESS"):
        os.environ.update(LOCAL_ONLY_ENV)
    import ray

    if ray.is_initialized():
        return False
    if os.environ.get("RAY_ADDRESS"):
        ray.init(address=os.environ["RAY_ADDRESS"], logging_level=logging.WARNING, log_to_driver=False)
    else:
        ray.init(
            num_cpus=num_cpus,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            logging_level=logging.WARNING,
            log_to_driver=False,
        )
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    return True


def idle_actors_note(shards: int, actors: int) -> str | None:
    """A one-line warning when the job has fewer shards than actors (a shard is the unit one
    actor takes, so the others would sit idle), else None."""
    if shards >= actors:
        return None
    return (
        f"openhood batch: {shards} shard(s) for {actors} Ray actors, so {actors - shards} will idle; "
        "a smaller --shard-rows spreads the rows over all of them"
    )


def run_on_ray(
    job: BatchJob, pending: list[ShardSpec], progress, concurrency: int | None = None, num_cpus: int | None = None
) -> float:
    """Run ``pending`` shards on Ray; returns the seconds spent starting or joining Ray."""
    import sys
    import time

    if not pending:
        return 0.0
    t0 = time.perf_counter()
    started = init_ray(num_cpus)
    setup = time.perf_counter() - t0
    import ray

    try:
        ray.data.DataContext.get_current().enable_progress_bars = False  # ours shows rows, rate and ETA
        threads = job.threads or 1
        if concurrency is None:
            concurrency = max(1, int(ray.cluster_resources().get("CPU", 1)) // threads)
        note = idle_actors_note(len(pending), concurrency)
        if note:
            print(note, file=sys.stderr, flush=True)
        concurrency = min(concurrency, len(pending))
        items = ray.data.from_items([s.to_dict() for s in pending], override_num_blocks=len(pending))
        ds = items.map_batches(
            ShardActor,
            fn_constructor_kwargs={"job": job.to_dict()},
            batch_size=1,
            compute=ray.data.ActorPoolStrategy(size=concurrency),
            num_cpus=threads,
            batch_format="numpy",
        )
        for row in ds.iter_rows():
            progress.advance(int(row["rows"]))
        return setup
    finally:
        if started:
            ray.shutdown()
