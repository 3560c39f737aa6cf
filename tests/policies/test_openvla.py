"""OpenVLA / MiniVLA action-token decoding against the published scheme, and OpenVLAPolicy end to end
on a tiny randomly initialised vision-language model built here (no download)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from kosmos_env.policies.minivla import minivla_decoder
from kosmos_env.policies.openvla import OPENVLA_PROMPT, ActionTokenDecoder, OpenVLAPolicy, action_stats, decode_actions
from tests.conftest import requires_extra
from tests.support.openvla import save_tiny_openvla

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Illustrative Bridge-like statistics (per-dim q01/q99; the gripper is left out of the mask as in
# OpenVLA's bridge_orig statistics).
Q01 = [-0.03, -0.04, -0.03, -0.08, -0.09, -0.21, 0.0]
Q99 = [0.03, 0.04, 0.04, 0.08, 0.08, 0.20, 1.0]
MASK = [True] * 6 + [False]
NORM_STATS = {"bridge_orig": {"action": {"q01": Q01, "q99": Q99, "mask": MASK}}}


def test_token_id_to_bin_centre_by_hand():
    dec = ActionTokenDecoder()  # vocab 32000, 256 edges on [-1, 1]
    assert dec.bin_centers.shape == (255,) and dec.first_action_token == 31744
    # edges are -1 + 2k/255; the centre of bin i is -1 + (2i + 1)/255
    # id 31999 -> index clip(32000 - 31999 - 1) = 0 -> -1 + 1/255
    # id 31744 -> index 255 -> clipped to 254 -> -1 + 509/255
    # id 31872 -> index 127 -> -1 + 255/255 = 0.0
    # ids above the vocabulary clip to index 0; far below, to 254
    ids = np.array([31999, 31744, 31872, 32050, 100])
    expected = np.array([-1 + 1 / 255, -1 + 509 / 255, 0.0, -1 + 1 / 255, -1 + 509 / 255])
    np.testing.assert_allclose(dec.decode(ids), expected, atol=1e-12)


def test_encode_is_the_training_tokenisation_and_decode_inverts_it_within_half_a_bin():
    dec = ActionTokenDecoder()
    # np.digitize on the 256 edges: -1 -> 1 -> id 31999; 1 -> 256 -> id 31744; 0 -> 128 -> id 31872
    np.testing.assert_array_equal(dec.encode([-1.0, 1.0, 0.0, 5.0]), [31999, 31744, 31872, 31744])
    x = np.random.default_rng(0).uniform(-1, 1, 1000)
    assert np.max(np.abs(dec.decode(dec.encode(x)) - x)) <= 1 / 255 + 1e-12


def test_unnormalisation_with_checkpoint_stats_by_hand():
    stats = action_stats(NORM_STATS, "bridge_orig")
    dec = ActionTokenDecoder()
    ids = np.array([31999, 31744, 31872, 31872, 31999, 31744, 31745])  # bins 0, 254, 127, 127, 0, 254, 254
    out = decode_actions(ids, dec, stats)
    lo, hi = np.array(Q01), np.array(Q99)
    n0, n254 = -1 + 1 / 255, -1 + 509 / 255
    # a = 0.5 (n + 1)(q99 - q01) + q01
    expected = [
        0.5 * (n0 + 1) * 0.06 - 0.03,
        0.5 * (n254 + 1) * 0.08 - 0.04,
        0.5 * 1.0 * 0.07 - 0.03,  # n = 0 -> the midpoint of [q01, q99]
        0.5 * 1.0 * 0.16 - 0.08,
        0.5 * (n0 + 1) * 0.17 - 0.09,
        0.5 * (n254 + 1) * 0.41 - 0.21,
        n254,  # gripper: not in the mask, passes through
    ]
    np.testing.assert_allclose(out, expected, atol=1e-12)
    assert np.all(out[:6] >= lo[:6]) and np.all(out[:6] <= hi[:6])
    with pytest.raises(ValueError, match="not in the checkpoint's norm_stats"):
        action_stats(NORM_STATS, "fractal")
    with pytest.raises(ValueError, match="pass unnorm_key"):
        action_stats({"a": NORM_STATS["bridge_orig"], "b": NORM_STATS["bridge_orig"]}, None)


@requires_extra("models")  # tokenizers and transformers
def test_minivla_maps_the_appended_extra_tokens():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    base = {f"w{i}": i for i in range(1000)}  # stands in for the Qwen2.5 vocabulary
    tk = Tokenizer(models.WordLevel(base, unk_token="w0"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="w0")
    with pytest.raises(ValueError, match="not a MiniVLA tokenizer"):
        minivla_decoder(tok)
    tok.add_tokens([f"<extra_{i}>" for i in range(256)])
    assert len(tok) == 1256 and tok.vocab_size == 1000
    dec = minivla_decoder(tok)
    # the last appended token is bin 0, the first appended token bin 255 -> clipped to 254
    assert tok.convert_tokens_to_ids("<extra_255>") == 1255 and tok.convert_tokens_to_ids("<extra_0>") == 1000
    np.testing.assert_allclose(dec.decode([1255, 1000, 1128]), [-1 + 1 / 255, -1 + 509 / 255, 0.0], atol=1e-12)
    # and the ids it would train on are the appended tokens, never base vocabulary
    ids = dec.encode(np.linspace(-1, 1, 50))
    assert ids.min() >= 1000 and ids.max() <= 1255
    assert all(t.startswith("<extra_") for t in tok.convert_ids_to_tokens(ids.tolist()))


def test_openvla_prompt_is_the_published_one():
    assert (
        OPENVLA_PROMPT.format(instruction="Put The Carrot".lower())
        == "In: What action should the robot take to put the carrot?\nOut:"
    )


def test_missing_checkpoint_gives_a_clear_error(tmp_path):
    from kosmos_env.worlds.base import MissingWeightsError

    with pytest.raises(MissingWeightsError, match="huggingface-cli download openvla/openvla-7b"):
        OpenVLAPolicy(model_path=str(tmp_path / "nowhere"))


# -- the whole adapter on a tiny random VLM --------------------------------------------------------
@pytest.mark.slow
@requires_extra("models")
def test_openvla_policy_end_to_end_on_a_tiny_random_vlm(tmp_path):
    import torch

    save_tiny_openvla(tmp_path, NORM_STATS)
    policy = OpenVLAPolicy(model_path=str(tmp_path), prompt="<image>" + OPENVLA_PROMPT, empty_token_id=None)
    assert policy.decoder.vocab_end == 320  # from the model config: the last 256 ids are action tokens
    # Make the output layer prefer token 119 at every position (a real forward pass still runs):
    # 119 -> bin clip(320 - 119 - 1) = 200 -> n = -1 + 401/255.
    head = policy.model.lm_head
    biased = torch.nn.Linear(head.in_features, head.out_features, bias=True)
    with torch.no_grad():
        biased.weight.zero_()
        biased.bias.zero_()
        biased.bias[119] = 10.0
    policy.model.lm_head = biased

    image = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)  # resized to 224
    policy.reset("Put the carrot on the plate", seed=0)
    ids = policy.predict_token_ids({"image": image, "instruction": "Put the carrot on the plate"})
    np.testing.assert_array_equal(ids, [119] * 7)
    action = policy.act({"image": image, "instruction": "Put the carrot on the plate"})
    n = -1 + 401 / 255
    expected = [0.5 * (n + 1) * (hi - lo) + lo for lo, hi in zip(Q01[:6], Q99[:6], strict=True)] + [
        n
    ]  # gripper in [0, 1] already
    assert action.dtype == np.float32 and action.shape == (7,)
    np.testing.assert_allclose(action, expected, atol=1e-6)

    thresholded = OpenVLAPolicy(
        model_path=str(tmp_path),
        prompt="<image>" + OPENVLA_PROMPT,
        empty_token_id=None,
        gripper_threshold=0.5,
        model=policy.model,
        processor=policy.processor,
    )
    assert thresholded.act({"image": image, "instruction": "x"})[6] == 1.0  # 0.57 >= 0.5 -> open
    h1 = policy.content_hash()
    assert len(h1) == 64 and h1 != thresholded.content_hash()  # settings are part of the identity
