"""transformer_lib: the tested components of *Transformers, built and seen*.

Every public name is importable from here, e.g. ``from transformer_lib import MultiHeadAttention``.
Masks everywhere are bool with True = may attend. Importing the package runs nothing and draws
nothing: the figures in `viz` (and matplotlib's pyplot) and the checkers in `exercises` load the
first time one is used.

The names at the root are the modules' own ``__all__`` lists, in the book's order: a new public
function is added to its module's list and nowhere else.
"""

import importlib

from . import arithmetic, bart, bert, clip, codec, corpus, ctc, evidence, flash, flash_triton, hf, inside  # noqa: F401
from . import lora, moe  # noqa: F401
from . import quantization, reasoning, recipes, speculative, speech, surgery, viola, vit, wav2vec2  # noqa: F401
from .config import *  # noqa: F403
from .embedding import *  # noqa: F403
from .positional import *  # noqa: F403
from .attention import *  # noqa: F403
from .masks import *  # noqa: F403
from .layers import *  # noqa: F403
from .encoder import *  # noqa: F403
from .decoder import *  # noqa: F403
from .models import *  # noqa: F403
from .decoding import *  # noqa: F403
from .interop import *  # noqa: F403
from .tokenization import *  # noqa: F403
from .tasks import *  # noqa: F403
from .training import *  # noqa: F403
from .checkpoints import *  # noqa: F403
from .profiling import *  # noqa: F403
from .utils import *  # noqa: F403

__version__ = "0.1.0"

# the modules whose names sit at the root, in the book's order
_ROOT = (
    "config",
    "embedding",
    "positional",
    "attention",
    "masks",
    "layers",
    "encoder",
    "decoder",
    "models",
    "decoding",
    "interop",
    "tokenization",
    "tasks",
    "training",
    "checkpoints",
    "profiling",
    "utils",
)
# modules reached as tl.<name>: the plays, recipes, looking inside, experts, adapters, int8, Hugging Face, surgery,
# BERT and its pre-training, the Vision Transformer, the speech model, the chat model, alignment, the rule of evidence,
# CTC, BART's noising, wav2vec 2.0's parts, a codec's residual vector quantizer, VioLA's tasks in one model,
# FlashAttention written out, CLIP,
# speculative decoding, addition written out
_SUBMODULES = (
    "corpus",
    "recipes",
    "inside",
    "moe",
    "lora",
    "quantization",
    "hf",
    "surgery",
    "bert",
    "pretraining",
    "vit",
    "speech",
    "chat",
    "alignment",
    "evidence",
    "ctc",
    "bart",
    "wav2vec2",
    "codec",
    "viola",
    "flash",
    "flash_triton",
    "clip",
    "speculative",
    "arithmetic",
    "reasoning",
    "latent",
    "streaming",
    "evaluation",
)
# loaded on first use: the figures (with matplotlib's pyplot), the chapters' checkers and the ONNX export (tl.export,
# which needs onnx, from the test extra, only when it writes a file)
_LAZY = {"viz": "viz", "exercises": "exercises", "NotYetDone": "exercises", "export": "export"}

__all__ = [
    *(name for module in _ROOT for name in importlib.import_module(f"{__name__}.{module}").__all__),
    *_SUBMODULES,
    *_LAZY,
]


def __getattr__(name: str):
    """Load `viz`, `exercises` or `export` the first time it, or one of its names (a figure, NotYetDone), is used."""
    if name in _LAZY:
        module = importlib.import_module(f"{__name__}.{_LAZY[name]}")  # once imported, a plain attribute
        return module if name == _LAZY[name] else getattr(module, name)
    if not name.startswith("_"):
        viz = importlib.import_module(f"{__name__}.viz")
        if name in viz.__all__:
            return getattr(viz, name)
    raise AttributeError(f"module 'transformer_lib' has no attribute {name!r}")


def __dir__() -> list[str]:
    viz = importlib.import_module(f"{__name__}.viz")
    return sorted(set(globals()) | set(__all__) | set(viz.__all__))
