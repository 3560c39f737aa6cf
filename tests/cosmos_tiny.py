"""Kept for old imports (`from tests.cosmos_tiny import ...`): the builders live in :mod:`kosmos_env.testing.cosmos_tiny`."""
from kosmos_env.testing.cosmos_tiny import *  # noqa: F401,F403
from kosmos_env.testing.cosmos_tiny import __all__  # noqa: F401
