"""VLM judge batching: per-rollout seeded votes, one vision encoding and one prompt prefill per rollout,
batched verdicts equal to one-by-one ones, memory-budget batches."""

import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="needs the models extra (pip install -e '.[models]')")

from kosmos_env.judges.base import Rollout  # noqa: E402
from kosmos_env.judges.vlm import VLMJudge, rollout_seed  # noqa: E402
from kosmos_env.testing import qwen_tiny  # noqa: E402

SMALL = {"max_pixels": 56 * 56, "min_pixels": 28 * 28, "max_new_tokens": 8}


def rollout(n=9, seed=0, instruction="put the carrot on the plate"):
    rng = np.random.default_rng(seed)
    return Rollout(
        frames=rng.integers(0, 255, (n, 64, 64, 3), dtype=np.uint8),
        instruction=instruction,
        actions=np.zeros((n - 1, 7), np.float32),
        fps=5.0,
    )


@pytest.fixture(scope="module")
def qwen25():
    torch.set_num_threads(1)
    return qwen_tiny.build_qwen2_5_vl()


def test_votes_do_not_depend_on_batch_mates_and_video_is_encoded_once(qwen25):
    model, tok = qwen25
    judge = VLMJudge(model=model, tokenizer=tok, k=3, min_valid=1, batch_size=4, seed=5, **SMALL)
    rolls = [
        rollout(9, seed=1),
        rollout(13, seed=2),
        rollout(5, seed=3, instruction="stack the green block on the yellow block"),
    ]
    encoded = []
    hook = model.model.visual.register_forward_hook(lambda mod, args, out: encoded.append(args[0].shape[0]))
    try:
        together = judge.judge_batch(rolls)
    finally:
        hook.remove()
    # each video goes through the vision tower once (with its prompt's prefill), not k times
    items = [judge._inputs(r) for r in rolls]
    assert encoded == [len(it["patches"]) for it in items]
    assert [j.extras["batch_rollouts"] for j in together] == [3, 3, 3]
    raw = lambda j: j.extras["raw_answers"]  # noqa: E731
    alone = judge.judge_batch([rolls[2]])[0]
    reordered = judge.judge_batch([rolls[2], rolls[0]])
    assert raw(alone) == raw(together[2]) == raw(reordered[0])
    assert raw(reordered[1]) == raw(together[0])
    assert len(set(raw(together[0]))) > 1  # the k samples of one rollout differ
    # the seed is a function of the judge seed and the rollout's content
    assert rollout_seed(5, rolls[0]) == rollout_seed(5, rollout(9, seed=1)) != rollout_seed(6, rolls[0])
    other = VLMJudge(model=model, tokenizer=tok, k=3, min_valid=1, seed=6, **SMALL).judge(rolls[2])
    assert raw(other) != raw(alone)


def test_memory_budget_sizes_the_batches(qwen25):
    model, tok = qwen25
    rolls = [rollout(9, seed=i) for i in range(5)]
    capped = VLMJudge(model=model, tokenizer=tok, k=2, min_valid=1, batch_size=4, **SMALL)
    items = [capped._inputs(r) for r in rolls]
    assert capped.plan_batches(items) == [[0, 1, 2, 3], [4]]
    per = capped.estimate_bytes(items[0])
    assert per > 0
    # a budget of just over two rollouts' estimate gives batches of two (the cap of 4 not reached)
    budget = VLMJudge(
        model=model, tokenizer=tok, k=2, min_valid=1, batch_size=4, memory_budget_mb=2.5 * per / 2**20, **SMALL
    )
    assert budget.plan_batches(items) == [[0, 1], [2, 3], [4]]
    # below one rollout's estimate, each rollout still gets a batch of its own
    tiny = VLMJudge(model=model, tokenizer=tok, k=2, min_valid=1, batch_size=4, memory_budget_mb=1e-6, **SMALL)
    assert tiny.plan_batches(items) == [[0], [1], [2], [3], [4]]
    # more samples per rollout cost more memory
    k4 = VLMJudge(model=model, tokenizer=tok, k=4, min_valid=1, **SMALL)
    assert k4.estimate_bytes(items[0]) > per
    with pytest.raises(ValueError, match="memory_budget_mb"):
        VLMJudge(model=model, tokenizer=tok, memory_budget_mb=0, **SMALL)


def mixed_rollouts():
    """Videos of different lengths and two instructions: the batch's prompts need left padding."""
    return [
        rollout(9, seed=1),
        rollout(13, seed=2),
        rollout(5, seed=3, instruction="stack the green block on the yellow block"),
        rollout(21, seed=4),
    ]


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_batched_verdicts_and_scores_equal_one_by_one(family, qwen25):
    model, tok = qwen25 if family == "qwen2_5_vl" else qwen_tiny.build_qwen3_vl()
    judge = VLMJudge(model=model, tokenizer=tok, k=3, min_valid=1, batch_size=4, seed=2, **SMALL)
    rolls = mixed_rollouts()
    assert len({len(judge._inputs(r)["ids"]) for r in rolls}) > 1  # padding is exercised
    together = judge.judge_batch(rolls)
    assert [j.extras["batch_rollouts"] for j in together] == [4] * 4
    for r, batched in zip(rolls, together, strict=True):
        alone = judge.judge(r)
        assert alone.extras["batch_rollouts"] == 1
        assert (batched.success, batched.score, batched.votes) == (alone.success, alone.score, alone.votes)
        assert batched.extras["raw_answers"] == alone.extras["raw_answers"]
        assert batched.extras["generated_tokens"] == alone.extras["generated_tokens"]


def generate_over_whole_prompt(judge, item, seed):
    """Reference: the model's own ``generate`` on the full prompt, its k samples by ``num_return_sequences``."""
    from transformers import LogitsProcessorList

    from kosmos_env.judges.vlm import _SeededSampler

    ids = torch.tensor([item["ids"]])
    mm = torch.zeros_like(ids, dtype=torch.int32)
    mm[ids == judge._video_token_id] = 2
    extra = {"second_per_grid_ts": torch.tensor([item["second_per_grid"]])} if judge.family == "qwen2_5_vl" else {}
    sampler = _SeededSampler([seed + j for j in range(judge.k)], judge.temperature, judge.top_p)
    with torch.inference_mode():
        out = judge.model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            mm_token_type_ids=mm,
            pixel_values_videos=torch.from_numpy(item["patches"]),
            video_grid_thw=torch.tensor([item["grid"]]),
            **extra,
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            num_return_sequences=judge.k,
            logits_processor=LogitsProcessorList([sampler]),
            max_new_tokens=judge.max_new_tokens,
            pad_token_id=judge.tokenizer.pad_token_id,
        )
    return judge.tokenizer.batch_decode(out[:, ids.shape[1] :], skip_special_tokens=True)


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_prefill_once_per_rollout_samples_what_generate_samples_over_the_whole_prompt(family, qwen25):
    # the judge prefills each prompt once and decodes its k rows from a repeated, left-padded cache;
    # the tokens must be the ones generate draws when it prefills the whole prompt k times itself
    model, tok = qwen25 if family == "qwen2_5_vl" else qwen_tiny.build_qwen3_vl()
    judge = VLMJudge(model=model, tokenizer=tok, k=3, min_valid=1, batch_size=4, seed=9, **SMALL)
    rolls = mixed_rollouts()
    items = [judge._inputs(r) for r in rolls]
    seeds = [rollout_seed(judge.seed, r) for r in rolls]
    texts, _ = judge._generate(items, seeds)
    reference = [t for it, s in zip(items, seeds, strict=True) for t in generate_over_whole_prompt(judge, it, s)]
    assert texts == reference
    assert len(set(texts)) > judge.k  # the rows differ: nothing constant passes this


def test_preallocated_cache_layer_keeps_dynamic_layer_semantics_under_inherited_methods():
    """Decode writes into the preallocated buffers in place; transformers' own crop, batch
    selection and reset (which assign ``keys`` then ``values``) leave a layer that reads and
    grows like a ``DynamicLayer`` holding the same tensors."""
    from kosmos_env.judges.kv_cache import preallocated_layer_class

    layer_class = preallocated_layer_class()
    g = torch.Generator().manual_seed(0)
    keys, values = torch.randn(2, 2, 5, 4, generator=g), torch.randn(2, 2, 5, 4, generator=g)
    key_buffer, value_buffer = torch.zeros(2, 2, 8, 4), torch.zeros(2, 2, 8, 4)
    key_buffer[:, :, :3], value_buffer[:, :, :3] = keys[:, :, :3], values[:, :, :3]
    layer = layer_class(key_buffer, value_buffer, 3)
    assert layer.get_seq_length() == 3
    for t in (3, 4):
        got_k, got_v = layer.update(keys[:, :, t : t + 1], values[:, :, t : t + 1])
    assert torch.equal(got_k, keys) and torch.equal(got_v, values)
    assert got_k.data_ptr() == key_buffer.data_ptr()  # written in place, not concatenated
    layer.crop(-1)
    assert torch.equal(layer.keys, keys[:, :, :4]) and torch.equal(layer.values, values[:, :, :4])
    got_k, got_v = layer.update(keys[:, :, 4:5], values[:, :, 4:5])  # no room left: grows
    assert torch.equal(got_k, keys) and torch.equal(got_v, values)
    layer.batch_select_indices(torch.tensor([1]))
    assert torch.equal(layer.keys, keys[1:]) and torch.equal(layer.values, values[1:])
    layer.reset()
    assert layer.get_seq_length() == 0
    got_k, got_v = layer.update(keys[:1, :, :2], values[:1, :, :2])
    assert torch.equal(got_k, keys[:1, :, :2]) and torch.equal(got_v, values[:1, :, :2])
