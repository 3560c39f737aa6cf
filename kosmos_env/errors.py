"""Errors shared across layers, in one module that imports nothing of the package.

Worlds, policies and judges all raise :class:`MissingWeightsError`; specs and task suites raise
:class:`SpecError`; plug-in resolution raises :class:`PluginError`. Keeping them here lets each
layer raise them without importing another layer (``kosmos_env.worlds.base.MissingWeightsError``
and ``kosmos_env.spec.SpecError`` remain importable under their old names).
"""
from __future__ import annotations


class MissingWeightsError(RuntimeError):
    """A real model was asked for but its weights are not on disk (the message says what to fetch)."""


class SpecError(ValueError):
    """An env spec file or override is invalid (the message names the field)."""


class PluginError(ValueError):
    """A world, policy, judge or env named in data cannot be used: unknown, not importable without
    the opt-in, not a class, or a class of the wrong kind. Raised before anything is called."""


__all__ = ["MissingWeightsError", "PluginError", "SpecError"]
