"""Run under torchrun (gloo): record this rank's units and first packs as JSON.

Usage: torchrun --standalone --nproc_per_node N rank_stream.py CONFIG.json OUT_DIR
CONFIG.json holds grouped_datasets, dataset_info and packing.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch.distributed as dist

from bagel_data import (
    add_special_tokens,
    get_parquet_data_paths,
    load_tokenizer,
    make_bagel_multimodal_dataset,
)
from bagel_data.checkpoint.collect import gather_worker_states


def describe(dataset, count: int) -> dict:
    units = {
        name: [int(i) for i in family.units.rank_unit_ids]
        for name, family in zip(dataset.group_names, dataset.grouped_datasets)
    }
    packs = []
    stream = iter(dataset)
    for _ in range(count):
        batch = next(stream)
        packs.append(
            {
                "sequence_length": batch["sequence_length"],
                "batch_data_indexes": batch["batch_data_indexes"],
                "text_ids": hashlib.sha256(batch["packed_text_ids"].numpy().tobytes()).hexdigest(),
            }
        )
    return {"units": units, "packs": packs}


def build(config: dict, **topology):
    tokenizer, special_tokens, _ = add_special_tokens(load_tokenizer())
    return make_bagel_multimodal_dataset(
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        grouped_datasets=config["grouped_datasets"],
        dataset_info=config["dataset_info"],
        num_workers=1,
        **config["packing"],
        **topology,
    )


def main() -> None:
    config = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dataset = build(config)  # rank and world size come from the process group
    record = describe(dataset, config["count"])
    record["rank"], record["world_size"] = rank, world
    t2i_dir = config["dataset_info"]["t2i_pretrain"]["t2i"]["data_dir"]
    record["parquet_paths"] = get_parquet_data_paths([t2i_dir] * world, [3] * world, rank=rank, world_size=world)
    record["gathered_states"] = gather_worker_states([dataset.state_dict()])
    (out / f"rank{rank}.json").write_text(json.dumps(record))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
