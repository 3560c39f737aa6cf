"""Check a campaign's policies before any episode runs.

A policy that cannot be built (unknown name, a keyword it does not take, a value out of range,
a remote server that is not there) would otherwise fail inside every worker on every episode,
and the campaign would "complete" as all errors. Each policy is built once here, in the
process that starts the campaign, asked for its content hash, and closed again.
"""

from __future__ import annotations

from typing import Iterable

from kosmos_env.campaign.design import CampaignConfig


class PolicyCheckError(ValueError):
    """A ``--policy`` that cannot be built; the message is one line naming it and the cause."""


class JudgeCheckError(ValueError):
    """The campaign's judge cannot be built or its artifacts cannot be read; one line naming it."""


def check_weights(config: CampaignConfig) -> None:
    """The extras the campaign's env and judge need are installed (else a ModuleNotFoundError naming the
    extra) and every downloaded weight is on disk, or one MissingWeightsError naming them all (:func:`kosmos_env.required_weights.require_weights`, as ``gymnasium.make`` and the
    doctor use): checked before the run folder is created, so a missing weight leaves nothing behind."""
    from kosmos_env.required_weights import require_ready
    from kosmos_env.spec import load_spec

    spec = load_spec(config.env_id).with_overrides(**dict(config.spec_overrides))
    require_ready(spec, None, dict(config.judge))  # a missing extra first: its weights could not load anyway


def _missing_extra(exc: BaseException) -> str | None:
    from kosmos_env.errors import missing_module_message

    return missing_module_message(exc)


def check_judge(config: CampaignConfig) -> None:
    """Build the campaign's judge once and let it check its artifacts (``preflight()``, where a
    judge has one: cheap checks only, e.g. the frame classifier's weights file and its sha256), so
    a corrupt weights file stops the campaign here, named as the judge's fault, instead of failing
    every episode's judging and being retried as if the policy had failed."""
    from kosmos_env.judges import make_judge

    kind = dict(config.judge).get("type", "?")
    try:
        judge = make_judge(dict(config.judge))
        if hasattr(judge, "preflight"):
            judge.preflight()
    except Exception as exc:  # noqa: BLE001 - the user gets one line naming the judge
        lines = str(exc).strip().splitlines()
        why = _missing_extra(exc) or (lines[0] if lines else type(exc).__name__)
        raise JudgeCheckError(f"judge {kind!r} is not usable: {why}") from None


def check_policies(config: CampaignConfig | Iterable) -> None:
    """Build every policy of ``config`` once; raise :class:`PolicyCheckError` for the first that fails."""
    from kosmos_env.policies import make_policy

    refs = config.policies if isinstance(config, CampaignConfig) else list(config)
    for ref in refs:
        policy = None
        try:
            policy = make_policy(ref.name, **dict(ref.kwargs))
            policy.content_hash()
        except Exception as exc:  # noqa: BLE001 - whatever the adapter raised, the user gets one line
            lines = str(exc).strip().splitlines()
            why = lines[0] if lines else type(exc).__name__
            if isinstance(exc, TypeError) and "argument" in why:
                why = f"bad keyword argument: {why}"
            elif _missing_extra(exc):
                why = _missing_extra(exc)
            elif isinstance(exc, (ImportError, AttributeError)):
                why = f"cannot load it ({type(exc).__name__}: {why})"
            raise PolicyCheckError(f"--policy {ref.label!r} cannot be built: {why}") from None
        finally:
            if policy is not None:
                try:
                    policy.close()
                except Exception:  # noqa: BLE001 - closing a probe must not hide the check's result
                    pass
