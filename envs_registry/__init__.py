"""Versioned env specs as data: one JSON file per env id."""
