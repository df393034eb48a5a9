"""The reference's public module path, `bagel_data.datasets`: every name of NeMo AutoModel's
multimodal module, from the faces in `bagel_data.nemo` (the same objects, so
`bagel_data.datasets.DEFAULT_DATASET_INFO.update(...)` fills the one the doors read)."""

from .assembly import rank_data_status
from .nemo import *  # noqa: F403  (the mirror's names, re-exported as they are)
from .nemo import __all__ as _NEMO_NAMES

__all__ = [*_NEMO_NAMES, "rank_data_status"]
