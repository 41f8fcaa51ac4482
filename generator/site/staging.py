"""The build's staging area beside out_dir: the new site is written into a temporary folder and
swapped in whole; what a killed build left there is recovered or deleted by the next one.

Beside `<parent>/public` a build makes `.public-build-*` (the new tree, and the search documents
Pagefind reads, `.public-build-*-search-*`) and, during the swap, `.public-old-*` (the replaced
tree). The build lock (lock.py) is taken before recover runs, so a recovery never deletes the
staging area of a build that is still running.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..errors import RecordError
from . import pages


def make_work(out_dir: Path) -> Path:
    """A fresh staging folder for the new tree, readable by a web server once swapped in."""
    work = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-build-", dir=out_dir.parent))
    work.chmod(0o755)  # mkdtemp makes it 0700; a published site must be readable by a web server
    return work


def discard(old: Path, background: bool) -> None:
    """Delete a replaced tree. Its MARKER goes first, so that whatever an interrupted deletion leaves
    is never taken for a site by recover; in the background, by a detached `rm -rf`."""
    (old / pages.MARKER).unlink(missing_ok=True)
    if background and os.name == "posix":
        try:
            subprocess.Popen(["rm", "-rf", "--", str(old)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
            return
        except OSError:
            pass
    shutil.rmtree(old, ignore_errors=True)


def swap_in(work: Path, out_dir: Path, background_cleanup: bool = False) -> None:
    """Replace out_dir by work: two renames in one folder, the old tree deleted only afterwards
    (by a detached `rm -rf` when background_cleanup: the command then returns at once).

    Only an empty folder or an earlier build (it holds MARKER) is replaced: `--out ~` must not
    delete a home directory."""
    if out_dir.exists() or out_dir.is_symlink():
        if not out_dir.is_dir() or out_dir.is_symlink():
            raise RecordError(str(out_dir), "out", str(out_dir), "exists and is not a folder; not replacing it")
        if not (out_dir / pages.MARKER).is_file() and any(out_dir.iterdir()):
            raise RecordError(str(out_dir), "out", str(out_dir),
                              f"is not empty and holds no {pages.MARKER} from an earlier build; not replacing it")
        old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-old-", dir=out_dir.parent))
        old.rmdir()
        out_dir.rename(old)
        work.rename(out_dir)
        discard(old, background_cleanup)
    else:
        work.rename(out_dir)


def recover(out_dir: Path) -> None:
    """Undo what a build killed outright (SIGKILL, power loss) left beside out_dir: an old tree moved
    aside but not yet replaced goes back (only a whole one: a tree being deleted has lost its MARKER),
    and half-written temporary trees and half-deleted old ones are deleted."""
    olds = sorted(out_dir.parent.glob(f".{out_dir.name}-old-*"))
    whole = [old for old in olds if (old / pages.MARKER).is_file()]
    if whole and not out_dir.exists() and not out_dir.is_symlink():
        whole[-1].rename(out_dir)
        olds.remove(whole[-1])
    for stale in [*olds, *out_dir.parent.glob(f".{out_dir.name}-build-*")]:
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
