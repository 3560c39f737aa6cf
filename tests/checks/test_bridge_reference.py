"""The shipped real Bridge episode decodes, matches its hash, and its negatives differ from it as named."""

import numpy as np
import pytest

from kosmos_env.checks import bridge_reference as br


def test_real_episode_and_negatives():
    ep = br.load_real_episode()
    assert ep.frames.shape == (37, 480, 640, 3) and ep.frames.dtype == np.uint8
    assert ep.kind == "real" and ep.instruction and ep.fps == 5.0
    # the real episode moves: consecutive frames differ
    assert np.abs(np.diff(ep.frames.astype(np.int16), axis=0)).mean() > 0.5
    frozen = br.negative("frozen", ep)
    assert frozen.frames.shape == ep.frames.shape and (frozen.frames == ep.frames[0]).all()
    panned = br.negative("panned", ep)
    assert (panned.frames[0] == ep.frames[0]).all() and not (panned.frames[-1] == ep.frames[-1]).all()
    shuffled = br.negative("shuffled", ep, seed=3)
    assert (shuffled.frames[0] == ep.frames[0]).all()
    assert sorted(map(bytes, shuffled.frames.reshape(37, -1)[:, ::997])) == sorted(
        map(bytes, ep.frames.reshape(37, -1)[:, ::997])
    )
    assert (br.negative("shuffled", ep, seed=3).frames == shuffled.frames).all()
    with pytest.raises(ValueError, match="unknown negative"):
        br.negative("mirrored", ep)


def test_license_and_notice_ship_beside_the_frames():
    assert "Apache License" in br.reference_path("LICENSE-ManiSkill2_real2sim").read_text()
    notice = br.reference_path("NOTICE").read_text()
    assert "ManiSkill2_real2sim" in notice and br.EPISODE_SHA256 in notice
