"""Checkers for the chapters' exercises, one module per chapter: each runs the learner's answer on inputs of its own.

A checker returns "Correct!" or a verdict: a hint that names what is wrong (a shape, the mask convention, a
forgotten scaling, a failing input) and carries the mistake's id (`.mistake`). A stub that returns None gets
"Not answered yet"; in the student edition the stubs raise `NotYetDone`, which the checker lets through.
Course material, not model code: no model or layer imports it. The names here are the chapter modules'
own ``__all__`` lists: a new checker is added to its module's list and nowhere else.
"""

import sys

from ._common import CORRECT, NotYetDone
from .ch00_template import *  # noqa: F403
from .ch01_tokenization import *  # noqa: F403
from .ch02_token_embedding import *  # noqa: F403
from .ch03_positional_encoding import *  # noqa: F403
from .ch04_attention import *  # noqa: F403
from .ch05_masks import *  # noqa: F403
from .ch06_feed_forward_and_norm import *  # noqa: F403
from .ch07_training import *  # noqa: F403
from .ch08_encoder import *  # noqa: F403
from .ch09_decoder import *  # noqa: F403
from .ch10_language_model import *  # noqa: F403
from .ch11_transformer import *  # noqa: F403
from .ch12_modern_blocks import *  # noqa: F403
from .ch13_inside import *  # noqa: F403
from .ch14_modern_blocks_two import *  # noqa: F403
from .ch15_pretraining import *  # noqa: F403
from .ch16_images_and_sound import *  # noqa: F403
from .ch17_assistant import *  # noqa: F403
from .ch18_wav2vec2_and_bart import *  # noqa: F403
from .ch19_sound_tokens_and_clip import *  # noqa: F403
from .ch20_attention_at_scale import *  # noqa: F403
from .ch21_showing_its_work import *  # noqa: F403

_CHAPTERS = sorted(name for name in sys.modules if name.startswith(f"{__name__}.ch"))  # the modules imported above
__all__ = ["CORRECT", "NotYetDone", *(name for chapter in _CHAPTERS for name in sys.modules[chapter].__all__)]
