"""The browser console of ``kosmos-env serve``: watch, browse, compare and cancel campaigns.

- :mod:`campaigns`: find campaign folders and read their ledgers read-only;
- :mod:`episode_view`, :mod:`compare`: what the episode and comparison pages show;
- :mod:`app`: the FastAPI app (pages, server-sent events, artifacts by hash, cancel);
- :mod:`server`: start it with uvicorn on a loopback port and print the token.

FastAPI, uvicorn and jinja2 (the ``console`` extra) are imported only by :mod:`app` and
:mod:`server`, never by ``import kosmos_env``.
"""
