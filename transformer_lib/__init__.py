"""transformer_lib: the tested components of *Transformers, built and seen*.

Every public name is importable from here, e.g. ``from transformer_lib import MultiHeadAttention``.
Masks everywhere are bool with True = may attend.
"""

from . import attention, config, data, decoder, embedding, encoder, interop, layers, masks, models, positional
from . import checkpoints, exercises, training, utils, viz  # noqa: F401
from .exercises import NotYetDone  # noqa: F401
from .attention import *  # noqa: F403
from .checkpoints import *  # noqa: F403
from .config import *  # noqa: F403
from .data import *  # noqa: F403
from .decoder import *  # noqa: F403
from .embedding import *  # noqa: F403
from .encoder import *  # noqa: F403
from .interop import *  # noqa: F403
from .layers import *  # noqa: F403
from .masks import *  # noqa: F403
from .models import *  # noqa: F403
from .positional import *  # noqa: F403
from .training import *  # noqa: F403
from .utils import *  # noqa: F403
from .viz import *  # noqa: F403

__version__ = "0.1.0"

__all__ = sorted(
    name
    for module in (
        attention,
        checkpoints,
        config,
        data,
        decoder,
        embedding,
        encoder,
        interop,
        layers,
        masks,
        models,
        positional,
        training,
        utils,
        viz,
    )
    for name in module.__all__
) + ["NotYetDone"]
