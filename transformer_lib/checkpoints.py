"""Checkpoint files: save a model with its config and notes, load it back by name or path.

The book ships a few small trained models in `transformer_lib/checkpoints/`; `recipes` holds
the training runs that made them (``python tools/train_checkpoints.py NAME`` re-makes one).
A file holds the model's class name, its config, any extra constructor arguments, the weights
and free-form notes (`meta`: steps, losses, held-out results).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch
from torch import nn

from .bart import BartForConditionalGeneration
from .bert import BertClassifier, BertForMaskedLM
from .clip import CLIPModel
from .codec import Codec
from .config import TransformerConfig
from .models import DecoderOnlyLM, EncoderClassifier, EncoderRegressor, Transformer
from .speech import SpeechTranscriber
from .vit import VisionTransformer
from .wav2vec2 import Wav2Vec2ForCTC, Wav2Vec2ForPreTraining

__all__ = ["load_checkpoint", "save_checkpoint"]

CHECKPOINT_DIR = Path(__file__).resolve().parent / "checkpoints"
_MODELS = {
    cls.__name__: cls
    for cls in (
        Transformer,
        EncoderClassifier,
        EncoderRegressor,
        DecoderOnlyLM,
        BertForMaskedLM,
        BertClassifier,
        VisionTransformer,
        SpeechTranscriber,
        Wav2Vec2ForPreTraining,
        Wav2Vec2ForCTC,
        BartForConditionalGeneration,
        CLIPModel,
        Codec,
    )
}


def save_checkpoint(model: nn.Module, path: str | Path, init: dict | None = None, **meta) -> Path:
    """Write the model's class, config, extra constructor arguments `init`, weights and `meta` to `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "class": type(model).__name__,
            "config": asdict(model.config) if hasattr(model, "config") else None,  # a codec has none
            "init": dict(init or {}),
            "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
            "meta": meta,
        },
        path,
    )
    return path


def load_checkpoint(name: str | Path, device: torch.device | str | None = None) -> tuple[nn.Module, dict]:
    """A shipped checkpoint by name ("bracket_classifier") or a file path -> (model in eval mode, meta)."""
    path = Path(name)
    if not path.suffix:
        path = CHECKPOINT_DIR / f"{name}.pt"
    if not path.is_file():
        shipped = sorted(p.stem for p in CHECKPOINT_DIR.glob("*.pt"))
        raise FileNotFoundError(f"no checkpoint at {path}; the package ships {shipped}")
    saved = torch.load(path, map_location="cpu", weights_only=True)
    # a second config among the constructor's arguments (CLIP's vision_config) is saved as a dict: a config again
    init = {k: TransformerConfig(**v) if k.endswith("_config") else v for k, v in saved["init"].items()}
    config = () if saved["config"] is None else (TransformerConfig(**saved["config"]),)
    model = _MODELS[saved["class"]](*config, **init)
    model.load_state_dict(saved["state_dict"])
    return model.to(device or "cpu").eval(), saved["meta"]
