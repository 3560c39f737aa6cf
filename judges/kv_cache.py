"""The judge's decode cache: transformers key/value-cache code, kept apart from the judge.

This is the one place that leans on transformers' cache internals (``transformers.cache_utils``:
``DynamicCache``, ``DynamicLayer`` and the attributes ``generate`` reads and assigns), which
change between major versions; the VLM judge (:mod:`kosmos_env.judges.vlm`) only calls
:func:`prompt_keys_values` and :func:`decode_cache`. The models extra pins the transformers
version this is written for (the judge checks it before loading a model).

The judge prefills each prompt once as a single unpadded row and decodes its ``k`` samples
together: :func:`decode_cache` left-pads the prompts' keys and values to a common width,
repeats each item's row ``k`` times and allocates the room for the tokens to come once, so
decoding writes in place instead of concatenating every row's keys and values at each step.
transformers is imported on first use only.
"""

from __future__ import annotations

import functools
from typing import Any, Sequence


def prompt_keys_values(output: Any) -> list[tuple[Any, Any]]:
    """Per layer, the ``(keys, values)`` of a forward pass's cache (one prompt row)."""
    return [(layer.keys, layer.values) for layer in cache_of(output).layers]


def decode_cache(
    model_config: Any, per_item: Sequence[Sequence[tuple[Any, Any]]], width: int, repeats: int, room: int
) -> Any:
    """A ``DynamicCache`` for ``generate`` whose layers are :func:`preallocated_layers` of the items'
    prompt caches (see there for ``width``, ``repeats`` and ``room``)."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model_config)
    cache.layers = preallocated_layers(per_item, width, repeats, room)
    return cache


def cache_of(output: Any) -> Any:
    """The key/value cache a forward pass returned (``cache`` in transformers 5, ``past_key_values`` before)."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def preallocated_layers(
    per_item: Sequence[Sequence[tuple[Any, Any]]], width: int, repeats: int, room: int
) -> list[Any]:
    """Per layer, a preallocated cache layer (:func:`preallocated_layer_class`) holding the items' ``(1, heads, length, dim)`` keys and
    values left-padded with zeros to ``width`` positions, each item's row repeated ``repeats`` times
    (its k samples), with ``room`` more positions allocated for the tokens to come.

    The padded positions are masked out by the attention mask ``generate`` is given, so their
    zeros never enter a softmax."""
    layer_class = preallocated_layer_class()
    layers = []
    for layer in range(len(per_item[0])):
        buffers = []
        for kind in (0, 1):
            first = per_item[0][layer][kind]
            # positions past ``width`` are written by update() before any view shows them
            buf = first.new_empty((len(per_item) * repeats, first.shape[1], width + room, first.shape[3]))
            for i, kv in enumerate(per_item):
                part = kv[layer][kind]
                rows, start = slice(i * repeats, (i + 1) * repeats), width - part.shape[2]
                buf[rows, :, :start] = 0.0  # left padding: masked out, but must not hold NaN or inf
                buf[rows, :, start:width] = part  # one item's prompt, broadcast over its k rows
            buffers.append(buf)
        layers.append(layer_class(buffers[0], buffers[1], width))
    return layers


@functools.lru_cache(maxsize=None)
def preallocated_layer_class() -> type:
    """The preallocated cache-layer class, defined on first use so that transformers is imported lazily."""
    from transformers.cache_utils import DynamicLayer

    class PreallocatedLayer(DynamicLayer):
        """A decode cache layer whose keys and values live in buffers allocated at their final width.

        ``update`` writes the new positions in place, so attention sees the same keys and values
        (same shapes and values) as with transformers' ``DynamicLayer``, which concatenates a new
        tensor at every step. ``keys`` / ``values`` are views of the filled part of the buffers (each
        with its own length, as transformers assigns them one after the other), as ``DynamicLayer``
        users expect; whatever tensor transformers assigns to them (crop, batch
        selection, reordering, offloading, reset) becomes the buffer, full, so every inherited
        method keeps working without an override. Subclassing ``DynamicLayer`` relies on
        transformers 5.x's cache-layer interface (``transformers.cache_utils``; the models extra
        pins ``transformers>=5.24``).
        """

        def __init__(self, keys: Any, values: Any, length: int):
            super().__init__()
            self.device = keys.device
            self.is_initialized = True
            self._key_buffer, self._value_buffer = keys, values
            self._key_length = self._value_length = int(length)

        @property
        def keys(self) -> Any:
            return None if self._key_buffer is None else self._key_buffer[..., : self._key_length, :]

        @keys.setter
        def keys(self, tensor: Any) -> None:
            self._key_buffer, self._key_length = tensor, _filled_length(tensor)

        @property
        def values(self) -> Any:
            return None if self._value_buffer is None else self._value_buffer[..., : self._value_length, :]

        @values.setter
        def values(self, tensor: Any) -> None:
            self._value_buffer, self._value_length = tensor, _filled_length(tensor)

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            start, end = self._key_length, self._key_length + key_states.shape[-2]
            if self._key_buffer.dim() != 4 or end > self._key_buffer.shape[-2]:
                # out of room (generate never asks for more than was allocated): grow to twice the need
                self._key_buffer = _grown(self._key_buffer, key_states, start, 2 * end)
                self._value_buffer = _grown(self._value_buffer, value_states, start, 2 * end)
            self._key_buffer[:, :, start:end] = key_states
            self._value_buffer[:, :, start:end] = value_states
            self._key_length = self._value_length = end
            return self.keys, self.values

    return PreallocatedLayer


def _filled_length(tensor: Any) -> int:
    """Positions held by a cache tensor ``(batch, heads, positions, dim)``; 0 for None or the empty
    1-D tensor transformers starts a layer with."""
    return 0 if tensor is None or tensor.dim() != 4 else int(tensor.shape[-2])


def _grown(buffer: Any, new: Any, length: int, width: int) -> Any:
    """A ``width``-position buffer shaped like ``new`` holding ``buffer``'s first ``length`` positions."""
    out = new.new_empty(new.shape[:2] + (width, new.shape[3]))
    if length:
        out[:, :, :length] = buffer[:, :, :length]
    return out
