"""A rehearsal is a new cluster every time: its work directory starts empty, and only its own is emptied."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamstack.errors import StreamstackError
from streamstack.rehearsal.run import WORK_DIR_MARKER, fresh_work_dir


def test_the_next_rehearsal_empties_the_last_ones_work_dir(tmp_path: Path) -> None:
    """A second `streamstack rehearse` on the same work dir failed: "formatting Kafka storage failed", since
    the last rehearsal's broker storage (another cluster id) and checkpoints were still there."""
    work_dir = fresh_work_dir(tmp_path / "rehearsal")
    (work_dir / "kafka" / "data").mkdir(parents=True)
    (work_dir / "kafka" / "data" / "meta.properties").write_text("cluster.id=the-last-rehearsals\n")
    (work_dir / "volumes" / "user-view-checkpoints" / "user-view" / "offsets").mkdir(parents=True)

    assert fresh_work_dir(work_dir) == work_dir
    assert [path.name for path in work_dir.iterdir()] == [WORK_DIR_MARKER]


def test_a_directory_that_is_not_a_rehearsals_is_refused_and_kept(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(StreamstackError, match=r"--work-dir .*not a rehearsal's work directory"):
        fresh_work_dir(mine)
    assert (mine / "notes.txt").read_text() == "keep me"
    assert fresh_work_dir(tmp_path / "new").is_dir()


def test_the_default_work_dir_is_ours_even_without_the_marker(tmp_path: Path) -> None:
    """`.streamstack/rehearsal` of a rehearsal older than the marker is emptied too."""
    default = tmp_path / ".streamstack" / "rehearsal"
    (default / "kafka").mkdir(parents=True)
    fresh_work_dir(default, ours=True)
    assert [path.name for path in default.iterdir()] == [WORK_DIR_MARKER]
