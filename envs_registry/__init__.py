"""Versioned env specs as data: one JSON file per env id, and ``spec_hashes.json``, the frozen
spec hash of each id (an id names one hash for good; a changed spec is a new ``-vN``; see
:mod:`kosmos_env.spec`)."""
