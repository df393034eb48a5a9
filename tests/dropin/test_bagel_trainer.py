"""Acts as BAGEL's trainer (`train/pretrain_unified_navit.py`, "Setup packed dataloader" and
the training loop) with only the import changed, and restarts from its `data_status`.

Config file -> `DataConfig` -> attributes -> `PackedDataset(...)` with the trainer's keywords
-> `set_epoch(data_seed)` -> a plain `torch.utils.data.DataLoader` with 2 workers and
`collate_wrapper()` -> `.cuda(device).to_dict()` -> pop `batch_data_indexes` and
`ce_loss_weights` -> `data_status[dataset_name][worker_id] = data_indexes` -> the gathered
list `[data_status] * world_size` passed back on restart.
"""

from __future__ import annotations

import collections
import copy
import itertools

import pytest
import torch
import yaml

from bagel_data import DataConfig, PackedDataset, collate_wrapper
from bagel_data.datasets import DEFAULT_DATASET_INFO
from bagel_data.packing.invariants import check_batch
from helpers.golden import absolute_dataset_info, load_case

# The trainer's config file, in the shape of BAGEL's data/configs/example.yaml (small sizes).
CONFIG_YAML = """
t2i_pretrain:
  dataset_names: [t2i]
  image_transform_args: {image_stride: 16, max_image_size: 128, min_image_size: 64}
  is_mandatory: true
  num_used_data: [8]
  weight: 1
unified_edit:
  dataset_names: [edit]
  image_transform_args: {image_stride: 16, max_image_size: 128, min_image_size: 64}
  vit_image_transform_args: {image_stride: 14, max_image_size: 112, min_image_size: 56}
  is_mandatory: false
  num_used_data: [2]
  weight: 1
vlm_sft:
  dataset_names: [vlm]
  image_transform_args: {image_stride: 14, max_image_size: 140, min_image_size: 42, max_pixels: 15680}
  frame_sampler_args: {max_num_frames: 12, min_num_frames: 8}
  is_mandatory: false
  shuffle_lines: true
  shuffle_seed: 0
  num_used_data: [1000]
  weight: 1
"""
RANK, WORLD_SIZE, NUM_WORKERS, DATA_SEED = 1, 2, 2, 42
# No sample ever overflows max_num_tokens (at most one mandatory sample, then samples of at
# most 400 tokens while under 300): pack order is draw order, so positions can be compared.
BUDGETS = dict(expected_num_tokens=300, max_num_tokens_per_sample=400, max_num_tokens=900)
RECORDED, AFTER = 4, 6  # batches consumed before the restart, batches read after it


@pytest.fixture
def reference_dataset_info(monkeypatch):
    """Fill DEFAULT_DATASET_INFO as a BAGEL user edits data/dataset_info.py."""
    case, _, _ = load_case("packed_three_groups_flex")
    for group, datasets in absolute_dataset_info(case).items():
        monkeypatch.setitem(DEFAULT_DATASET_INFO, group, datasets)


def trainer_dataset(tokenizer, special_tokens, config_path, data_status):
    with open(config_path) as handle:
        dataset_meta = yaml.safe_load(handle)
    dataset_config = DataConfig(grouped_datasets=dataset_meta)
    # visual_und
    dataset_config.vit_patch_size = 14
    dataset_config.max_num_patch_per_side = 70
    # visual_gen: latent_patch_size * vae downsample, then model_args
    dataset_config.vae_image_downsample = 2 * 8
    dataset_config.max_latent_size = 32
    dataset_config.text_cond_dropout_prob = 0.1
    dataset_config.vae_cond_dropout_prob = 0.3
    dataset_config.vit_cond_dropout_prob = 0.3
    train_dataset = PackedDataset(
        dataset_config,
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        local_rank=RANK,
        world_size=WORLD_SIZE,
        num_workers=NUM_WORKERS,
        expected_num_tokens=BUDGETS["expected_num_tokens"],
        max_num_tokens_per_sample=BUDGETS["max_num_tokens_per_sample"],
        max_num_tokens=BUDGETS["max_num_tokens"],
        max_buffer_size=50,
        prefer_buffer_before=16384,
        interpolate_pos=False,
        use_flex=False,
        data_status=data_status,
    )
    train_dataset.set_epoch(DATA_SEED)
    return train_dataset


def train_loop(train_dataset, steps: int, data_status=None):
    """The trainer's loop body, minus the model: batches as dicts and the data_status."""
    train_loader = torch.utils.data.DataLoader(
        train_dataset,
        batch_size=1,
        num_workers=NUM_WORKERS,
        pin_memory=False,  # True on GPU; nothing to pin to on a CPU-only machine
        collate_fn=collate_wrapper(),
        drop_last=True,
        prefetch_factor=2,
    )
    batches = []
    for data in itertools.islice(train_loader, steps):
        data = data.cuda("cpu").to_dict()
        batches.append(dict(data))
        data_indexes = data.pop("batch_data_indexes", None)
        data.pop("ce_loss_weights", None)
        if data_status is None:
            data_status = {}
        for item in data_indexes:
            data_status.setdefault(item["dataset_name"], {})[item["worker_id"]] = item["data_indexes"]
    return batches, data_status


def positions(batches) -> dict:
    """(group, worker) -> the positions of its samples, in pack order."""
    found = collections.defaultdict(list)
    for batch in batches:
        for item in batch["batch_data_indexes"]:
            found[item["dataset_name"], item["worker_id"]].append(item["data_indexes"])
    return found


@pytest.mark.filterwarnings("ignore:prefer_buffer_before:bagel_data.errors.ConfigWarning")
def test_trainer_data_path_and_restart_from_gathered_data_status(
    tmp_path, tokenizer, special_tokens, reference_dataset_info
):
    config_path = tmp_path / "example.yaml"
    config_path.write_text(CONFIG_YAML)
    dataset = trainer_dataset(tokenizer, special_tokens, config_path, data_status=None)
    # An uninterrupted run, long enough to cover whatever the restarted run reads.
    full, _ = train_loop(dataset, RECORDED + 3 * AFTER)
    for batch in full:
        check_batch(batch, dataset.config, dataset.special_tokens)
    assert {item["worker_id"] for batch in full for item in batch["batch_data_indexes"]} == {0, 1}

    recorded, data_status = train_loop(
        trainer_dataset(tokenizer, special_tokens, config_path, None), RECORDED, data_status=None
    )
    assert [b["batch_data_indexes"] for b in recorded] == [b["batch_data_indexes"] for b in full[:RECORDED]]
    saved = copy.deepcopy(data_status)

    gathered = [data_status] * WORLD_SIZE  # dist.gather_object on rank 0, saved as data_status.pt
    restarted = trainer_dataset(tokenizer, special_tokens, config_path, data_status=gathered)
    after, _ = train_loop(restarted, AFTER, data_status=data_status)
    for batch in after:
        check_batch(batch, restarted.config, restarted.special_tokens)

    uninterrupted, consumed, resumed = positions(full), positions(recorded), positions(after)
    assert resumed, "the restarted run read nothing"
    for (group, worker), seen in resumed.items():
        done = len(consumed.get((group, worker), []))
        if done:  # the last recorded position is the one data_status holds for this worker
            assert saved[group][worker] == uninterrupted[group, worker][done - 1]
        expected = uninterrupted[group, worker][done : done + len(seen)]
        assert len(expected) == len(seen), f"{group} worker {worker}: lengthen the uninterrupted run"
        assert seen == expected, f"{group} worker {worker}: after {done} recorded rows"
    # Every group that recorded a position was read again after it, on some worker.
    assert {group for group, _ in resumed} == set(saved)
