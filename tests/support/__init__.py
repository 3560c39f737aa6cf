"""Helpers shared by tests in several folders (no tests here): paths, test-only policies, campaign
and bundle builders. Fixtures shared across files live in ``conftest.py`` files instead."""
