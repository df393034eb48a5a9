"""Hand-written mutants for `scripts/mutate.py`: bugs that look like real ones.

The generated mutants flip one operator or constant at a time. The bugs people write are
often other ones: a limit off by one in the direction that looks right, a condition left
out, two arguments swapped, a field saved and not restored, a fallback to the global random
stream. Each entry is `(text in the module, what it becomes, the bug it stands for)`; the
text must occur exactly once in the module (`tests/scripts/test_mutate.py` holds every entry
to that, so an entry whose code moved is found at once, not at the next mutation run).
"""

from __future__ import annotations

WRITTEN: dict[str, list[tuple[str, str, str]]] = {
    # families and packing (round 5): the audit's weak modules first
    "families/parquet_listing.py": [
        (
            'and "/" not in path[len(prefix) :])',
            ")",
            "a subfolder's files counted as the folder's own",
        ),
        ('prefix = storage.join(folder, "")', "prefix = folder", "a folder whose name extends another's counted as it"),
        (
            "sum(1 for path in listed if path.startswith(prefix)",
            "sum(1 for path in files if path.startswith(prefix)",
            "the files taken counted for the files listed",
        ),
        (
            "size and used % size == 0 for used, size",
            "size and used >= size for used, size",
            "one copy taken as whole copies",
        ),
        (
            'return self.file_order == "filesystem" or all(',
            'return self.file_order == "filesystem" or any(',
            "one folder taken whole taken for all",
        ),
        (
            'parquet_data_files(self.data_dirs, self.num_used, file_order="filesystem")',
            "parquet_data_files(self.data_dirs, self.num_used, file_order=self.file_order)",
            "the reference's files listed in our own order: never a mismatch",
        ),
        (
            "if ours_count == theirs_count:",
            "if set(ours_count) == set(theirs_count):",
            "the same files taken a different number of times taken as the reference's",
        ),
        (
            "@functools.cached_property  # lists the folders again: once",
            "@property  # lists the folders again: once",
            "the folders listed again on every check",
        ),
    ],
    "packing/pacing.py": [
        (
            "self.max_buffer = list(group_names), max(max_buffer_size, 1)",
            "self.max_buffer = list(group_names), max_buffer_size",
            "no buffer beside the backlog: every backlog refused",
        ),
        (
            "or not 0 <= backlog <= min(buffered, self.max_buffer)",
            "or not 0 <= backlog <= buffered",
            "a backlog past max_buffer_size accepted",
        ),
        (
            "if buffered - backlog > self.max_buffer:",
            "if buffered > self.max_buffer:",
            "the backlog counted toward max_buffer_size: a checkpoint after a change refused",
        ),
        ("if sum(packed) > tokens:", "if sum(packed) >= tokens:", "a phase holding every token of the stream refused"),
        (
            "self.backlog, self.packed_tokens = backlog, packed",
            "self.backlog = backlog",
            "the phase's packed tokens not restored",
        ),
        (
            "self.choice.new_phase()\n        pace.packed_tokens = [0] * len(pace.packed_tokens)",
            "self.choice.new_phase()",
            "the phase's counts not reset at a change",
        ),
        (
            "from_backlog = index < self.pace.backlog",
            "from_backlog = index <= self.pace.backlog",
            "the first fresh sample released as the backlog's",
        ),
        (
            "room[draw.group] = -1.0  # oldest first",
            "pass  # oldest first",
            "a later, shorter sample of a paced group packed before an older one",
        ),
        (
            "elif draw.length <= room[draw.group]:",
            "elif draw.length < room[draw.group]:",
            "a sample filling its group's room exactly held back",
        ),
        (
            "closed = sum(packed_tokens) - pack_tokens",
            "closed = sum(packed_tokens)",
            "the open pack counted twice in the horizon",
        ),
        (
            "max(weight / total_weight, DRAIN_FLOOR) * horizon",
            "weight / total_weight * horizon",
            "a group at weight 0 never drains",
        ),
        (
            "in_backlog = sum(1 for index in indices if index < self.pace.backlog)",
            "in_backlog = sum(1 for index in indices if index <= self.pace.backlog)",
            "one fresh sample taken counted as the backlog's",
        ),
        (
            "        self.pace.backlog -= sum(1 for index in gone if index < self.pace.backlog)",
            "",
            "a skipped backlog sample left in the backlog count",
        ),
        (
            "        self.pace.backlog -= 1\n        self.choice.released(draw.group, draw.length)",
            "        self.pace.backlog -= 1",
            "the group choice never hears of a released backlog sample",
        ),
    ],
    "packing/groups.py": [
        (
            "stable_hash(self.name), *cursor, CFG_STREAM, *seed_tail(data_seed)])",
            "stable_hash(self.name), *cursor, CFG_STREAM])",
            "two data seeds equal in their low 32 bits drop the same captions",
        ),
        (
            "SeededRandom.from_key([data_seed, stable_hash(self.name), *cursor,",
            "SeededRandom.from_key([data_seed, *cursor,",
            "two stand-in groups drop at the same cursors alike",
        ),
        (
            "return self.dataset.sample_rng(*row_key, CFG_STREAM)",
            "return self.dataset.sample_rng(*row_key)",
            "CFG dropout drawn from the row's own generator, the one its caption and frames are chosen from",
        ),
        (
            "return self.dataset.row_location(row_key) if row_key else super().where(row_key, cursor)",
            "return super().where(row_key, cursor)",
            "a family's skip names a cursor, not its file and row",
        ),
        (
            "group.samples(cursor, log, config.stream_read_ahead(group.reads_remote))",
            "group.samples(cursor, log, config.stream_read_ahead(False))",
            "a remote group never read ahead",
        ),
        (
            'draw = Draw(group, cursor, sample, sample.get("compat_rng_state"))',
            "draw = Draw(group, cursor, sample)",
            "a compat draw's stream state not kept: its rebuild draws anew",
        ),
        (
            "        if not self.policy.decides_dropout_at_draw:\n            return\n",
            "",
            "compat mode's dropout decided at the draw as well as while packing",
        ),
        (
            "        return len(self.dataset.epoch_units)",
            "        return len(self.dataset.units.rank_unit_ids)",
            "a checkpoint records the rank's unit count for the group's",
        ),
        (
            "            state.logs[group].skip(SkipReason.SAMPLE_INVALID, where,",
            "            state.logs[group].skip(SkipReason.SCHEMA, where,",
            "an empty sample counted under the wrong reason",
        ),
    ],
    "families/base.py": [
        (
            "phase, start = after[0], [*after[1:-1], after[-1] + 1]  # just after",
            "phase, start = after[0], [*after[1:]]  # just after",
            "a resume repeats the sample at its cursor",
        ),
        (
            "if step.whole and step.number >= 0 and not produced and log.total() == skipped:",
            "if step.whole and step.number >= 0 and not produced:",
            "a pass of only bad rows taken for an empty worker",
        ),
        (
            "if self.policy.reference and self.policy.stream.rng is None:",
            "if self.policy.reference:",
            "compat's shared stream restarted by every group's iteration",
        ),
        (
            "sample = rebuilt(self, cursor, rng_state, self.new_skip_log() if log is None else log)",
            "sample = rebuilt(self, cursor, rng_state, self.skip_log if log is None else log)",
            "a rebuild's skip counted in the live stream's log",
        ),
        (
            "self.num_files_per_rank = len(self.units.rank_unit_ids)",
            "self.num_files_per_rank = len(self.units.epoch_units)",
            "num_files_per_rank counts every rank's units",
        ),
        (
            "paths = [*self.units.kind.input_paths(self.data_paths), *self.media_folders()]",
            "paths = [*self.units.kind.input_paths(self.data_paths)]",
            "remote image folders of a local JSONL not read ahead",
        ),
        (
            "self.skip_log = SkipLog(self.dataset_name, self.strict, self.max_consecutive_failures)",
            "self.skip_log = SkipLog(self.dataset_name, self.strict)",
            "a new skip log's failure bound back at the default",
        ),
        (
            "yield built(self, builder, shard, [index, *row], (unit_id, 0, *row), rng_state)",
            "yield built(self, builder, shard, [unit_id, *row], (unit_id, 0, *row), rng_state)",
            "validate's positions name the unit id, not the worker's item",
        ),
        (
            "after = self.resume_cursor(self.worker_shard().worker_id)",
            "after = self.resume_cursor(0)",
            "every worker resumes at worker 0's data_status",
        ),
        (
            "        unit_id, _, *row = row_key\n",
            "        unit_id, *row = row_key\n",
            "the pass taken as the row's first index in messages",
        ),
        (
            'ALLOWED_IMAGE_FORMATS if image_formats is None else check_image_formats("image_formats", image_formats)',
            "ALLOWED_IMAGE_FORMATS",
            "a group's image_formats ignored",
        ),
    ],
    "packing/placer.py": [
        (
            "return len(self.held.buffer) - self.pace.backlog < self.config.max_buffer_size",
            "return len(self.held.buffer) < self.config.max_buffer_size",
            "the backlog counted toward the look-ahead: greedy holds no overflow while it drains",
        ),
        (
            "if self.clock.phase_changed(state.packs) and self.phase_started != state.packs:",
            "if self.clock.phase_changed(state.packs):",
            "a reopened empty pack starts the phase again",
        ),
        (
            "if pack.curr < cfg.prefer_buffer_before and self.held.buffer:",
            "if pack.curr <= cfg.prefer_buffer_before and self.held.buffer:",
            "the buffer preferred one token past prefer_buffer_before",
        ),
        (
            "        draw = self.draw(self.choose())\n        if draw.full_length > cfg.max_num_tokens_per_sample:\n            self.skip(draw, SkipReason.OVER_SAMPLE_BUDGET)\n            return None",
            "        draw = self.draw(self.choose())\n        if draw.length > cfg.max_num_tokens_per_sample:\n            self.skip(draw, SkipReason.OVER_SAMPLE_BUDGET)\n            return None",
            "greedy's per-sample budget checked after dropout",
        ),
        (
            "if pack.curr + draw.length > self.config.max_num_tokens:",
            "if pack.curr + draw.length >= self.config.max_num_tokens:",
            "a carried sample filling the pack exactly skipped",
        ),
        (
            "if draw.full_length < self.config.max_num_tokens_per_sample:",
            "if draw.full_length <= self.config.max_num_tokens_per_sample:",
            "a mandatory sample at the per-sample budget taken",
        ),
        (
            "if draw.waited > max(cfg.max_buffer_size, 1):",
            "if draw.waited >= max(cfg.max_buffer_size, 1):",
            "a sample beside mandatory ones skipped one pack early",
        ),
        (
            "                    if index < backlog:\n                        self.pacer.release(draw)  # counted now, and off again as a skip\n",
            "",
            "a skipped backlog sample not released: the backlog count stays",
        ),
        (
            "if first is not None and pack.curr + held.buffer[first].length <= cfg.max_num_tokens:",
            "if first is not None and pack.curr + held.buffer[first].length < cfg.max_num_tokens:",
            "the oldest sample filling the pack exactly left waiting",
        ),
        (
            "self.pacer.packed(draw.group, pack.curr - before)",
            "self.pacer.packed(draw.group, draw.length)",
            "the phase's tokens counted before compat's dropout",
        ),
        (
            "        if pack.add(draw.sample, None if draw.dropped is None else draw.dropped.items):\n            self.empty_run = 0\n",
            "        if pack.add(draw.sample, None if draw.dropped is None else draw.dropped.items):\n",
            "the run of emptied samples never reset",
        ),
        (
            "length = draw.full_length if reason == SkipReason.OVER_SAMPLE_BUDGET else draw.length",
            "length = draw.length",
            "an over-budget skip names the length after dropout",
        ),
        (
            "        self.choice.dropped(draw.group, draw.length)\n",
            "",
            "a skipped sample's tokens left in the group choice's counts",
        ),
        (
            "while self.pacer.fresh() < max(cfg.max_buffer_size, 1):",
            "while len(state.buffer) < max(cfg.max_buffer_size, 1):",
            "best fit draws no look-ahead while a backlog drains",
        ),
    ],
    "packing/choosers.py": [
        (
            "if self._shares[0] != key:",
            "if not self._shares[1]:",
            "the shares of the first weights kept: a schedule change ignored",
        ),
        (
            "    def released(self, group, tokens):\n        self.tokens[group] += tokens",
            "    def released(self, group, tokens):\n        pass",
            "a released backlog sample never counted",
        ),
        (
            "    def dropped(self, group, tokens):\n        self.tokens[group] -= tokens",
            "    def dropped(self, group, tokens):\n        pass",
            "a skipped sample's tokens kept",
        ),
        (
            "    def new_phase(self):\n        self.tokens = [0] * len(self.tokens)",
            "    def new_phase(self):\n        pass",
            "the counts carried across a change point",
        ),
        (
            'saved.get("group_tokens"), self.group_names)',
            'saved.get("tokens"), self.group_names)',
            "the counts loaded from the wrong key: every resume starts them at 0",
        ),
        (
            "values = [counts.get(name, 0) for name in group_names]",
            "values = [counts[name] for name in group_names]",
            "a group the checkpoint does not name refused",
        ),
        (
            "isinstance(v, int) and not isinstance(v, bool) and (allow_negative or v >= 0)",
            "isinstance(v, int) and (allow_negative or v >= 0)",
            "a bool taken for a count",
        ),
        (
            "(allow_negative or v >= 0) for v in values)",
            "(v >= 0) for v in values)",
            "negative counts refused where a skip may leave them",
        ),
        (
            "    if unknown:\n        raise ResumeError(",
            "    if False:\n        raise ResumeError(",
            "a checkpoint naming an unknown group accepted",
        ),
        (
            "    if name not in MIX_BY:\n        MIX_BY.append(name)",
            "    pass",
            "a registered rule's name refused by the config",
        ),
    ],
    "packing/dropout.py": [
        (
            "return bool(config.text_cond_dropout_prob or config.vit_cond_dropout_prob or config.vae_cond_dropout_prob)",
            "return bool(config.text_cond_dropout_prob or config.vit_cond_dropout_prob)",
            "VAE-only dropout taken for no dropout",
        ),
        (
            'if item["type"] != "vae_image" or not policy.keeps_multi_frame_splits:',
            'if item["type"] != "vae_image":',
            "compat's frames inside a split kept too",
        ),
        (
            'return bool(item.get("split_start", True) and item.get("split_end", True))',
            'return bool(item.get("split_start", True) or item.get("split_end", True))',
            "a split's first and last frames dropped",
        ),
        (
            "size, probability = len(next(texts)) + 2, config.text_cond_dropout_prob",
            "size, probability = len(next(texts)), config.text_cond_dropout_prob",
            "a dropped text's markers not counted as saved",
        ),
        (
            "stride = config.vit_patch_size if vit else config.vae_image_downsample",
            "stride = config.vae_image_downsample if vit else config.vit_patch_size",
            "the ViT and VAE strides swapped",
        ),
        (
            "size = (image.shape[1] // stride) * (image.shape[2] // stride) + 2",
            "size = (image.shape[1] // stride) * (image.shape[2] // stride)",
            "a dropped image's markers not counted as saved",
        ),
        (
            "probability = config.vit_cond_dropout_prob if vit else config.vae_cond_dropout_prob",
            "probability = config.vae_cond_dropout_prob if vit else config.vit_cond_dropout_prob",
            "the ViT and VAE probabilities swapped",
        ),
        (
            'if item["enable_cfg"] == 1 and is_droppable(item, policy) and rng.random() < probability:',
            "if is_droppable(item, policy) and rng.random() < probability:",
            "an item without enable_cfg dropped",
        ),
        (
            'if item["enable_cfg"] == 1 and is_droppable(item, policy) and rng.random() < probability:',
            'if rng.random() < probability and item["enable_cfg"] == 1 and is_droppable(item, policy):',
            "a draw for every item, not one per droppable item",
        ),
    ],
    "packing/schedule.py": [
        (
            "return self.base + self.worker_id + packs * self.stride",
            "return self.base + packs * self.stride",
            "every worker's packs counted from step 0",
        ),
        (
            "self.worker_id, self.stride, self.base = worker_id, max(num_workers, 1), base",
            "self.worker_id, self.stride, self.base = worker_id, num_workers, base",
            "no DataLoader workers: the step never moves",
        ),
        (
            "return bisect.bisect_right(self.changes, step)",
            "return bisect.bisect_left(self.changes, step)",
            "a change point's own step still in the old phase",
        ),
        (
            "return packs > 0 and self.phase(self.step(packs)) != self.phase(self.step(packs - 1))",
            "return self.phase(self.step(packs)) != self.phase(self.step(packs - 1))",
            "a worker's first pack taken for a change point",
        ),
        (
            "self.changes = sorted({step for schedule in self.schedules for step in schedule.steps})",
            "self.changes = sorted(self.schedules[0].steps)",
            "only the first group's change points",
        ),
    ],
    "packing/strategies.py": [
        (
            "        if u < share:\n            return group",
            "        if u <= share:\n            return group",
            "a draw equal to a share given to its group",
        ),
        (
            "tied = [group for group, deficit in zip(candidates, deficits) if deficit >= best - 1e-9]",
            "tied = [group for group, deficit in zip(candidates, deficits) if deficit >= best]",
            "float ties broken by rounding, not the generator",
        ),
        ("    if len(tied) == 1:\n        return tied[0]\n", "", "a clear deficit draws from the generator anyway"),
        (
            "return tied[choose_by_weight(cumulative_shares([weights[g] for g in tied]), rng.random())]",
            "return tied[choose_by_weight(cumulative_shares([1.0 for g in tied]), rng.random())]",
            "a tie drawn uniformly, not by weight",
        ),
        (
            "        shares.append(running / total)",
            "        shares.append(running)",
            "weights taken as shares without normalising: right only when they sum to 1",
        ),
        ("mask = (1 << (room + 1)) - 1", "mask = (1 << room) - 1", "a subset filling the room exactly not reachable"),
        ("total = reachable[-1].bit_length() - 1", "total = reachable[-1].bit_length()", "the best total off by one"),
        (
            "if not (reachable[k - 1] >> total) & 1:  # `total` needs item k-1",
            "if (reachable[k - 1] >> total) & 1:  # `total` needs item k-1",
            "the backtrack's test reversed",
        ),
    ],
    "tools/draw_spread.py": [
        ("    if family.units.walks_rows():\n        return 1.0\n", "", "the walk by rows measured by units"),
        (
            "split = reference_shard_unit_ids if family.policy.reference else shard_unit_ids",
            "split = shard_unit_ids",
            "compat's spread measured on the default mode's sharding",
        ),
        (
            "units = len(family.epoch_units)",
            "units = len(unit_rows)",
            "the unit count taken from the rows counted (units without a usable row left out)",
        ),
        (
            "        for worker in range(max(num_workers, 1))\n",
            "        for worker in range(num_workers)\n",
            "no DataLoader workers: no worker counted",
        ),
        (
            "    if unit_rows is None:\n        return None",
            "    if unit_rows is None:\n        unit_rows = {}",
            "a sampled validate's rows taken as every row: a spread from part of the data",
        ),
        (
            "if spread is None or spread <= SPREAD_LIMIT:",
            "if spread is None or spread < SPREAD_LIMIT:",
            "a spread at the limit warned",
        ),
        (
            '        if compat\n        else "this group is walked',
            '        if not compat\n        else "this group is walked',
            "the two reasons swapped",
        ),
    ],
    "families/walk.py": [
        (
            "return INHERITED_PHASE if restart_plan is not None else 0",
            "return 0",
            "a restarted worker skips its inherited rows",
        ),
        (
            "        return restart_plan.first_pass\n    return phase + 1",
            "        return phase + 1\n    return phase + 1",
            "after the remainder, pass -1 + 1 instead of the plan's first pass",
        ),
        (
            "        for index in range(first, len(refs)):\n            unit_id, pass_index, *row = refs[index]",
            "        for index in range(first + 1, len(refs)):\n            unit_id, pass_index, *row = refs[index]",
            "an inherited resume skips one row",
        ),
        (
            "        if start and index == first and len(start) > 1:",
            "        if start and len(start) > 1:",
            "every unit after a resumed one starts at the resumed row",
        ),
        (
            "yield Phase(phase, start is None, phase_items(shard, restart_plan, phase, start))",
            "yield Phase(phase, True, phase_items(shard, restart_plan, phase, start))",
            "a resumed phase taken as whole: an empty tail raises",
        ),
        (
            "        start = None\n        phase = next_phase(restart_plan, phase)",
            "        phase = next_phase(restart_plan, phase)",
            "every pass resumed at the first one's cursor",
        ),
        (
            "        elif item.draw.piece not in seen:\n            seen.add(item.draw.piece)\n            yield item",
            "        else:\n            yield item",
            "a piece read ahead once per draw",
        ),
    ],
    "families/media.py": [
        ("    (FileNotFoundError, SkipReason.IMAGE_MISSING),\n", "", "a missing image counted as unreadable"),
        (
            "MEDIA_ERRORS = (*DECODE_ERRORS, VideoDecodeError, OutsideRootError, FileNotFoundError,",
            "MEDIA_ERRORS = (*DECODE_ERRORS, VideoDecodeError, FileNotFoundError,",
            "a path outside the root stops the run",
        ),
        (
            "    (MediaTooLargeError, SkipReason.IMAGE_UNREADABLE),\n",
            "",
            "a media file over the size cap not a media skip",
        ),
        (
            "options = self._options if not transforms else decode_options(transforms, self.policy, self.formats)",
            "options = self._options",
            "an image for one transform decoded at every transform's size",
        ),
        (
            "options = self._options if not transforms else decode_options(transforms, self.policy, self.formats)",
            "options = self._options if not transforms else decode_options(transforms, self.policy)",
            "the group's image_formats lost for a decode for one transform",
        ),
        ('"formats": tuple(formats),', '"formats": tuple(ALLOWED_IMAGE_FORMATS),', "the group's image_formats ignored"),
        (
            'width, height = transform.target_size(*image.info.get("bagel_original_size", image.size))',
            "width, height = transform.target_size(*image.size)",
            "a drafted image's tokens counted at its drafted size",
        ),
        (
            "log.skip(reason, location, str(exc) if detail is None else detail)",
            "log.skip(reason, location, str(exc))",
            "the caller's detail of a skip dropped",
        ),
    ],
    "families/positions.py": [
        (
            "        if row[level] >= size:\n",
            "        if row[level] > size:\n",
            "a row one past the unit's last taken as one",
        ),
        (
            "found = [status[key] for key in (worker_id, str(worker_id)) if key in status]",
            "found = [status[key] for key in (worker_id,) if key in status]",
            "a data_status read back from JSON (string keys) has no entries",
        ),
        (
            "if isinstance(status, (list, tuple)) and worker_id < len(status) else []",
            "if isinstance(status, (list, tuple)) and worker_id <= len(status) else []",
            "a data_status list one short raises IndexError",
        ),
        (
            "isinstance(v, numbers.Integral) and not isinstance(v, bool) and int(v) >= 0 for v in values",
            "isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in values",
            "a negative position accepted",
        ),
        (
            "    if cursor[1] >= len(shard.unit_ids):\n",
            "    if cursor[1] > len(shard.unit_ids):\n",
            "a position one past the worker's units accepted",
        ),
        (
            "        check_reference_position(dataset, what)  # untagged here",
            "        pass  # untagged here",
            "a reference position on another file list resumed on other rows",
        ),
        (
            "return zlib.crc32(ids, (len(dataset.epoch_units) ^ _salt(dataset)) & 0xFFFFFFFF) & 0x7FFFFFFF",
            "return zlib.crc32(ids, len(dataset.epoch_units) & 0xFFFFFFFF) & 0x7FFFFFFF",
            "tar and parquet positions fingerprint alike",
        ),
        (
            "plan.buffer_size, plan.share.offset, plan.open_pieces]",
            "plan.buffer_size, plan.open_pieces]",
            "the rounds' offset not in the walk by rows' fingerprint",
        ),
        (
            "plan.buffer_size, plan.share.offset, plan.open_pieces]",
            "plan.buffer_size, plan.share.offset, 1]",
            "a window's piece count not in the fingerprint: a position of the older rule resumes in the newer",
        ),
        (
            "key = (shard.rank, shard.world_size, shard.worker_id, shard.num_workers, len(dataset.epoch_units))",
            "key = (shard.rank, shard.world_size, shard.num_workers, len(dataset.epoch_units))",
            "one worker's cached tag reused by another",
        ),
        (
            "not values[0] >= INHERITED_PHASE",
            "not values[0] >= 0",
            "a position in a restart's inherited rows refused",
        ),
    ],
    "families/row_share.py": [
        (
            "if rows >= max(self.buffer_size, 1) and index + 1 - edges[-1] >= fewest:",
            "if rows >= max(self.buffer_size, 1) and index + 1 - edges[-1] > fewest:",
            "a window one piece larger than it should be",
        ),
        (
            "if rows >= max(self.buffer_size, 1) and index + 1 - edges[-1] >= fewest:",
            "if rows >= max(self.buffer_size, 1) or index + 1 - edges[-1] >= fewest:",
            "a window closed at the piece count before it holds its rows",
        ),
        (
            "return (int(self.groups[block]), int(offset))",
            "return (int(self.units[block]), int(offset))",
            "a row's row group taken from its unit id",
        ),
        (
            'block = int(np.searchsorted(self.starts, flat, side="right")) - 1',
            'block = int(np.searchsorted(self.starts, flat, side="left")) - 1',
            "a block's first row taken as one past the previous block's last",
        ),
        (
            "return -(-self.total // self.workers)",
            "return self.total // self.workers",
            "the chunk rounded down: the remainder rows never drawn",
        ),
        (
            "start = self.offset + (round_index * self.workers + worker) * self.chunk",
            "start = self.offset + (worker * self.workers + round_index) * self.chunk",
            "the round and the worker swapped in a chunk's place",
        ),
        (
            "return self.offset + (round_index + 1) * self.workers * self.chunk",
            "return self.offset + round_index * self.workers * self.chunk",
            "a round's end taken as its start",
        ),
        (
            "count = min(int(layout.counts[block]) - offset, stop - t)",
            "count = min(int(layout.counts[block]), stop - t)",
            "a piece starting inside a block read past its end",
        ),
        (
            "        if self.buffer_size > 0 and len(pieces) > 1:\n            _generator(*self.seed, 0).shuffle(order)",
            "        if len(pieces) > 1:\n            _generator(*self.seed, 0).shuffle(order)",
            "buffer_size 0 still shuffles the pieces",
        ),
        (
            "                if done[k] < self.pieces[piece_index].count:",
            "                if done[k] <= self.pieces[piece_index].count:",
            "a piece fully drawn listed as left to read",
        ),
        (
            "            left += [(piece, 0) for piece in self.pieces[int(self.edges[window + 1]) :]]\n",
            "",
            "a resumed round's later windows never read",
        ),
    ],
    "families/reads.py": [
        (
            "return parquet_ahead.file_tasks(path, first, first + 1 if single else stop, self.columns, files, footer)",
            "return parquet_ahead.file_tasks(path, first, stop, self.columns, files, footer)",
            "an inherited row's whole file read ahead, not its row group",
        ),
        (
            "            if footer.future is None:\n                yield Early(footer)",
            "            yield Early(footer)",
            "a file whose footer was started asked to open again",
        ),
        (
            "by_file[found[0]][found[1]] += 1",
            "by_file[found[0]][found[1]] = 1",
            "a row group pinned once for two buffered rows: the second rebuild reads it again",
        ),
        (
            'ahead.pin(self._task(key), {("row", key): (_same, count)})',
            'ahead.pin(self._task(key), {("row", key): (_same, 1)})',
            "a line buffered twice pinned for one rebuild",
        ),
        (
            "                if phases > 2:\n                    break",
            "                if phases > 1:\n                    break",
            "the look ahead stops at the next phase: no file of the next pass opened early",
        ),
        (
            "if phase is not None and phase.whole and phase.number >= 0 and not units:",
            "if phase is not None and phase.number >= 0 and not units:",
            "a resumed phase with nothing left stops the read-ahead",
        ),
        (
            "            while len(held) > limit:",
            "            while len(held) >= limit:",
            "one kept value fewer than the limit",
        ),
        (
            "            if key in held:\n                held.move_to_end(key)\n                return held[key]",
            "            if key in held:\n                return held[key]",
            "the kept values evicted oldest-made, not least-used",
        ),
        (
            "if ahead is None or ahead.closed or ahead.budget != budget_bytes:",
            "if ahead is None or ahead.closed:",
            "a new budget not applied to a running read-ahead",
        ),
        (
            "            if ahead.following is plan:\n                ahead.close()",
            "            ahead.close()",
            "an older stream's end stops a newer stream's read-ahead",
        ),
    ],
    "families/unit_plan.py": [
        (
            "if world_size < 1 or not 0 <= local_rank < world_size:",
            "if world_size < 1 or not 0 <= local_rank <= world_size:",
            "a rank equal to the world size accepted",
        ),
        (
            "return (self.epoch_seed, id(self.data_paths), len(self.data_paths))",
            "return (self.epoch_seed, len(self.data_paths))",
            "units replaced by as many others keep the old epoch order",
        ),
        (
            "random.Random(self.epoch_seed).shuffle(view)",
            "random.shuffle(view)",
            "the epoch order drawn from the global random stream",
        ),
        (
            "        key += seed_tail(self.epoch_seed)  # a seed beyond 32 bits",
            "        # a seed beyond 32 bits",
            "two seeds equal in their low 32 bits give the same rows' choices",
        ),
        (
            "key = [self.epoch_seed & 0xFFFFFFFF, stable_hash(self.name), int(unit_id), *position]",
            "key = [self.epoch_seed & 0xFFFFFFFF, int(unit_id), *position]",
            "two groups' rows at the same address make the same choices",
        ),
        (
            '        held = self.__dict__.get("_row_plan")\n        if held is None or held[0] != key:',
            '        held = self.__dict__.get("_row_plan")\n        if held is None:',
            "one worker's row plan reused by another",
        ),
        (
            'offset = getattr(self.restart_plan, "row_offset", 0) or 0',
            "offset = 0",
            "an elastic restart's rounds start at the old run's first",
        ),
        (
            "needed = self.world_size * max(num_workers, 1)",
            "needed = self.world_size * num_workers",
            "no DataLoader workers: no unit needed",
        ),
        (
            "        if not self.walks_rows():  # the walk by rows feeds any worker count\n            self.check_enough(num_units, self.num_workers)",
            "        self.check_enough(num_units, self.num_workers)",
            "the walk by rows refuses fewer files than workers",
        ),
    ],
    "families/row_plan.py": [
        (
            "        if extent is None:\n            blocks.append((unit_id, 0 if depth == 2 else -1, 1))\n            continue",
            "        if extent is None:\n            continue",
            "an unreadable unit left out of the layout: its skip never counted",
        ),
        (
            "blocks.append((unit_id, group, inner[1] if inner is not None else 1))",
            "blocks.append((unit_id, group, inner[1] if inner is not None else 0))",
            "an unreadable row group left out of the layout",
        ),
        ("last = offset == piece.count - 1", "last = offset == piece.count", "a piece's reader never closed"),
        (
            "order = RoundOrder(pieces, self.buffer_size, (*self.seed, self.worker, round_index), self.open_pieces)",
            "order = RoundOrder(pieces, self.buffer_size, (*self.seed, round_index), self.open_pieces)",
            "every worker's rounds shuffled alike",
        ),
        ("            seen += piece.count\n", "", "a restart's leftover shared as if each piece started the list"),
        ("        plan.shuffle_buffer_size,\n", "", "a new shuffle_buffer_size keeps the old row plan"),
        (
            "return plan.epoch_seed & 0xFFFFFFFF, stable_hash(plan.name)",
            "return plan.epoch_seed & 0xFFFFFFFF, 0",
            "two groups' rounds shuffled alike",
        ),
        (
            "[piece.block, piece.pass_index, piece.start + done, piece.count - done]",
            "[piece.block, piece.pass_index, piece.start + done, piece.count]",
            "a leftover piece counted whole past its drawn rows",
        ),
    ],
    "checkpoint/inputs.py": [
        (
            'return not path.endswith(".parquet") and not storage.is_remote(path)',
            'return not path.endswith(".parquet")',
            "remote inputs digested again: every remote tar read at start-up",
        ),
        ("if len(files) <= MAX_LISTED:", "if len(files) < MAX_LISTED:", "the listing limit off by one"),
        (
            "if old_hash and not colon and old[0] == new[0] and old_time == new_time:",
            "if old_hash and not colon and old[0] == new[0]:",
            "an old checkpoint's digest read even where the time already shows the change",
        ),
        (
            "if old_hash and new_hash and old_hash != new_hash:",
            "if old_hash != new_hash:",
            "a remote file's new time reported as different content",
        ),
        (
            "    files = [file_entry(path, listed.get(path)) for path in sorted(set(paths))]",
            "    files = [file_entry(path, listed.get(path)) for path in sorted(paths)]",
            "a file repeated to fill num_used_data listed once per use",
        ),
        (
            "        elif len(old) > 1 and old[1:] != new[1:]:",
            "        elif old[1:] != new[1:]:",
            "a checkpoint of sizes only reported as changed",
        ),
        (
            "                handle.seek(max(size - _LEGACY_HASHED_BYTES, _LEGACY_HASHED_BYTES))",
            "                handle.seek(size - _LEGACY_HASHED_BYTES)",
            "an old stamp's tail read overlapping its head",
        ),
    ],
    "media/photos.py": [
        ("_SWAPS_SIDES = (5, 6, 7, 8)", "_SWAPS_SIDES = (6, 8)", "only the rotations counted as sideways"),
        (
            "    5: Image.Transpose.TRANSPOSE,\n    6: Image.Transpose.ROTATE_270,\n    7: Image.Transpose.TRANSVERSE,",
            "    5: Image.Transpose.TRANSVERSE,\n    6: Image.Transpose.ROTATE_270,\n    7: Image.Transpose.TRANSPOSE,",
            "transpose and transverse swapped",
        ),
        (
            'out_mode = "RGBA" if mode == "RGBA" else "RGB"',
            'out_mode = "RGB"',
            "an RGBA photo's alpha lost by the colour transform",
        ),
        (
            "image = in_srgb(high_bit_depth_to_8bit(wide_png_to_8bit(image)))",
            "image = high_bit_depth_to_8bit(wide_png_to_8bit(image))",
            "the colour profile not applied",
        ),
        (
            "        turned.info[ORIGINAL_SIZE_KEY] = original[::-1] if swaps_sides(orientation) else tuple(original)",
            "        turned.info[ORIGINAL_SIZE_KEY] = tuple(original)",
            "a drafted image's original size not turned with it",
        ),
        ('_ICC_MODES = ("RGB", "RGBA", "CMYK")', '_ICC_MODES = ("RGB", "RGBA")', "a CMYK photo's profile ignored"),
        (
            '    if image.mode == "RGBA" or image.info.get("transparency") is not None:\n        return on_white(image)\n    return _as_rgb(image)\n\n\n@',
            "    if image.mode in _ALPHA_MODES:\n        return on_white(image)\n    return _as_rgb(image)\n\n\n@",
            "the reference's rule given the viewer's alpha modes",
        ),
        (
            '    if image.mode in _ALPHA_MODES or image.info.get("transparency") is not None:\n        return on_white(image)\n    return _as_rgb(image)\n\n\ndef exif',
            "    if image.mode in _ALPHA_MODES:\n        return on_white(image)\n    return _as_rgb(image)\n\n\ndef exif",
            "a palette photo's transparency entry not composited",
        ),
        (
            '    gray = Image.fromarray(((np.clip(values, 0, 65535) * 255 + 32767) // 65535).astype(np.uint8), "L")',
            '    gray = Image.fromarray((np.clip(values, 0, 65535) // 256).astype(np.uint8), "L")',
            "16-bit grey scaled by its high byte only",
        ),
        (
            '        if "srgb" in (ImageCms.getProfileDescription(source) or "").lower().replace(" ", ""):',
            '        if "srgb" in (ImageCms.getProfileDescription(source) or ""):',
            "an sRGB profile named in capitals transformed anyway",
        ),
    ],
    "nemo/video.py": [
        (
            "    rng = np.random.default_rng() if rng is None else rng\n    path = os.fspath(video_path)",
            "    rng = np.random.default_rng(0) if rng is None else rng\n    path = os.fspath(video_path)",
            "a fixed seed where NeMo's callers pass no generator",
        ),
        (
            "vlen, offset = int((end - start) * fps), int(start * fps)",
            "vlen, offset = int(end * fps), int(start * fps)",
            "a clip's length taken from its end, not its duration",
        ),
        (
            "    except (VideoDecodeError, MemoryError):\n        raise\n    except Exception as err:",
            "    except (VideoDecodeError, MemoryError):\n        raise\n    except ValueError as err:",
            "a missing or bad file's own error escapes unnamed",
        ),
        (
            "picked = [int(start) + int(fix_start) for start in starts]",
            "picked = [int(start) + int(fix_start) - 1 for start in starts]",
            "fix_start counted from one",
        ),
        (
            '    if fix_start is None or sample != "middle":',
            "    if fix_start is None:",
            "fix_start applied to 'rand' too, which the reference ignores",
        ),
        (
            "    return picked + [picked[-1]] * (num_frames - segments)",
            "    return picked",
            "a short video's fixed-start frames not padded to num_frames",
        ),
        (
            "return int(rng.integers(min_num_frames, num_frames + 1))",
            "return int(rng.integers(min_num_frames, num_frames))",
            "num_frames itself never drawn",
        ),
        (
            "    return decode_frames(path, [index + offset for index in chosen])",
            "    return decode_frames(path, chosen)",
            "a clip's frames read from the video's start",
        ),
        (
            "    rng = np.random.default_rng() if rng is None else rng\n    folder = os.fspath(video_path)",
            "    rng = np.random.default_rng(0) if rng is None else rng\n    folder = os.fspath(video_path)",
            "a frame folder read with a fixed seed where no generator is passed",
        ),
        (
            "names = sort_frames(sorted(os.listdir(folder)))",
            "names = sort_frames(os.listdir(folder))",
            "frames of equal number in the listing's order",
        ),
        (
            "chosen = get_frame_indices(count, vlen, sample, fix_start, input_fps=fps, rng=rng)",
            "chosen = get_frame_indices(count, vlen, sample, fix_start, rng=rng)",
            "'fps<r>' sampling at one frame per second whatever the video's rate",
        ),
    ],
    "sources/tar_walk.py": [
        (
            "        if at > expected:\n            yield Damaged(expected, at)",
            "        if at > expected + BLOCK:\n            yield Damaged(expected, at)",
            "one damaged block not counted",
        ),
        (
            "            yield info.name, info.offset_data, info.size",
            "            yield info.name, info.offset, info.size",
            "a member's header taken for its data",
        ),
        (
            "    if size - expected < BLOCK:",
            "    if size - expected < 0:",
            "a tar with no end-of-archive block taken as whole",
        ),
        (
            "        yield Damaged(expected, min(size, -(-last // BLOCK) * BLOCK))",
            "        yield Damaged(expected, last)",
            "a damaged tail not rounded to whole blocks",
        ),
        (
            "        if size < 0 or size > EXTENDED_LIMIT:",
            "        if size > EXTENDED_LIMIT:",
            "a read to the end of the file (size -1) let through while walking",
        ),
        (
            "        except (tarfile.HeaderError, UnicodeError, ValueError, OverflowError):",
            "        except tarfile.HeaderError:",
            "a garbage block that breaks the parser otherwise ending the listing",
        ),
        (
            "        if info.isfile():\n",
            "        if not info.isdir():\n",
            "a link member taken for a file",
        ),
    ],
    "sources/tar_index.py": [
        (
            "    new[1:] = (blocks[1:] != blocks[:-1]) | (starts[1:] - ends[:-1] > GAP_BYTES)",
            "    new[1:] = blocks[1:] != blocks[:-1]",
            "a block read whole, gaps and all (the 300 MB .mp4 between two members)",
        ),
        (
            "        if start <= at and at + size <= start + len(piece):",
            "        if start <= at and at + size < start + len(piece):",
            "a member ending at its range's end not found",
        ),
        (
            "    first_byte = np.maximum.accumulate(np.where(usable, first_byte, 0))",
            "    first_byte = np.where(usable, first_byte, 0)",
            "a refused key starting a block of its own",
        ),
        (
            "                if len(data) != end - start:",
            "                if len(data) < 0:",
            "a short read of a block taken as whole",
        ),
        (
            "    range_ends = np.maximum.reduceat(ends, heads)",
            "    range_ends = ends[np.append(heads[1:], len(ends)) - 1]",
            "a range ending at its last-listed member, not the furthest end",
        ),
        (
            '        and chosen["problem"].max() < len(PROBLEMS)',
            '        and chosen["problem"].max() <= len(PROBLEMS)',
            "a cached problem code one past the known ones trusted",
        ),
        (
            '        return reason, self._keys[at + key_len : at + text_len].decode("utf-8", "surrogateescape")',
            '        return reason, self._keys[at : at + text_len].decode("utf-8", "surrogateescape")',
            "a refused key's particulars read with its key",
        ),
        (
            "            idle, self._idle = self._idle, []",
            "            idle = list(self._idle)",
            "closed handles kept for the next block",
        ),
        (
            "        except BaseException:\n            handle.close()\n            raise",
            "        except BaseException:\n            with self._handles_lock:\n                self._idle.append(handle)\n            raise",
            "a handle whose read failed reused for the next block",
        ),
    ],
    "families/unit_kinds.py": [
        (
            "                    if count is None:\n                        continue\n                    counts[path] = count",
            "                    if count is None:\n                        count = 0\n                    counts[path] = count",
            "an unreadable file's count kept: never asked again",
        ),
        (
            "        if counts is None or row_group >= len(counts):",
            "        if counts is None or row_group > len(counts):",
            "a row group past the file's last taken as one",
        ),
        (
            '        return "row", span.rows(counts[row_group]).stop, f"{span.path}, row group {row_group}"',
            '        return "row", counts[row_group], f"{span.path}, row group {row_group}"',
            "a unit below the row group extended to the whole group",
        ),
        (
            "            return path, row_group, row_group + 1",
            "            return path, row_group, row_group + 2",
            "read-ahead fetching the next row group too",
        ),
        (
            "return sorted({unit[0] if isinstance(unit, tuple) else unit for unit in units or ()})",
            "return sorted({unit for unit in units or ()})",
            "a row-group unit's tuple recorded as an input file",
        ),
        (
            "            num_units if self.asked is None else self.asked,",
            "            num_units,",
            "a JSONL group's error names the line count, not the num_used_data configured",
        ),
        (
            "                    count = row_groups(path, data_dir)",
            "                    count = row_groups(path, data_dir_list[0])",
            "every file's row groups asked under the first folder",
        ),
        ("            listed_files.update(listed)\n", "", "the files' listed sizes and times kept for none"),
    ],
    "tools/shuffle_hold.py": [
        (
            "if hold is None or hold.per_worker_mb <= HOLD_WARNING_MB:",
            "if hold is None or hold.per_worker_mb < HOLD_WARNING_MB:",
            "a warning at the limit itself",
        ),
        (
            "return ShuffleHold(int(units.open_pieces), largest / 2**20, read)",
            "return ShuffleHold(8, largest / 2**20, read)",
            "the default's piece count taken for every window",
        ),
        (
            "    if units.data_paths is None or units.shuffle_buffer_size <= 0 or not units.walks_rows():",
            "    if units.data_paths is None or not units.walks_rows():",
            "an estimate for a shuffle that is off",
        ),
        (
            "    looked = paths[:: max(1, len(paths) // LOOKED_AT)][:LOOKED_AT]",
            "    looked = paths",
            "every footer read, however many files",
        ),
        (
            "        largest, read = max([largest, *sizes]), read + 1",
            "        largest, read = max([0, *sizes]), read + 1",
            "the last file's largest row group taken for all",
        ),
    ],
    "checkpoint/orders.py": [
        (
            "        if order is None:  # before the record, or the group did not walk by rows then\n"
            '            group.set_row_order({**current, "open_pieces": LEGACY_OPEN_PIECES})\n'
            "            continue\n",
            "        if order is None:  # before the record, or the group did not walk by rows then\n"
            "            continue\n",
            "an older checkpoint resumed under today's window rule",
        ),
        (
            '        if order["shuffle_buffer_size"] != current["shuffle_buffer_size"]:',
            "        if False:",
            "another shuffle_buffer_size resumed without a word",
        ),
        ("        group.set_row_order(order)\n", "", "the checkpoint's piece count not followed"),
        (
            'return _count(order["shuffle_buffer_size"]) and _count(order["open_pieces"]) and order["open_pieces"] >= 1',
            'return _count(order["shuffle_buffer_size"]) and _count(order["open_pieces"])',
            "a window of no pieces accepted",
        ),
        (
            "if not isinstance(orders, Mapping) or sorted(orders) != sorted(names):",
            "if not isinstance(orders, Mapping):",
            "a record naming other groups read with a bare KeyError",
        ),
    ],
    "sources/parquet.py": [
        (
            "part = table.slice(start, min(READ_ROWS, end - start))",
            "part = table.slice(start, READ_ROWS)",
            "a slice read past the stop row",
        ),
        (
            "            lost(start, part.num_rows, exc)\n            continue",
            "            lost(start, part.num_rows, exc)\n            return",
            "a lost slice ends the row group's rows",
        ),
        (
            "    end = table.num_rows if stop is None else min(stop, table.num_rows)",
            "    end = table.num_rows",
            "the stop row ignored: a piece reads its whole row group",
        ),
    ],
    "checkpoint/tokens.py": [
        (
            "    if saved is None or current is None:\n        return\n    if not isinstance(saved, Mapping)",
            "    if saved is None:\n        return\n    if not isinstance(saved, Mapping)",
            "a resume with no tokenizer now fails on the saved fingerprint",
        ),
        ('_COMPARED = ("size", "special", "probe")', '_COMPARED = ("size", "probe")', "special ids not compared"),
        (
            "    if not isinstance(saved, Mapping) or not set(_COMPARED) <= set(saved):",
            "    if not isinstance(saved, Mapping):",
            "a fingerprint missing a field fails with a bare KeyError",
        ),
        (
            '    special = {f"packer.{name}": int(value) for name, value in special_tokens.items()}',
            "    special = {name: int(value) for name, value in special_tokens.items()}",
            "the packer's ids recorded under the tokenizer's own names",
        ),
        (
            "        if token is not None:\n            special[name] = token",
            "        special[name] = token",
            "a special token the tokenizer cannot convert recorded as None",
        ),
        (
            '    more = f" and {len(special) - 6} more" if len(special) > 6 else ""',
            '    more = f" and {len(special) - 6} more" if len(special) >= 6 else ""',
            "six special tokens described as 'and 0 more'",
        ),
        (
            "names.extend([value] if isinstance(value, str) else [v for v in value or () if isinstance(v, str)])",
            "names.extend([value] if isinstance(value, str) else [])",
            "additional special tokens (a list) left out",
        ),
        (
            "    return int(token) if isinstance(token, int) else None",
            "    return int(token) if token is not None else None",
            "a non-int id (a list for an unknown token) taken as an id",
        ),
    ],
    "checkpoint/checks.py": [
        (
            '(key != "data_seed" and saved[key] < 0)',
            "saved[key] < 0",
            "a negative data seed refused",
        ),
        ("    if packs > tokens:", "    if packs >= tokens:", "a checkpoint of one-token packs refused"),
        (
            '        if _entry(f"{field}.carry", carry, group_names) in seen:\n',
            "        if False:\n",
            "a carried row also in the buffer packed twice",
        ),
        (
            "    if cursor[0] < INHERITED_PHASE or any(value < 0 for value in cursor[1:]):",
            "    if cursor[0] < 0 or any(value < 0 for value in cursor[1:]):",
            "an inherited-phase cursor refused",
        ),
        (
            "        if drawn_to is None or tuple(cursor) > tuple(drawn_to):",
            "        if drawn_to is None or tuple(cursor) >= tuple(drawn_to):",
            "the last drawn row refused in the buffer",
        ),
        (
            "            if worker_id < 0:\n",
            "            if worker_id < -1:\n",
            "a worker id of -1 taken (the last worker)",
        ),
        (
            "    if position is not None and (not values or not all(_is_int(v) and v >= 0 for v in values)):",
            "    if not values or not all(_is_int(v) and v >= 0 for v in values):",
            "a worker with no position yet refused",
        ),
        (
            '    return "the row group" if position == length - 2 else f"entry {position}"',
            '    return "the row group" if position == 2 else f"entry {position}"',
            "a cursor's entries named from the front",
        ),
        (
            "    if samples > tokens:\n",
            "    if samples > tokens + len(saved['samples']):\n",
            "samples checked per group, not in all",
        ),
    ],
    "media/video_decode.py": [
        (
            "    if wanted[-1] >= len(table.frame_pts):",
            "    if wanted[-1] > len(table.frame_pts):",
            "the frame one past the table taken as demuxed",
        ),
        (
            "            if frame.pts < floor:\n                continue",
            "            if frame.pts is None:\n                continue",
            "an open GOP's leading pictures taken after a seek",
        ),
        (
            "        elif frames is None or position is None or start > position:",
            "        elif frames is None or position is None:",
            "a far frame decoded on to instead of seeking",
        ),
        (
            "            if position >= target:\n                break",
            "            if position > target:\n                break",
            "one frame past the wanted one decoded before the next seek",
        ),
        (
            "                if frame.pts in index_of and index_of[frame.pts] not in found:",
            "                if frame.pts in index_of:",
            "a repeated timestamp's later frame replacing the first",
        ),
        (
            "            if done and len(found) == len(wanted):",
            "            if done:",
            "a decode past the last wanted frame returning with one missing",
        ),
        (
            "    missing = min(wanted - set(found))",
            "    missing = max(wanted - set(found))",
            "the error naming the last missing frame, not the first",
        ),
        (
            '    degrees = round(getattr(frame, "rotation", 0) or 0) % 360 if upright else 0',
            '    degrees = round(getattr(frame, "rotation", 0) or 0) if upright else 0',
            "a phone's -90 rotation not turned",
        ),
        (
            "        images.append(found[i].copy() if i in used else found[i])",
            "        images.append(found[i])",
            "a repeated index sharing one image",
        ),
    ],
    "media/video_remote.py": [
        (
            "    if video is None or video.frames <= 0 or len(video.index_entries) != video.frames:",
            "    if video is None or video.frames <= 0:",
            "an index that lists only some frames (Matroska's cues) taken as whole",
        ),
        (
            "            merged[-1] = (merged[-1][0], max(merged[-1][1], stop))",
            "            merged[-1] = (merged[-1][0], stop)",
            "a packet inside the previous one shrinking the merged range",
        ),
        (
            "        if entry.pos >= 0 and entry.size > 0",
            "        if entry.size > 0",
            "an index entry of unknown position (-1) hollowed",
        ),
        (
            "            if start <= at and at + length <= start + len(data):",
            "            if start <= at and at + length < start + len(data):",
            "a read ending at its window's end fetched again",
        ),
        (
            "        self._windows = [*self._windows[-(_WINDOWS - 1) :], (at, data)]",
            "        self._windows = [(at, data)]",
            "only the last fetched range kept: every jump to the header fetched again",
        ),
        (
            "        if length >= _PROBE // 2:",
            "        if length > 0:",
            "the bandwidth measured on small requests",
        ),
        (
            "        self.round_trip = seconds if self.round_trip is None else min(self.round_trip, seconds)",
            "        self.round_trip = seconds",
            "the round trip taken from the latest request, not the quickest",
        ),
        (
            "        return rest if rest <= wanted + _PROBE else wanted",
            "        return wanted",
            "a small tail left for one more request",
        ),
        (
            "        if not payload:\n            hollow.read_ahead()\n",
            "        if not payload:\n",
            "a video without an index demuxed one request per read",
        ),
        (
            "        return probe_stream(container, stream, [entry.is_keyframe for entry in stream.index_entries])",
            "        return probe_stream(container, stream)",
            "keyframe flags read from zeroed payload",
        ),
    ],
    "media/video_open.py": [
        (
            "    if width * height > MAX_FRAME_PIXELS:",
            "    if width * height >= MAX_FRAME_PIXELS:",
            "a frame of exactly the pixel bound refused",
        ),
        (
            '_OPTIONS = {"format_whitelist": ",".join(CONTAINERS), "protocol_whitelist": "file"}',
            '_OPTIONS = {"protocol_whitelist": "file"}',
            "any demuxer allowed (playlists, concat lists)",
        ),
        (
            "    except av.FFmpegError as err:",
            "    except av.InvalidDataError as err:",
            "a missing or unreadable file's error escaping unnamed",
        ),
        (
            "    width, height = stream.codec_context.width or 0, stream.codec_context.height or 0",
            "    width, height = stream.codec_context.width or 0, stream.codec_context.width or 0",
            "the frame's width taken for its height",
        ),
        (
            '    "mov", "mp4", "m4a", "3gp", "3g2", "mj2", "matroska", "webm",',
            '    "mov", "mp4", "m4a", "3gp", "3g2", "mj2", "matroska",',
            "WebM left out of the allowed demuxers",
        ),
    ],
    "media/video_probe.py": [
        (
            '        at = int(np.searchsorted(self.seek_pts, pts, side="right"))',
            '        at = int(np.searchsorted(self.seek_pts, pts, side="left"))',
            "a keyframe not a seek point for its own frame",
        ),
        (
            "        if packet.size == 0:  # the demuxer's end-of-stream marker\n            continue",
            "        if packet.size == 0:  # the demuxer's end-of-stream marker\n            pass",
            "the end-of-stream marker counted as a packet",
        ),
        (
            "    rate = rate if rate > 0 else 1.0",
            "    rate = rate if rate >= 0 else 1.0",
            "a zero frame rate kept",
        ),
        (
            "        count = stream.frames if stream.frames > 0 else len(timestamps)",
            "        count = stream.frames",
            "a header without a frame count taken as no frames",
        ),
        (
            "if len(keyframes) >= len(timestamps) else [False] * len(timestamps)",
            "if len(keyframes) == len(timestamps) else [False] * len(timestamps)",
            "a cut file's longer index not trusted for the packets that are there",
        ),
        (
            "    while tail and corrupt[tail - 1]:\n        tail -= 1",
            "    if tail and corrupt[tail - 1]:\n        tail -= 1",
            "only the last of several corrupt packets left out",
        ),
        (
            "        shown &= pts >= pts[first]",
            "        shown &= pts >= 0",
            "the first keyframe's leading pictures counted",
        ),
        (
            "    return keyframe & (before < pts)",
            "    return keyframe & (before <= pts)",
            "a keyframe after a packet of its own timestamp taken as safe",
        ),
        (
            "            while len(self._tables) > self._size:",
            "            while len(self._tables) >= self._size:",
            "the table cache holding one fewer than its size",
        ),
        (
            "            if table is not None:\n                self._tables.move_to_end(key)",
            "            if table is not None:\n                pass",
            "the table cache evicting the most used table first",
        ),
    ],
    "media/video_tables.py": [
        (
            "    handle.seek(max(size - _ENDS, 0))",
            "    handle.seek(size - _ENDS)",
            "a file under 16 KiB seeking before its start",
        ),
        (
            "json.dumps([_FORMAT, path, size, _modified_ns(path)])",
            "json.dumps([_FORMAT, path, size])",
            "a rewritten object with the same size and ends keeping its old table",
        ),
        (
            "    digest.update(head)\n    digest.update(tail)",
            "    digest.update(head)",
            "a remux that rewrites the Cues keeping the old table",
        ),
        (
            "    steps = np.diff(pts, prepend=np.int64(0)) if pts is not None",
            "    steps = np.diff(pts) if pts is not None",
            "the first timestamp lost in the stored steps",
        ),
        (
            "    if has_pts and count != len(steps):",
            "    if has_pts and count < len(steps):",
            "a count above its timestamps trusted",
        ),
        (
            "np.any(steps[1:] < 0)",
            "np.any(steps < 0)",
            "a negative first timestamp taken for damage",
        ),
        (
            '    if not demuxed:\n        _count("shared")',
            '    if True:\n        _count("shared")',
            "a table demuxed here counted shared",
        ),
        (
            "        return _unstored(folder, error, demuxed[0] if demuxed else demux())",
            "        return _unstored(folder, error, demux())",
            "a table that could not be stored demuxed twice",
        ),
        (
            "    except FileNotFoundError:\n        return None\n",
            "",
            "a table not built yet counted damaged",
        ),
    ],
    "media/fast_decode.py": [
        (
            "    ratio = min(width // max(1, target[0]), height // max(1, target[1]))",
            "    ratio = max(width // max(1, target[0]), height // max(1, target[1]))",
            "the scale chosen by the larger side: the other side drafted under its target",
        ),
        (
            "    return next((s for s in (8, 4, 2) if ratio >= s), 1)",
            "    return next((s for s in (8, 4, 2) if ratio > s), 1)",
            "an exact factor of two not drafted",
        ),
        (
            "        return max(n[0] for n in needs), max(n[1] for n in needs)",
            "        return min(n[0] for n in needs), min(n[1] for n in needs)",
            "the smallest need wins: an exact transform drafted",
        ),
        (
            "        decoded.info[ORIGINAL_SIZE_KEY] = (width, height)",
            "        decoded.info[ORIGINAL_SIZE_KEY] = decoded.size",
            "the drafted size recorded as the original",
        ),
        (
            "else (draft_size[0], draft_size[1])",
            "else (draft_size[1], draft_size[0])",
            "a fixed draft size's sides swapped",
        ),
    ],
    "media/safe_read.py": [
        (
            '        if target == base or target.startswith(base + "/"):',
            "        if target == base or target.startswith(base):",
            "a sibling folder sharing the root's prefix taken as inside",
        ),
        (
            "    return os.path.realpath(path)  # symlinks and `..` resolved before the check",
            "    return os.path.abspath(path)  # symlinks and `..` resolved before the check",
            "a symlink out of the root followed",
        ),
        (
            "    if status.st_size > max_bytes:",
            "    if status.st_size >= max_bytes:",
            "a file of exactly the limit refused",
        ),
        (
            "        data = handle.read(max_bytes + 1)",
            "        data = handle.read(max_bytes)",
            "a file grown past the limit since the stat cut short, not refused",
        ),
        (
            "        if (info.size or 0) > max_bytes:",
            "        if (info.size or 0) > max_bytes and info.size is None:",
            "a remote file's size not checked",
        ),
        (
            "        if width * height > max_pixels:",
            "        if width * height > max_pixels and width > 1 and height > 1:",
            "a one-pixel-high strip over the pixel bound read",
        ),
        (
            "        if upper not in names:\n            names.append(upper)",
            "        names.append(upper)",
            "an allowed format named again listed twice",
        ),
        (
            "        upper = str(name).upper() if isinstance(name, str) else name",
            "        upper = name",
            "a lower-case format name refused",
        ),
        (
            "        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):",
            "        if not stat.S_ISREG(mode):",
            "a frame folder refused",
        ),
    ],
    "sources/tar_members.py": [
        (
            '        stem, dot, ext = base.partition(".")',
            '        stem, dot, ext = base.rpartition(".")',
            "a key cut at the last dot (`a.seg.png` keyed `a.seg`)",
        ),
        (
            '        key = f"{folder}/{stem}" if folder else stem',
            "        key = stem",
            "the same name in two folders taken for one key",
        ),
        (
            '        if first is not member and role != "other":',
            "        if first is not member:",
            "two unused members of a key refusing it",
        ),
        (
            'large = [m for role, m in members.items() if role != "other" and m.size > MAX_MEMBER_BYTES]',
            "large = [m for role, m in members.items() if m.size > MAX_MEMBER_BYTES]",
            "a large member the sample never reads refusing it",
        ),
        (
            '    if "txt" in members or "json" in members:',
            '    if "txt" in members:',
            "a key with a .json and no image called image-missing",
        ),
        (
            "    if not 0 <= label < len(class_names):",
            "    if not label < len(class_names):",
            "a negative class label read from the end of the names",
        ),
        (
            "                names = [line.strip() for line in handle if line.strip()]",
            "                names = [line.strip() for line in handle]",
            "a blank line in the class-name file counted as a class",
        ),
        (
            '    return ext if ext in ("txt", "json", "cls") else "other"',
            '    return ext if ext in ("txt", "json") else "other"',
            "a .cls member not read",
        ),
        (
            '    if tars or not any(path.suffix == ".parquet" for path in files):',
            "    if tars:",
            "a folder of only compressed tars not refused by name",
        ),
    ],
    "sources/read_ahead.py": [
        (
            "                self.window = min(self.window + 1, MAX_AHEAD)",
            "                self.window = self.window + 1",
            "the window growing past MAX_AHEAD",
        ),
        (
            "                if pinned[2] <= 0:",
            "                if pinned[2] < 0:",
            "a pinned row kept for one take more than asked",
        ),
        (
            "        return not self._waits_for_size(task) and self.held + self._charge(task) <= self.budget",
            "        return not self._waits_for_size(task) and self.held + self._charge(task) < self.budget",
            "a task that fills the budget exactly held back",
        ),
        (
            "    def _release(self, task: Task) -> None:\n        if not task.released:",
            "    def _release(self, task: Task) -> None:\n        if True:",
            "a task released twice",
        ),
        (
            "            if not task.released:\n                self.held += actual - task.charged",
            "            if True:\n                self.held += actual - task.charged",
            "a task dropped before its fetch ended charged again when it ends",
        ),
        (
            "            self._expansion[kind] = max(self._expansion.get(kind, 0.0), actual / task.estimate)",
            "            self._expansion[kind] = actual / task.estimate",
            "a kind's expansion taken from its latest task, not its most",
        ),
        (
            "            self._drop_queue()\n            self._plan, self._next, self.following = plan, None, plan",
            "            self._plan, self._next, self.following = plan, None, plan",
            "an old plan's tasks kept when a new plan is followed",
        ),
        (
            "            for task, _, _ in self._pinned.values():\n                self._release(task)",
            "            for task, _, _ in self._pinned.values():\n                pass",
            "pinned rows' bytes not freed at close",
        ),
        (
            "        if task.future is None and len(self._early) < max(1, self.window // 2) and room:",
            "        if task.future is None and len(self._early) <= max(1, self.window // 2) and room:",
            "one early task more than half the window",
        ),
    ],
    "sources/read_depth.py": [
        (
            "        wanted = math.ceil(fetch / max(work, MIN_WORK_S)) + 1",
            "        wanted = math.ceil(fetch / max(work, MIN_WORK_S))",
            "no fetch in flight for the one the stream waits on",
        ),
        (
            "    return new if old is None else old + SMOOTHING * (new - old)",
            "    return new",
            "no moving average: the latest measurement alone",
        ),
        (
            "        self.floor, self.ceiling = int(floor), max(int(ceiling), int(floor))",
            "        self.floor, self.ceiling = int(floor), int(ceiling)",
            "a ceiling below the floor kept",
        ),
        (
            "        while self._waiting and self._pool is not None and self._running < self.depth.threads():",
            "        while self._waiting and self._pool is not None and self._running <= self.depth.threads():",
            "one fetch more in flight than the depth",
        ),
        (
            "            self._running -= 1\n            self._dispatch()",
            "            self._running -= 1",
            "a finished fetch not starting the next waiting one",
        ),
        (
            "        return sum(nbytes_of(item) for item in value.values())",
            "        return sum(nbytes_of(item) for item in value)",
            "a dict's keys counted, not its values",
        ),
        (
            "            if self._closed:\n                future.cancel()\n                return future\n",
            "",
            "a fetch started after close runs",
        ),
        (
            "        if self._returned is not None:\n            work = time.perf_counter() - self._returned",
            "        if True:\n            work = time.perf_counter() - (self._returned or 0.0)",
            "the time before the first take counted as work",
        ),
    ],
    "sources/parquet_ahead.py": [
        (
            "        return table if read == wanted else inline()[1]",
            "        return table",
            "a row group fetched with other columns used as it is",
        ),
        (
            "    stop = opened.metadata.num_row_groups if stop is None else min(stop, opened.metadata.num_row_groups)",
            "    stop = opened.metadata.num_row_groups if stop is None else stop",
            "a plan past the file's last row group",
        ),
        (
            '    takes: dict = {("meta", path): (meta, sum(rows_per_group.values()))}',
            '    takes: dict = {("meta", path): (meta, 1)}',
            "a pinned footer answering one take only",
        ),
        (
            "        estimate = opened.metadata.row_group(index).total_byte_size",
            "        estimate = FOOTER_ESTIMATE",
            "a row group estimated at a footer's size",
        ),
        (
            "    for index in range(first, stop):",
            "    for index in range(first + 1, stop):",
            "the unit's first row group not planned",
        ),
        (
            "            except Exception as exc:  # the row's own take raises it, as an inline read would\n                groups[index] = exc",
            "            except Exception:  # the row's own take raises it, as an inline read would\n                continue",
            "a pinned row group's read error dropped: the row reads inline",
        ),
    ],
    "sources/splits.py": [
        (
            '        if re.match(rf"{re.escape(word)}(?=[-_.0-9])", name, re.IGNORECASE):',
            '        if re.match(rf"{re.escape(word)}(?=[-_.0-9])", name):',
            "a split word in capitals (`Train-0.parquet`) not read",
        ),
        (
            '        if re.match(rf"{re.escape(word)}(?=[-_.0-9])", name, re.IGNORECASE):',
            '        if re.match(rf"{re.escape(word)}(?=[-_.])", name, re.IGNORECASE):',
            "a split word followed by a digit (`test0.parquet`) not read",
        ),
        (
            "    if split is None and not set(present) & set(ALIASES.values()):",
            "    if split is None and not present:",
            "an unknown sharded name (`shard-00000-of-00009`) taken as a split",
        ),
        (
            "    return ALIASES.get(split.lower(), split)",
            "    return ALIASES.get(split, split)",
            "an alias in capitals not canonical",
        ),
        (
            '            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")',
            '            out.append("[" + body + "]")',
            "a glob's [!...] not negated",
        ),
        (
            '            out.append("(?:.*/)?")',
            '            out.append(".*/")',
            "`**/` not matching the top folder",
        ),
        (
            '            out.append("[^/]*")',
            '            out.append(".*")',
            "`*` spanning folders",
        ),
        (
            '            walked = _walk(folder, deep="/" in rest or "**" in rest)',
            '            walked = _walk(folder, deep="**" in rest)',
            "a pattern through a folder (`*/train.parquet`) not walked into",
        ),
        (
            "        return list_data_files(DataDir(inner, split) if split is not None else inner, suffixes, sort, aside)",
            "        return list_data_files(inner, suffixes, sort, aside)",
            "a Hub repository's split lost in its data/ folder",
        ),
    ],
    "sources/table_cells.py": [
        (
            '    return (_is_binary(fields["bytes"]) or pa.types.is_null(fields["bytes"])) and (',
            '    return _is_binary(fields["bytes"]) and (',
            "a struct of null bytes (paths only) refused",
        ),
        (
            '        "path" not in fields or _is_text(fields["path"]) or pa.types.is_null(fields["path"])',
            '        _is_text(fields["path"]) or pa.types.is_null(fields["path"])',
            "a struct without a path field fails with a KeyError",
        ),
        (
            "    return (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and _is_text(kind.value_type)",
            "    return pa.types.is_list(kind) or pa.types.is_large_list(kind)",
            "a list of numbers taken as captions",
        ),
        (
            "        if name is None or name not in schema.names:",
            "        if name is None:",
            "a named column missing fails with a KeyError",
        ),
        (
            "        if data:\n            return bytes(data)",
            "        if data is not None:\n            return bytes(data)",
            "an empty bytes field hiding the path",
        ),
        (
            "    if isinstance(value, str) and value:\n        return value",
            "    if isinstance(value, str):\n        return value",
            "an empty path taken as an image",
        ),
        (
            "    return [text.strip() for text in values if isinstance(text, str) and text.strip()]",
            "    return [text.strip() for text in values if isinstance(text, str)]",
            "blank captions kept",
        ),
        (
            '        texts = _json_captions(value) if value.lstrip().startswith("{") else None',
            '        texts = _json_captions(value) if value.startswith("{") else None',
            "JSON captions after a space read as one caption",
        ),
        (
            '    key = "image_column" if columns[0] not in schema.names else "caption_column"',
            '    key = "image_column"',
            "a missing caption column blamed on the image column",
        ),
    ],
    "sources/node_cache.py": [
        (
            "    info = os.lstat(root) if moveable else os.stat(root)",
            "    info = os.stat(root)",
            "a symlink planted at the default root followed",
        ),
        (
            "    if info.st_mode & 0o022:",
            "    if info.st_mode & 0o002:",
            "a group-writable root taken as safe",
        ),
        (
            '    return None if value.strip().lower() in ("", "off", "0", "none") else value',
            '    return None if value in ("", "off", "0", "none") else value',
            "`OFF` taken for a folder",
        ),
        (
            "        errno.EFBIG,  # over a file-size limit (`ulimit -f`)\n",
            "",
            "a file-size limit not taken as a cache that cannot be written",
        ),
        (
            "    if root not in _warned:\n        _warned.add(root)",
            "    if True:\n        _warned.add(root)",
            "a warning per call, not per root",
        ),
        (
            "        if not os.path.lexists(final):\n            _publish(final, write)",
            "        if True:\n            _publish(final, write)",
            "every waiter building again after the first",
        ),
        (
            "    except BaseException:\n        _remove(work)\n        raise",
            "    except BaseException:\n        raise",
            "a failed build's work files left behind",
        ),
        (
            '        if not moveable:\n            return f"others can write it',
            '        if moveable:\n            return f"others can write it',
            "a root set in the environment moved aside, the default refused",
        ),
    ],
    "sources/jsonl_cache.py": [
        (
            "    if any(file is None for file in files):",
            "    if all(file is None for file in files):",
            "an input that cannot be told unchanged keyed anyway",
        ),
        (
            "    if any(array.ndim != 1 or array.dtype != dtype for array, (_, dtype) in zip(arrays, kind.arrays)):",
            "    if any(array.ndim != 1 for array in arrays):",
            "a stored array of another type mapped",
        ),
        (
            "        or files.max() >= len(sizes)",
            "        or files.max() > len(sizes)",
            "a file id one past the inputs accepted",
        ),
        (
            "        or np.any(starts >= np.asarray(sizes, np.int64)[np.clip(files, 0, len(sizes) - 1)])",
            "        or np.any(starts > np.asarray(sizes, np.int64)[np.clip(files, 0, len(sizes) - 1)])",
            "an offset at a file's end accepted",
        ),
        (
            "    if len({len(array) for array in arrays}) != 1:\n        return False",
            "    if not arrays:\n        return False",
            "arrays of different lengths mapped",
        ),
        (
            "        if not node_cache.cannot_write(error):\n            raise",
            "        if False:\n            raise",
            "any OSError of the build taken for a full disk",
        ),
        (
            "    return [path if storage.is_uri(path) else inner, size, int(info.mtime_ns), local, digest]",
            "    return [path if storage.is_uri(path) else inner, size, int(info.mtime_ns), digest]",
            "a rewrite in place with the old time put back keeping the old index",
        ),
        (
            "        or line_numbers[picks].min() < 0\n",
            "",
            "a negative line number mapped",
        ),
    ],
}
