"""The packer's settings and the special token ids.

`PackingConfig` is `Settings` (`schema/settings.py`), the one definition of every setting,
under the name the packer and existing code use for it.
"""

from __future__ import annotations

import dataclasses

from ..schema.settings import Settings

PackingConfig = Settings


@dataclasses.dataclass(frozen=True)
class SpecialTokens:
    bos_token_id: int
    eos_token_id: int
    start_of_image: int
    end_of_image: int
