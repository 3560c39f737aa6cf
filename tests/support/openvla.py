"""A tiny randomly initialised OpenVLA-shaped vision-language model saved to a folder (no download),
for the OpenVLA adapter's end-to-end test and the content-hash test."""

from __future__ import annotations

import json
from pathlib import Path


def save_tiny_openvla(path: Path, norm_stats: dict, vocab: int = 320) -> Path:
    """Save to ``path`` a 2-layer Llama + 1-layer CLIP LLaVA (seeded random weights) with a word-level
    tokenizer, a 224 px processor and ``norm_stats`` as OpenVLA's dataset_statistics.json."""
    import torch
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
        PreTrainedTokenizerFast,
    )

    words = ["<unk>", "<s>", "</s>", "<image>", "In:", "What", "action", "should", "the", "robot", "take", "to"]
    table = {w: i for i, w in enumerate(words)}
    table.update({f"t{i}": i for i in range(len(words), vocab)})
    tk = Tokenizer(models.WordLevel(table, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="</s>"
    )
    tok.add_tokens([AddedToken("<image>", special=True, normalized=False)])
    processor = LlavaProcessor(
        image_processor=CLIPImageProcessor(size={"shortest_edge": 224}, crop_size={"height": 224, "width": 224}),
        tokenizer=tok,
        patch_size=32,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        image_token="<image>",
    )
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=224,
            patch_size=32,
            projection_dim=16,
        ),
        text_config=LlamaConfig(
            vocab_size=vocab,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=256,
        ),
        image_token_index=table["<image>"],
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
    )
    torch.manual_seed(0)
    LlavaForConditionalGeneration(config).save_pretrained(path)
    processor.save_pretrained(path)
    (path / "dataset_statistics.json").write_text(json.dumps(norm_stats))
    return path
